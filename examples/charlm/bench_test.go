package main

import (
	"testing"
)

// BenchmarkStep: one training step of the default model, trained as one
// Sequential on one goroutine (the compute alone) and through the zbv
// program with 4 in-process ranks (compute, runtime and in-process
// transfers). BENCHMARKS.md compares them with the -breakdown of a run.
func BenchmarkStep(b *testing.B) {
	o := defaultOptions()
	b.Run("sequential", func(b *testing.B) {
		sc, _ := lookup(o.schedule)
		st, err := newSequential(o, sc.train.Spec.Micro)
		if err != nil {
			b.Fatal(err)
		}
		c, err := loadCorpus("")
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := st.step(c, o.seed, i); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pipeline", func(b *testing.B) {
		r, w, data, _, done, err := newInProc(o)
		if err != nil {
			b.Fatal(err)
		}
		defer done()
		b.ResetTimer()
		for i := range b.N {
			data.setTrainStep(r.c, o.seed, i)
			if err := w.run(false); err != nil {
				b.Fatal(err)
			}
		}
	})
}
