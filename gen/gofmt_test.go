package gen

import (
	"bytes"
	"fmt"
	"go/format"
	"testing"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
)

// TestEmitIsGofmtClean: the emitter writes the rank functions as text
// (gen/emit's writeBody), not through go/format, so every family under
// every lowering option set, with and without fusion, at several helper
// sizes, must come out exactly as gofmt prints it.
func TestEmitIsGofmtClean(t *testing.T) {
	opts := append([]passes.Options{
		{FSDP: 1, FSDPPrefetch: 1},
		{Swap: 2},
		{ShipLabels: true},
		{Batch: true},
		{Split: true, Batch: true, FSDP: 2},
	}, scheduleOptions...)
	checked := 0
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		for _, P := range []int{1, 4} {
			for _, V := range legalVirtuals(f) {
				for _, M := range []int{2 * P} {
					for oi, o := range opts {
						cfg := ir.Config{Schedule: f.Name, Ranks: P, Virtual: V, Micro: M}
						if _, _, err := Build(cfg); err != nil {
							continue
						}
						res, err := Lower(cfg, Options{Passes: o})
						if err != nil {
							continue // an option the family refuses (tested where it is refused)
						}
						for _, eo := range []emit.Options{{}, {HelperSize: 3, NoFuse: true}} {
							eo.Package, eo.Schedule, eo.Invocation = "sched", f.Name, "ppgen gen -schedule "+f.Name
							out, err := emit.Emit(res.Program, eo)
							if err != nil {
								t.Fatalf("%s P=%d V=%d M=%d options %d: %v", f.Name, P, V, M, oi, err)
							}
							formatted, err := format.Source(out)
							if err != nil {
								t.Fatalf("%s P=%d V=%d M=%d options %d: not Go: %v", f.Name, P, V, M, oi, err)
							}
							if !bytes.Equal(formatted, out) {
								t.Fatalf("%s P=%d V=%d M=%d options %d %+v: gofmt changes the output:\n%s", f.Name, P, V, M, oi, eo, firstDiff(out, formatted))
							}
							checked++
						}
					}
				}
			}
		}
	}
	if checked < 200 {
		t.Errorf("only %d outputs checked", checked)
	}
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b []byte) string {
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range min(len(al), len(bl)) {
		if !bytes.Equal(al[i], bl[i]) {
			return fmt.Sprintf("line %d:\n  emitted %q\n  gofmt   %q", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d lines", len(al), len(bl))
}
