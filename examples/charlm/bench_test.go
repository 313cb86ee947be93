package main

import (
	"io"
	"testing"
)

// BenchmarkStep: b.N training steps of the default model, trained as one
// Sequential on one goroutine (the compute alone) and through the zbv
// program with 4 in-process ranks on runtime/train (compute, runtime and
// in-process transfers); both include one evaluation before and after.
func BenchmarkStep(b *testing.B) {
	o := defaultOptions()
	o.evalEvery = 1 << 30
	sc, _ := lookup(o.schedule)
	b.Run("sequential", func(b *testing.B) {
		sh, err := openShards(o, mustDtype(b, o))
		if err != nil {
			b.Fatal(err)
		}
		defer sh.close()
		o.steps = b.N
		b.ResetTimer()
		if _, err := trainReference(o, sh, sc.train.Spec.Micro); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("pipeline", func(b *testing.B) {
		o.steps = b.N
		if err := run(o, io.Discard, nil); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRealisation: charlm -realise over b.N measured steps (after a
// warm-up step) of the default model, reporting the median step and its
// median ratios to the simulated makespan at the costs fitted to each
// step's trace: the program alone at the calls' medians (ratio), with the
// trainer's host work (ratio-host), at the calls' means (ratio-means) and
// replaying each call (ratio-eff).
func BenchmarkRealisation(b *testing.B) {
	o := defaultOptions()
	o.steps = b.N + realiseWarmup
	_, rs, err := measureRealisation(o)
	if err != nil {
		b.Fatal(err)
	}
	med := func(f func(realisation) float64) float64 { return medianOf(rs, f) }
	b.ReportMetric(med(func(r realisation) float64 { return r.wall }), "ms/step")
	b.ReportMetric(med(func(r realisation) float64 { return r.wall / r.base }), "ratio")
	b.ReportMetric(med(func(r realisation) float64 { return r.wall / r.median }), "ratio-host")
	b.ReportMetric(med(func(r realisation) float64 { return r.wall / r.mean }), "ratio-means")
	b.ReportMetric(med(func(r realisation) float64 { return r.wall / r.each }), "ratio-eff")
}
