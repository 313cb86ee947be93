package nn

import (
	"fmt"
	"math"
)

// Schedule is a learning-rate schedule: LR(step) is the learning rate of
// the optimizer step that follows step earlier ones (0 for the first), set
// with Optimizer.SetLR before Step. A schedule is a pure function of the
// step: its only state is the step count, which a checkpoint stores to
// resume it. Check reports a configuration LR cannot honour.
//
// With W warmup steps, T total steps, Peak and Min the learning rates:
//
//	warmup   (step < W):      Peak · (step+1)/W
//	decay    (W ≤ step < T):  progress = (step-W)/(T-W)
//	                          CosineDecay: Min + (Peak-Min)·(1+cos(π·progress))/2
//	                          LinearDecay: Peak - (Peak-Min)·progress
//	end      (step ≥ T):      Min
//
// so the warmup's last step (W-1) reaches Peak, the decay starts at Peak on
// step W and reaches Min on step T (its progress 1), and a job run past T
// keeps Min. A negative step counts as 0.
type Schedule interface {
	LR(step int) float64
	Check() error
}

// ConstantLR is a learning rate that does not change.
type ConstantLR struct{ Value float64 }

// LinearWarmup rises linearly over Steps steps to Peak and stays there.
type LinearWarmup struct {
	Peak  float64
	Steps int
}

// CosineDecay is a linear warmup over Warmup steps to Peak, then a cosine decay
// from Peak to Min ending on step Total.
type CosineDecay struct {
	Peak, Min     float64
	Warmup, Total int
}

// LinearDecay is a linear warmup over Warmup steps to Peak, then a linear decay
// from Peak to Min ending on step Total.
type LinearDecay struct {
	Peak, Min     float64
	Warmup, Total int
}

// LR returns Value.
func (c ConstantLR) LR(int) float64 { return c.Value }

// LR returns the warmup's rate, then Peak.
func (w LinearWarmup) LR(step int) float64 {
	if step = max(step, 0); step < w.Steps {
		return w.Peak * float64(step+1) / float64(w.Steps)
	}
	return w.Peak
}

// LR returns the rate of step.
func (c CosineDecay) LR(step int) float64 {
	return decay(c.Peak, c.Min, c.Warmup, c.Total, step, func(p float64) float64 { return (1 + math.Cos(math.Pi*p)) / 2 })
}

// LR returns the rate of step.
func (l LinearDecay) LR(step int) float64 {
	return decay(l.Peak, l.Min, l.Warmup, l.Total, step, func(p float64) float64 { return 1 - p })
}

// decay is the warmup, then Min + (Peak-Min)·shape(progress).
func decay(peak, lo float64, warmup, total, step int, shape func(float64) float64) float64 {
	step = max(step, 0)
	switch {
	case step < warmup:
		return peak * float64(step+1) / float64(warmup)
	case step >= total:
		return lo
	}
	p := float64(step-warmup) / float64(total-warmup)
	return lo + (peak-lo)*shape(p)
}

// Check checks that Value is finite and not negative.
func (c ConstantLR) Check() error { return checkRates("ConstantLR", c.Value, 0) }

// Check checks the rate and the step count.
func (w LinearWarmup) Check() error {
	if w.Steps < 0 {
		return fmt.Errorf("nn: LinearWarmup: %d steps; want 0 or more", w.Steps)
	}
	return checkRates("LinearWarmup", w.Peak, 0)
}

// Check checks the rates and the step counts.
func (c CosineDecay) Check() error {
	return checkDecay("CosineDecay", c.Peak, c.Min, c.Warmup, c.Total)
}

// Check checks the rates and the step counts.
func (l LinearDecay) Check() error {
	return checkDecay("LinearDecay", l.Peak, l.Min, l.Warmup, l.Total)
}

func checkDecay(name string, peak, lo float64, warmup, total int) error {
	if warmup < 0 || total < warmup {
		return fmt.Errorf("nn: %s: warmup %d and total %d steps; want 0 ≤ warmup ≤ total", name, warmup, total)
	}
	return checkRates(name, peak, lo)
}

func checkRates(name string, peak, lo float64) error {
	for _, v := range []float64{peak, lo} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("nn: %s: learning rate %v; want a finite rate of 0 or more", name, v)
		}
	}
	if lo > peak {
		return fmt.Errorf("nn: %s: Min %v is above Peak %v", name, lo, peak)
	}
	return nil
}
