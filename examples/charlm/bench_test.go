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
