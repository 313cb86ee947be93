package mpi_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
	"github.com/ppgen/ppgen/runtime/transport"
)

// The send-first program: 1F1B on 2 ranks and 2 micro-batches, written by
// hand, with rank 1's 1SEND_B0 moved before its 1RECV_F1. Both comm streams
// then send before they receive:
//
//	rank 0: 0SEND_F0  0SEND_F1  0RECV_B0  0RECV_B1
//	rank 1: 1RECV_F0  1SEND_B0  1RECV_F1  1SEND_B1
//
// With buffered sends (ppgen's TCP and in-process transports, MPI without
// Sync) it completes and trains like sequential training. Under rendezvous
// semantics (MPI with Sync) 0SEND_F1 waits for 1RECV_F1, which comes after
// 1SEND_B0, which waits for 0RECV_B0, which comes after 0SEND_F1: a
// deadlock. ppgen's compiler refuses such a program (the generated 1F1B
// puts 1RECV_F1 first), so it is built here as a table for pipe.Interpret.
var (
	sendFirstSpec = pipe.Spec{Schedule: "1f1b-send-first", Ranks: 2, Stages: 2, Micro: 2,
		Slots: []int{2, 2}, RankOf: []int{0, 1}, Fingerprint: "test:1f1b-send-first"}
	sendFirstProgram = [][]pipe.Op{
		pipe.DecodeOps("LFLsFsRBRBO", []pipe.At{ // rank 0, as generated
			0x0000_0000_0000_ffff, // 0DATA_LOAD0 slot 0
			0x0000_0000_0000_ffff, // 0F0 slot 0
			0x0000_0001_0001_ffff, // 0DATA_LOAD1 slot 1
			0x0000_0000_0001_0000, // 0SEND_F0 peer 1, slot 0
			0x0000_0001_0001_ffff, // 0F1 slot 1
			0x0000_0001_0001_0001, // 0SEND_F1 peer 1, slot 1
			0x0000_0000_0001_0000, // 0RECV_B0 peer 1, slot 0
			0x0000_0000_0000_ffff, // 0B0 slot 0
			0x0000_0001_0001_0001, // 0RECV_B1 peer 1, slot 1
			0x0000_0001_0001_ffff, // 0B1 slot 1
			0xffff_ffff_ffff_ffff, // OPT_STEP
		}),
		pipe.DecodeOps("LrFBLSrFBSO", []pipe.At{ // rank 1: 1SEND_B0 before 1RECV_F1
			0x0001_0000_0000_ffff, // 1DATA_LOAD0 slot 0
			0x0001_0000_0000_0000, // 1RECV_F0 peer 0, slot 0
			0x0001_0000_0000_ffff, // 1F0 slot 0
			0x0001_0000_0000_ffff, // 1B0 slot 0
			0x0001_0001_0001_ffff, // 1DATA_LOAD1 slot 1
			0x0001_0000_0000_0000, // 1SEND_B0 peer 0, slot 0
			0x0001_0001_0000_0001, // 1RECV_F1 peer 0, slot 1
			0x0001_0001_0001_ffff, // 1F1 slot 1
			0x0001_0001_0001_ffff, // 1B1 slot 1
			0x0001_0001_0000_0001, // 1SEND_B1 peer 0, slot 1
			0xffff_ffff_ffff_ffff, // OPT_STEP
		}),
	}
)

// sendFirstIters is the number of iterations the send-first tests train.
const sendFirstIters = 2

// sendFirstRank builds rank r's executor of the send-first program over tr,
// with its stage of a fresh model; it returns the data source too, whose
// Iter the caller advances.
func sendFirstRank(r int, tr transport.Transport, log *slog.Logger) (*pipe.Exec, *pipetest.Data, error) {
	st := pipetest.NewStages(2)[r]
	data := &pipetest.Data{}
	x, err := pipe.New(pipe.Config{Rank: r, Spec: sendFirstSpec, Stages: map[int]pipe.Stage{r: st},
		Loss: pipetest.MSE{}, Data: data, Transport: tr, Logger: log,
		OptStep: func() error { st.Step(); return nil }})
	return x, data, err
}

// sendFirstTrain runs the iterations on rank r's executor and returns rank
// 1's losses per iteration (none on rank 0).
func sendFirstTrain(r int, x *pipe.Exec, data *pipetest.Data) ([][]float64, error) {
	var losses [][]float64
	for it := range sendFirstIters {
		data.Iter = it
		if err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, sendFirstProgram[r]) }); err != nil {
			return losses, err
		}
		if r == 1 {
			losses = append(losses, append([]float64(nil), x.Losses()...))
		}
	}
	return losses, nil
}

// TestSendFirstBuffered: the send-first program completes over the buffered
// transports (in-process and TCP) and trains like sequential training. Its
// MPI counterpart (mpi_test.go, -tags mpi) shows it deadlocking under
// Config.Sync.
func TestSendFirstBuffered(t *testing.T) {
	ref := pipetest.Sequential(pipetest.NewStages(2), 2, sendFirstIters, false)
	worlds := map[string]func() []transport.Transport{
		"inproc": func() []transport.Transport { return pipetest.InProcWorld(2, 10*time.Second) },
		"tcp":    func() []transport.Transport { return pipetest.TCPWorld(t, 2, sendFirstSpec.Fingerprint, nil) },
	}
	for name, world := range worlds {
		t.Run(name, func(t *testing.T) {
			trs := world()
			xs := make([]*pipe.Exec, 2)
			ds := make([]*pipetest.Data, 2)
			for r := range xs {
				x, d, err := sendFirstRank(r, trs[r], nil)
				if err != nil {
					t.Fatal(err)
				}
				xs[r], ds[r] = x, d
				defer trs[r].Close()
				defer x.Close()
			}
			var got [][]float64
			for it := range sendFirstIters {
				ds[0].Iter, ds[1].Iter = it, it
				fns := []func(*pipe.Exec) error{
					func(x *pipe.Exec) error { return pipe.Interpret(x, sendFirstProgram[0]) },
					func(x *pipe.Exec) error { return pipe.Interpret(x, sendFirstProgram[1]) },
				}
				if err := pipe.RunAll(xs, fns); err != nil {
					t.Fatalf("send-first program over buffered %s: %v", name, err)
				}
				got = append(got, append([]float64(nil), xs[1].Losses()...))
			}
			for it := range ref {
				if !pipetest.SameFloats(got[it], ref[it]) {
					t.Fatalf("iteration %d: losses %v, sequential training %v", it, got[it], ref[it])
				}
			}
		})
	}
}
