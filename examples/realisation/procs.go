package main

// The tcp-procs case: the ranks as separate OS processes over TCP on
// loopback, started with runtime/launch as a deployment would start them.
// Each process runs one rank; rank 0 sets a common start time for every
// iteration, the others report when they finished, and rank 0 takes the
// iteration time as the latest finish minus the start. The processes read
// one wall clock (the same machine), so the times compare.
//
// With all ranks in one process (the tcp case), a rank that spins out the
// last part of its wait keeps that process's scheduler from polling the
// network, which delays the other ranks' receives; separate processes do
// not share a scheduler.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/world"
)

// The environment of a worker process (besides the launcher's RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT and PPGEN_TOKEN).
const (
	workerVar   = "REALISATION_WORKER"   // "1" in a worker
	scheduleVar = "REALISATION_SCHEDULE" // catalog name
	itersVar    = "REALISATION_ITERS"    // timed iterations
	spinVar     = "REALISATION_SPIN"     // spinMargin (time.Duration text)
)

// startMargin is how far ahead rank 0 sets each iteration's start, so that
// every rank has the start time before it comes.
const startMargin = 3 * time.Millisecond

// isWorker reports whether this process is a tcp-procs worker.
func isWorker() bool { return os.Getenv(workerVar) == "1" }

// wireResult is result as rank 0 prints it for the launcher to read.
type wireResult struct {
	MS       []float64
	SimMS    float64
	EffSimMS float64
	CommMS   float64
	OverMean float64
	OverMax  float64
	EffCost  string
}

const resultPrefix = "RESULT "

// measureProcs runs sc over TCP with one OS process per rank (this
// executable, in worker mode) and returns what rank 0 measured: one warm-up
// iteration, then iters timed ones.
func measureProcs(sc schedule, iters int) (result, error) {
	exe, err := os.Executable()
	if err != nil {
		return result{}, fmt.Errorf("tcp-procs: finding this executable to start the ranks: %w", err)
	}
	var stdout, stderr bytes.Buffer
	env := []string{workerVar + "=1", scheduleVar + "=" + sc.name, itersVar + "=" + strconv.Itoa(iters), spinVar + "=" + spinMargin.String()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := launch.Local(ctx, sc.spec.Ranks, []string{exe}, launch.LocalOptions{Stdout: &stdout, Stderr: &stderr, Env: env}); err != nil {
		return result{}, fmt.Errorf("tcp-procs: %w\n%s%s", err, stdout.String(), stderr.String())
	}
	sc0 := bufio.NewScanner(&stdout)
	for sc0.Scan() {
		line := sc0.Text()
		if _, rest, ok := strings.Cut(line, "[rank 0] "+resultPrefix); ok {
			var w wireResult
			if err := json.Unmarshal([]byte(rest), &w); err != nil {
				return result{}, fmt.Errorf("tcp-procs: rank 0's result %q: %w", rest, err)
			}
			return result{ms: w.MS, simMS: w.SimMS, effSimMS: w.EffSimMS, commMS: w.CommMS, overMean: w.OverMean, overMax: w.OverMax, effCost: w.EffCost}, nil
		}
	}
	return result{}, fmt.Errorf("tcp-procs: rank 0 printed no result:\n%s%s", stdout.String(), stderr.String())
}

// workerMain runs this process's rank of a tcp-procs measurement and, on
// rank 0, prints the result line.
func workerMain(out io.Writer) error {
	var sc schedule
	for _, c := range catalog() {
		if c.name == os.Getenv(scheduleVar) {
			sc = c
		}
	}
	if sc.name == "" {
		return fmt.Errorf("%s=%q: not a catalog schedule", scheduleVar, os.Getenv(scheduleVar))
	}
	iters, err := strconv.Atoi(os.Getenv(itersVar))
	if err != nil || iters < 1 {
		return fmt.Errorf("%s=%q: want a positive count", itersVar, os.Getenv(itersVar))
	}
	if spinMargin, err = time.ParseDuration(os.Getenv(spinVar)); err != nil {
		return fmt.Errorf("%s: %w", spinVar, err)
	}
	wd, err := world.Open(context.Background(), "tcp", world.Options{
		Size: sc.spec.Ranks, SizeNote: fmt.Sprintf("%s has %d ranks", sc.name, sc.spec.Ranks),
		Fingerprint: sc.spec.Fingerprint, Schedule: sc.spec.Describe(),
		Timeout: 30 * time.Second, RendezvousTimeout: 20 * time.Second,
	})
	if err != nil {
		return err
	}
	defer wd.Close()
	tr := wd.Endpoint()
	res, err := measureRank(sc, iters, tr)
	if err != nil || tr.Rank() != 0 {
		return err
	}
	b, err := json.Marshal(wireResult{MS: res.ms, SimMS: res.simMS, EffSimMS: res.effSimMS, CommMS: res.commMS, OverMean: res.overMean, OverMax: res.overMax, EffCost: res.effCost})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s%s\n", resultPrefix, b)
	return err
}

// measureRank runs this process's rank of sc over tr, whose ranks are
// separate processes: one warm-up iteration, then iters timed ones; rank 0
// returns the measurement (the others a zero result).
func measureRank(sc schedule, iters int, tr transport.Transport) (result, error) {
	r, n := tr.Rank(), tr.World()
	commMS, err := pingPongRanks(tr, r, 200)
	if err != nil {
		return result{}, fmt.Errorf("measuring the transfer latency: %w", err)
	}
	st := new(stats)
	stages := map[int]pipe.Stage{}
	for s, rr := range sc.spec.RankOf {
		if rr == r {
			stages[s] = waitStage{st}
		}
	}
	x, err := pipe.New(pipe.Config{Rank: r, Spec: sc.spec, Stages: stages, Loss: mse{}, Data: batches(sc.spec.Micro), Transport: tr})
	if err != nil {
		return result{}, err
	}
	defer x.Close()
	var ms msList
	for k := 0; k <= iters; k++ { // k = 0: the warm-up iteration
		tag := transport.Tag{Stage: -1, Micro: int32(k)}
		var start time.Time
		if r == 0 {
			start = time.Now().Add(startMargin)
			for p := 1; p < n; p++ {
				if err := tr.Send(p, abi.DataChannel, tag, timeTensor(start)); err != nil {
					return result{}, err
				}
			}
		} else {
			_, t, err := tr.Recv(0, abi.DataChannel)
			if err != nil {
				return result{}, err
			}
			if start, err = tensorTime(t); err != nil {
				return result{}, err
			}
		}
		x.Reset()
		waitUntil(start)
		if err := pipe.Run(x, sc.ranks[r]); err != nil {
			return result{}, fmt.Errorf("iteration %d: %w", k, err)
		}
		end := time.Now()
		if r != 0 {
			if err := tr.Send(0, abi.DataChannel, tag, timeTensor(end)); err != nil {
				return result{}, err
			}
		} else {
			for p := 1; p < n; p++ {
				_, t, err := tr.Recv(p, abi.DataChannel)
				if err != nil {
					return result{}, err
				}
				e, err := tensorTime(t)
				if err != nil {
					return result{}, err
				}
				if e.After(end) {
					end = e
				}
			}
			if k > 0 {
				ms = append(ms, float64(end.Sub(start))/1e6)
			}
		}
		if k == 0 {
			st.reset()
		}
	}
	// Every rank's stage statistics go to rank 0, which adds them up.
	if r != 0 {
		return result{}, tr.Send(0, abi.DataChannel, transport.Tag{Stage: -2}, st.tensor())
	}
	for p := 1; p < n; p++ {
		_, t, err := tr.Recv(p, abi.DataChannel)
		if err != nil {
			return result{}, err
		}
		if err := st.add(t); err != nil {
			return result{}, fmt.Errorf("rank %d's statistics: %w", p, err)
		}
	}
	prog, err := lowered(sc)
	if err != nil {
		return result{}, err
	}
	w := &job{sc: sc, prog: prog, st: st, commMS: commMS}
	if w.simMS, err = makespan(prog, costSpec); err != nil {
		return result{}, err
	}
	return w.finish(result{ms: ms})
}

// waitUntil sleeps until spinMargin before t and yields until t.
func waitUntil(t time.Time) {
	if r := time.Until(t) - spinMargin; r > 0 {
		preciseSleep(r)
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}

// pingPongRanks is pingPong between ranks 0 and 1 of a world whose ranks
// are separate processes: rank 1 echoes, rank 0 times; other ranks return 0.
func pingPongRanks(tr transport.Transport, r, n int) (float64, error) {
	switch r {
	case 0:
		t := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float64{1, 2, 3, 4}))
		rtt := make(msList, 0, n)
		for k := range n {
			start := time.Now()
			if err := tr.Send(1, abi.ActChannel, transport.Tag{Micro: int32(k)}, t); err != nil {
				return 0, err
			}
			if _, _, err := tr.Recv(1, abi.GradChannel); err != nil {
				return 0, err
			}
			rtt = append(rtt, float64(time.Since(start))/1e6)
		}
		return rtt.median() / 2, nil
	case 1:
		for range n {
			tag, got, err := tr.Recv(0, abi.ActChannel)
			if err == nil {
				err = tr.Send(0, abi.GradChannel, tag, got)
			}
			if err != nil {
				return 0, err
			}
		}
	}
	return 0, nil
}

