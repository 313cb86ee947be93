package verify_test

import (
	"fmt"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/verify"
)

// BenchmarkLowerVerify times lowering (data, comm, slots) plus verification
// of 1F1B-like programs and an interleaved one (P=64, V=2, M=256: ~130k
// lowered steps). Building the compute order is not timed.
func BenchmarkLowerVerify(b *testing.B) {
	cases := []struct {
		name string
		p    func() ir.Program
	}{
		{"1f1b/P=8/M=256", func() ir.Program { return oneF1B(8, 256) }},
		{"1f1b/P=64/M=256", func() ir.Program { return oneF1B(64, 256) }},
		{"interleaved/P=64/V=2/M=256", func() ir.Program { return interleaved(64, 2, 256) }},
	}
	for _, tc := range cases {
		p := tc.p()
		q, _, err := passes.Lower(p, passes.Options{})
		if err != nil {
			b.Fatal(err)
		}
		steps := q.NumSteps()
		b.Run(tc.name+"/lower+verify", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				q, _, err := passes.Lower(p, passes.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := verify.Check(q, verify.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(steps), "steps")
		})
		b.Run(tc.name+"/lower", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := passes.Lower(p, passes.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/verify", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := verify.Check(q, verify.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInsertComm compares late and eager comm insertion.
func BenchmarkInsertComm(b *testing.B) {
	p := passes.InsertData(interleaved(64, 2, 256))
	for _, eager := range []bool{false, true} {
		b.Run(fmt.Sprintf("eager=%v", eager), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := passes.InsertComm(p, passes.CommOptions{Order: orderOf(eager)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
