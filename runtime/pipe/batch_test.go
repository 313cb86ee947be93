package pipe_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// rendezvous is an in-process world with rendezvous semantics, as MPI's
// synchronous sends and NCCL point-to-point have: a Send returns only once
// the peer's Recv took the message. Its Batch starts every op of a batch
// at once and waits for all (a transport.Batcher); withoutBatch hides it,
// so that transport.Batch falls back to the sends, then the receives.
type rendezvous struct {
	rank, world int
	links       map[[3]int]chan msg // (src, dst, channel)
	timeout     time.Duration
	abort       chan struct{}
	once        *sync.Once
	batches     *atomic.Int32 // Batch calls, all ranks
	ops         *atomic.Int32 // ops in them
}

type msg struct {
	tag transport.Tag
	t   *tensor.Dense
}

func rendezvousWorld(n int, timeout time.Duration) []transport.Transport {
	links := map[[3]int]chan msg{}
	for s := range n {
		for d := range n {
			for ch := range 4 {
				links[[3]int{s, d, ch}] = make(chan msg)
			}
		}
	}
	abort, once := make(chan struct{}), new(sync.Once)
	b, o := new(atomic.Int32), new(atomic.Int32)
	out := make([]transport.Transport, n)
	for r := range n {
		out[r] = &rendezvous{rank: r, world: n, links: links, timeout: timeout, abort: abort, once: once, batches: b, ops: o}
	}
	return out
}

