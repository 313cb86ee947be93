package nn

import (
	"math"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestSchedules checks each schedule against its closed form at the
// boundaries (first step, end of warmup, start and end of decay, past the
// end) and in between.
func TestSchedules(t *testing.T) {
	const peak, lo = 3e-4, 3e-5
	cos := CosineDecay{Peak: peak, Min: lo, Warmup: 10, Total: 110}
	lin := LinearDecay{Peak: peak, Min: lo, Warmup: 10, Total: 110}
	for _, c := range []struct {
		name  string
		s     Schedule
		step  int
		want  float64
		exact bool
	}{
		{"constant", ConstantLR{Value: 0.1}, 0, 0.1, true},
		{"constant-late", ConstantLR{Value: 0.1}, 1 << 30, 0.1, true},
		{"warmup-first", LinearWarmup{Peak: 1, Steps: 4}, 0, 0.25, true},
		{"warmup-mid", LinearWarmup{Peak: 1, Steps: 4}, 2, 0.75, true},
		{"warmup-last", LinearWarmup{Peak: 1, Steps: 4}, 3, 1, true},
		{"warmup-after", LinearWarmup{Peak: 1, Steps: 4}, 100, 1, true},
		{"warmup-none", LinearWarmup{Peak: 1}, 0, 1, true},
		{"warmup-negative-step", LinearWarmup{Peak: 1, Steps: 4}, -3, 0.25, true},
		{"cosine-first", cos, 0, peak / 10, false},
		{"cosine-warmup-last", cos, 9, peak, true},
		{"cosine-decay-start", cos, 10, peak, true},
		{"cosine-quarter", cos, 35, lo + (peak-lo)*(1+math.Cos(math.Pi/4))/2, false},
		{"cosine-half", cos, 60, (peak + lo) / 2, false},
		{"cosine-before-end", cos, 109, lo + (peak-lo)*(1+math.Cos(math.Pi*99/100))/2, false},
		{"cosine-end", cos, 110, lo, true},
		{"cosine-after", cos, 500, lo, true},
		{"linear-first", lin, 0, peak / 10, false},
		{"linear-decay-start", lin, 10, peak, true},
		{"linear-quarter", lin, 35, peak - (peak-lo)/4, false},
		{"linear-end", lin, 110, lo, true},
		{"linear-after", lin, 111, lo, true},
		{"cosine-no-warmup", CosineDecay{Peak: 1, Min: 0, Total: 2}, 0, 1, true},
		{"cosine-no-warmup-mid", CosineDecay{Peak: 1, Min: 0, Total: 2}, 1, 0.5, false},
		{"cosine-only-warmup", CosineDecay{Peak: 1, Min: 0.5, Warmup: 2, Total: 2}, 1, 1, true},
		{"cosine-only-warmup-end", CosineDecay{Peak: 1, Min: 0.5, Warmup: 2, Total: 2}, 2, 0.5, true},
	} {
		if err := c.s.Check(); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := c.s.LR(c.step)
		if c.exact && got != c.want || !c.exact && math.Abs(got-c.want) > 1e-15*c.want {
			t.Errorf("%s: LR(%d) = %.17g, want %.17g", c.name, c.step, got, c.want)
		}
	}
	// Monotone: the warmup rises, the decay falls.
	for _, s := range []Schedule{cos, lin} {
		for k := 1; k < 120; k++ {
			a, b := s.LR(k-1), s.LR(k)
			if k < 10 && b <= a || k > 10 && b > a {
				t.Errorf("%T: LR(%d) = %v, LR(%d) = %v", s, k-1, a, k, b)
			}
		}
	}
}

func TestScheduleCheck(t *testing.T) {
	for _, c := range []struct {
		s    Schedule
		want string
	}{
		{ConstantLR{Value: -1}, "learning rate -1"},
		{ConstantLR{Value: math.NaN()}, "learning rate NaN"},
		{LinearWarmup{Peak: 1, Steps: -1}, "-1 steps"},
		{CosineDecay{Peak: 1, Warmup: 5, Total: 4}, "warmup 5 and total 4"},
		{LinearDecay{Peak: 1, Min: 2, Total: 4}, "Min 2 is above Peak 1"},
		{LinearDecay{Peak: math.Inf(1), Total: 4}, "learning rate +Inf"},
	} {
		if err := c.s.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error with %q", c.s, err, c.want)
		}
	}
}

// TestScheduleDrivesOptimizer: SetLR with a schedule's value changes the
// step the optimizer takes.
func TestScheduleDrivesOptimizer(t *testing.T) {
	s := LinearWarmup{Peak: 0.5, Steps: 2}
	q := vectorParam(tensor.Float64, "q", []float64{1})
	opt := &SGD{}
	for step := range 3 {
		setGrad(q, []float64{1})
		opt.SetLR(s.LR(step))
		if err := opt.Step([]*Param{q}); err != nil {
			t.Fatal(err)
		}
	}
	if got := f64(q.Value)[0]; got != 1-0.25-0.5-0.5 {
		t.Errorf("parameter %v after three scheduled steps, want %v", got, 1-0.25-0.5-0.5)
	}
}