// timeTensor holds t's Unix time as (seconds, nanoseconds): two float64s,
// each exact.
func timeTensor(t time.Time) *tensor.Dense {
	return tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{float64(t.Unix()), float64(t.Nanosecond())}))
}

func tensorTime(t *tensor.Dense) (time.Time, error) {
	v, ok := t.Data().([]float64)
	if !ok || len(v) != 2 {
		return time.Time{}, errors.New("a time is two float64s (seconds, nanoseconds)")
	}
	return time.Unix(int64(v[0]), int64(v[1])), nil
}

// tensor packs the statistics: per kind the duration sum and count, then
// the overshoot sum, count and maximum (ns).
func (st *stats) tensor() *tensor.Dense {
	v := make([]float64, 0, 2*int(numKinds)+3)
	for k := range numKinds {
		v = append(v, float64(st.durSum[k].Load()), float64(st.durN[k].Load()))
	}
	v = append(v, float64(st.overSum.Load()), float64(st.overN.Load()), float64(st.overMax.Load()))
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))
}

// add adds statistics packed by tensor.
func (st *stats) add(t *tensor.Dense) error {
	v, ok := t.Data().([]float64)
	if !ok || len(v) != 2*int(numKinds)+3 {
		return fmt.Errorf("want %d float64s", 2*int(numKinds)+3)
	}
	for k := range numKinds {
		st.durSum[k].Add(int64(v[2*k]))
		st.durN[k].Add(int64(v[2*k+1]))
	}
	o := v[2*numKinds:]
	st.overSum.Add(int64(o[0]))
	st.overN.Add(int64(o[1]))
	if m := int64(o[2]); m > st.overMax.Load() {
		st.overMax.Store(m)
	}
	if math.IsNaN(o[0]) {
		return errors.New("NaN overshoot")
	}
	return nil
}
