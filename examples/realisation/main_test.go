package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/internal/long"
)

// TestMain lets the test binary serve as a tcp-procs worker: the tcp-procs
// cases start this executable once per rank with REALISATION_WORKER=1.
func TestMain(m *testing.M) {
	if isWorker() {
		if err := workerMain(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "realisation worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// BenchmarkRealisation runs one training iteration of a catalog schedule per
// benchmark iteration (after one warm-up iteration), with the wait stages of
// this command, and reports
//
//   - ratio: mean iteration time / simulated makespan at F=2, B=4, W=2 ms,
//     comm=0 (the target is ≤ 1.05; it includes the sleep overshoot);
//   - ratio-eff: mean iteration time / simulated makespan at the measured mean
//     durations of the stage calls (what the runtime itself adds);
//   - iter-ms, sim-ms, eff-sim-ms and overshoot-us (mean overshoot of a wait).
//
// Run it with a fixed iteration count:
//
//	go test -run '^$' -bench Realisation -benchtime 50x -count 3 ./examples/realisation/
func BenchmarkRealisation(b *testing.B) {
	for _, sc := range catalog() {
		for _, tr := range transports {
			b.Run(sc.name+"/"+tr, func(b *testing.B) {
				if tr == "tcp-procs" {
					// The ranks are other processes: b.N timed
					// iterations there, reported per iteration.
					res, err := measureProcs(sc, b.N)
					if err != nil {
						b.Fatal(err)
					}
					reportRealisation(b, res.ms.mean(), res)
					return
				}
				w, err := newJob(sc, tr)
				if err != nil {
					b.Fatal(err)
				}
				defer w.close()
				if err := w.warmUp(); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if _, err := w.iterate(); err != nil {
						b.Fatal(err)
					}
				}
				iterMS := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 1e6
				res, err := w.finish(result{})
				if err != nil {
					b.Fatal(err)
				}
				reportRealisation(b, iterMS, res)
			})
		}
	}
}

// reportRealisation reports the metrics of one case whose mean iteration
// took iterMS.
func reportRealisation(b *testing.B, iterMS float64, res result) {
	b.ReportMetric(iterMS/res.simMS, "ratio")
	b.ReportMetric(iterMS/res.effSimMS, "ratio-eff")
	b.ReportMetric(iterMS, "iter-ms")
	b.ReportMetric(res.simMS, "sim-ms")
	b.ReportMetric(res.effSimMS, "eff-sim-ms")
	b.ReportMetric(res.overMean, "overshoot-us")
	b.ReportMetric(res.commMS*1e3, "transfer-us")
}

// TestRealisationWithinBound runs every catalog schedule over every transport
// (one warm-up and 7 timed iterations each) and asserts that the median
// iteration time is within 1.15 of the simulated makespan at the measured
// mean durations of the stage calls (ratio-eff). The bound is deliberately
// loose, well above the 1.05 target, so that CI on a noisy 2-core machine
// stays green; the benchmark reports the actual figures. It bounds ratio-eff
// rather than the raw ratio because the raw ratio also holds the overshoot of
// time.Sleep, which is a property of the machine's timers, not of the
// runtime (it is logged). tcp-procs gets 1.5: its four processes
// oversubscribe the two cores, more so while CI tests other packages in
// parallel (it reached 1.16 there), so the test shows that the multi-process
// measurement works and is in range, not how close it comes.
//
// The bound is a verdict on wall-clock speed, so it holds only under
// PPGEN_LONG=1; by default each case runs one timed iteration and the test
// asserts that every measurement is there (a positive, finite iteration
// time and simulated makespan) and that the iteration is no faster than the
// simulated makespan, which holds on a machine however loaded. Skipped in
// -short mode.
func TestRealisationWithinBound(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: waits through pipeline iterations")
	}
	iters := 1
	if long.Enabled() {
		iters = 7
	}
	for _, sc := range catalog() {
		for _, tr := range transports {
			bound := 1.15
			if tr == "tcp-procs" {
				bound = 1.5
			}
			t.Run(sc.name+"/"+tr, func(t *testing.T) {
				res, err := measureCase(sc, tr, iters)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.ms) != iters {
					t.Fatalf("%d iteration times, want %d", len(res.ms), iters)
				}
				med := res.ms.median()
				eff := med / res.effSimMS
				t.Logf("median %.2f ms; sim %.1f ms (ratio %.3f); at the measured durations %s: sim %.2f ms (ratio-eff %.3f); overshoot mean %.0f µs, max %.0f µs",
					med, res.simMS, med/res.simMS, res.effCost, res.effSimMS, eff, res.overMean, res.overMax)
				for _, v := range []struct {
					name string
					x    float64
				}{{"median iteration", med}, {"simulated makespan", res.simMS}, {"simulated makespan at the measured durations", res.effSimMS}} {
					if !(v.x > 0) || math.IsInf(v.x, 0) {
						t.Errorf("%s = %g ms, want a positive, finite time", v.name, v.x)
					}
				}
				// Every stage call waits at least its cost, so no iteration
				// can beat the simulated makespan (1 % for the clocks),
				// however loaded the machine.
				if med < 0.99*res.simMS {
					t.Errorf("median %.2f ms under the simulated makespan %.2f ms: a stage did not wait its cost, or the simulation overstates", med, res.simMS)
				}
				if long.Enabled() && eff > bound {
					t.Errorf("ratio-eff = %.3f (median %.2f ms / simulated %.2f ms), want ≤ %.2f", eff, med, res.effSimMS, bound)
				}
			})
		}
	}
}

// TestRun checks the command's table for one case.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: waits through pipeline iterations")
	}
	var out bytes.Buffer
	if err := run(&out, "1f1b", "inproc", 1); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "ratio-eff") || !strings.Contains(got, "1f1b") || strings.Count(got, "\n") != 2 {
		t.Errorf("output:\n%s", got)
	}
	if err := run(&out, "nope", "", 1); err == nil {
		t.Error("run with an unknown schedule: no error")
	}
}

// BenchmarkSleepOvershoot measures the instrument alone: one goroutine doing
// the stages' deadline wait (time.Sleep until now+2 ms) with nothing else
// running, reporting the mean overshoot in µs.
//
//	go test -run '^$' -bench SleepOvershoot -benchtime 500x -count 3 ./examples/realisation/
func BenchmarkSleepOvershoot(b *testing.B) {
	st := new(stats)
	for b.Loop() {
		st.wait(kindF, time.Now(), costF)
	}
	b.ReportMetric(st.overMeanMicros(), "overshoot-us")
	b.ReportMetric(st.overMaxMicros(), "max-overshoot-us")
}
