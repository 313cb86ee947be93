package main

import (
	"io"
	"math"

	"github.com/ppgen/ppgen/runtime/metrics"
)

// writeSVG draws the loss curve of h (metrics.WriteSVG over h's records):
// the training loss of every step and the validation losses against the
// step.
func writeSVG(w io.Writer, h *history) error {
	return metrics.WriteSVG(w, h.records(), metrics.SVGOptions{Title: "charlm loss curve", YLabel: "loss (nats per character)"})
}

// records returns h as metrics records: step i's training loss in record
// i (from 1), a validation loss after k steps in record k (record 0 holds
// the initial model's alone). The fields h does not hold are NaN (null).
func (h *history) records() []metrics.Record {
	n := len(h.train)
	for _, p := range h.valid {
		n = max(n, p.step)
	}
	nan := math.NaN()
	recs := make([]metrics.Record, n+1)
	for i := range recs {
		recs[i] = metrics.Record{Step: int64(i), Loss: nan, EvalLoss: nan, LR: nan, GradNorm: nan, TokensPerSec: nan, StepSeconds: nan, Bubble: nan}
	}
	for i, l := range h.train {
		recs[i+1].Loss = l
	}
	for _, p := range h.valid {
		recs[p.step].EvalLoss = p.loss
	}
	// Record 0 only when it holds the initial model's validation loss.
	if math.IsNaN(recs[0].EvalLoss) {
		recs = recs[1:]
	}
	return recs
}