func (t *rendezvous) Rank() int  { return t.rank }
func (t *rendezvous) World() int { return t.world }
func (t *rendezvous) Send(peer int, ch abi.Channel, tag transport.Tag, v *tensor.Dense) error {
	select {
	case t.links[[3]int{t.rank, peer, int(ch)}] <- msg{tag, v}:
		return nil
	case <-t.abort:
		return transport.ErrAborted
	case <-time.After(t.timeout):
		return fmt.Errorf("send to rank %d on %s: %w", peer, ch, transport.ErrTimeout)
	}
}
func (t *rendezvous) Recv(peer int, ch abi.Channel) (transport.Tag, *tensor.Dense, error) {
	select {
	case m := <-t.links[[3]int{peer, t.rank, int(ch)}]:
		return m.tag, m.t, nil
	case <-t.abort:
		return transport.Tag{}, nil, transport.ErrAborted
	case <-time.After(t.timeout):
		return transport.Tag{}, nil, fmt.Errorf("receive from rank %d on %s: %w", peer, ch, transport.ErrTimeout)
	}
}
func (t *rendezvous) Close() error      { return nil }
func (t *rendezvous) Abort(cause error) { t.once.Do(func() { close(t.abort) }) }
func (t *rendezvous) Batch(ops []transport.BatchOp) error {
	t.batches.Add(1)
	t.ops.Add(int32(len(ops)))
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for i := range ops {
		op := &ops[i]
		wg.Go(func() {
			if op.Send {
				errs[i] = t.Send(op.Peer, op.Ch, op.Tag, op.T)
			} else {
				op.Tag, op.T, errs[i] = t.Recv(op.Peer, op.Ch)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// withoutBatch is a transport without a Batcher.
type withoutBatch struct{ transport.Transport }

// crossed is a two-rank, two-stage program of two micro-batches in which
// each rank sends to the other before it receives: rank 0 sends the
// activation of micro 1 before it receives the gradient of micro 0, rank 1
// sends that gradient before it receives the activation. Under rendezvous
// the two sends wait for each other unless the pairs are batched.
func crossed(batch bool) [2][]pipe.Op {
	begin := pipe.Op{Kind: pipe.OpBatchBegin, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1}
	end := begin
	end.Kind = pipe.OpBatchEnd
	wrap := func(ops ...pipe.Op) []pipe.Op {
		if batch {
			return append(append([]pipe.Op{begin}, ops...), end)
		}
		return ops
	}
	var r0, r1 []pipe.Op
	r0 = append(r0, load(0, 0, 0), fwd(0, 0, 0, -1), sendAct(0, 0, 1, 0), load(0, 1, 1), fwd(0, 1, 1, -1))
	r0 = append(r0, wrap(sendAct(0, 1, 1, 1), recvGrad(0, 0, 1, 0))...)
	r0 = append(r0, bwd(0, 0, 0, -1), recvGrad(0, 1, 1, 1), bwd(0, 1, 1, -1))
	r1 = append(r1, load(1, 0, 0), recvAct(1, 0, 0, 0), fwd(1, 0, 0, -1), bwd(1, 0, 0, -1), load(1, 1, 1))
	r1 = append(r1, wrap(sendGrad(1, 0, 0, 0), recvAct(1, 1, 0, 1))...)
	r1 = append(r1, fwd(1, 1, 1, -1), bwd(1, 1, 1, -1), sendGrad(1, 1, 0, 1))
	return [2][]pipe.Op{r0, r1}
}

var crossedSpec = pipe.Spec{Schedule: "crossed", Ranks: 2, Stages: 2, Micro: 2, Slots: []int{2, 2}, RankOf: []int{0, 1}, Fingerprint: "test:crossed"}

// runCrossed runs prog on trs and returns each rank's error and the last
// stage's losses.
func runCrossed(t *testing.T, trs []transport.Transport, prog [2][]pipe.Op) ([2]error, []float64) {
	t.Helper()
	stages := newStages(2)
	var xs [2]*pipe.Exec
	for r := range xs {
		x, err := pipe.New(pipe.Config{Rank: r, Spec: crossedSpec, Stages: map[int]pipe.Stage{r: stages[r]}, Loss: mse{}, Data: &data{}, Transport: trs[r]})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
		t.Cleanup(func() { x.Close() })
	}
	var errs [2]error
	var wg sync.WaitGroup
	for r := range xs {
		wg.Go(func() { errs[r] = pipe.Run(xs[r], func(x *pipe.Exec) error { return pipe.Interpret(x, prog[r]) }) })
	}
	wg.Wait()
	return errs, xs[1].Losses()
}

// TestBatchUnderRendezvous: the crossed program deadlocks under rendezvous
// one transfer at a time, and completes, with the losses of sequential
// training, when each rank issues its pair as one batch.
func TestBatchUnderRendezvous(t *testing.T) {
	want := sequential(newStages(2), 2, 1, false)[0]
	trs := rendezvousWorld(2, 10*time.Second)
	errs, got := runCrossed(t, trs, crossed(true))
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("batched: %v; %v", errs[0], errs[1])
	}
	if !sameFloats(got, want) {
		t.Errorf("batched losses %v, want %v", got, want)
	}
	if b, o := trs[0].(*rendezvous).batches.Load(), trs[0].(*rendezvous).ops.Load(); b != 2 || o != 4 {
		t.Errorf("transport saw %d batches of %d ops in all, want 2 of 4", b, o)
	}
	errs, _ = runCrossed(t, rendezvousWorld(2, 300*time.Millisecond), crossed(false))
	if errs[0] == nil && errs[1] == nil {
		t.Fatal("unbatched crossed sends completed under rendezvous")
	}
	for r, err := range errs {
		if err != nil && !errors.Is(err, transport.ErrTimeout) && !errors.Is(err, transport.ErrAborted) {
			t.Errorf("unbatched, rank %d: %v; want a timeout", r, err)
		}
	}
	// On a buffered transport (no Batcher: sends, then receives) both run.
	for _, batch := range []bool{false, true} {
		trs := inprocWorld(2, 10*time.Second)
		errs, got := runCrossed(t, []transport.Transport{withoutBatch{trs[0]}, withoutBatch{trs[1]}}, crossed(batch))
		if errs[0] != nil || errs[1] != nil || !sameFloats(got, want) {
			t.Errorf("in-process, batch %v: %v; %v; losses %v, want %v", batch, errs[0], errs[1], got, want)
		}
	}
}

// TestBatchErrors: misuse of the brackets fails the rank, naming the
// problem, instead of hanging.
func TestBatchErrors(t *testing.T) {
	begin := pipe.Op{Kind: pipe.OpBatchBegin, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1}
	end := begin
	end.Kind = pipe.OpBatchEnd
	for _, tc := range []struct {
		name string
		ops  []pipe.Op
		want string
	}{
		{"end without begin", []pipe.Op{end}, "step BATCH_END: no batch is open"},
		{"nested", []pipe.Op{begin, begin}, "step BATCH_BEGIN: a batch is already open"},
		{"empty", []pipe.Op{begin, end}, "an empty batch"},
		{"never closed", []pipe.Op{load(0, 0, 0), fwd(0, 0, 0, -1), begin, sendAct(0, 0, 1, 0)}, "this batch (1 transfers) is never closed"},
		{"compute inside", []pipe.Op{load(1, 0, 0), begin, recvAct(1, 0, 0, 0), fwd(1, 0, 0, -1)}, "a step inside BATCH_BEGIN .. BATCH_END waits for a receive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xs := twoRanks(t, 2*time.Second)
			r := 0
			if tc.ops[0].Stage == 1 {
				r = 1
			}
			err := pipe.Run(xs[r], func(x *pipe.Exec) error { return pipe.Interpret(x, tc.ops) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestBatchTimeout: a batch whose peer never answers fails on the
// transport's progress timeout, naming the transfer of the batch that
// waited.
func TestBatchTimeout(t *testing.T) {
	begin := pipe.Op{Kind: pipe.OpBatchBegin, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1}
	end := begin
	end.Kind = pipe.OpBatchEnd
	xs := twoRanks(t, 200*time.Millisecond)
	ops := []pipe.Op{load(0, 0, 0), fwd(0, 0, 0, -1), begin, sendAct(0, 0, 1, 0), recvGrad(0, 0, 1, 0), end, bwd(0, 0, 0, -1)}
	err := pipe.Run(xs[0], func(x *pipe.Exec) error { return pipe.Interpret(x, ops) })
	if err == nil || !strings.Contains(err.Error(), "step 0RECV_B0 from rank 1: no progress for") {
		t.Errorf("got %v, want the batch's 0RECV_B0 named with the timeout", err)
	}
}
