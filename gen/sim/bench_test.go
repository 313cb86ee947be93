package sim

import "testing"

// BenchmarkRun simulates 1F1B on P=64 ranks with M=256 micro-batches, lowered
// (65,280 compute steps plus 64,512 transfers) and compute-only.
func BenchmarkRun(b *testing.B) {
	for _, bc := range []struct {
		name string
		comm bool
	}{{"lowered", true}, {"compute-only", false}} {
		b.Run(bc.name, func(b *testing.B) {
			p := onef1b(64, 256, false)
			if bc.comm {
				p = onef1bComm(64, 256)
			}
			c := uniformCost(1, 2, 1, 0.05)
			b.ReportMetric(float64(p.NumSteps()), "steps")
			b.ResetTimer()
			for b.Loop() {
				if _, err := Run(p, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestBenchProgramShape(t *testing.T) {
	if testing.Short() {
		t.Skip("large program")
	}
	r := mustRun(t, onef1bComm(64, 256), uniformCost(1, 2, 1, 0))
	if want := float64(3 * (256 + 63)); !near(r.Makespan, want) {
		t.Errorf("makespan %g, want %g", r.Makespan, want)
	}
}
