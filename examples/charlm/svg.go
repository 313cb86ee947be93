package main

import (
	"io"

	"github.com/ppgen/ppgen/runtime/metrics"
)

// writeSVG draws the loss curve of a run's records (metrics.WriteSVG): the
// training loss of every step and the validation losses against the step.
func writeSVG(w io.Writer, recs []metrics.Record) error {
	return metrics.WriteSVG(w, recs, metrics.SVGOptions{Title: "charlm loss curve", YLabel: "loss (nats per character)"})
}
