package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// overlapSchedules are the catalog entries with overlap steps or split
// backwards, and what their programs must hold: the composite kinds, the
// backward kind inside the composites, and whether full backwards (B) remain
// outside them.
var overlapSchedules = []struct {
	name        string
	composite   pipe.OpKind // OpOverlapFB or OpOverlapBF; OpInvalid for none
	inside      pipe.OpKind // the backward half of each composite
	fullOutside bool        // B steps outside composites
}{
	{"dualpipev", pipe.OpOverlapFB, pipe.OpBackward, true},
	{"interleaved-overlap", pipe.OpOverlapBF, pipe.OpBackwardInput, true},
	{"interleaved-split", pipe.OpInvalid, pipe.OpInvalid, false},
}

// TestOverlapCatalogShape: the overlap entries are compiled in and their
// programs hold what their options promise (so the equivalence tests below
// exercise OverlapFB/OverlapBF and split backwards, not plain steps).
func TestOverlapCatalogShape(t *testing.T) {
	for _, tc := range overlapSchedules {
		sc, err := lookup(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Program == nil {
			t.Fatalf("%s: generated without -table", tc.name)
		}
		var composites, full, split int
		for r, ops := range sc.Program {
			for i := 0; i < len(ops); i++ {
				switch k := ops[i].Kind; k {
				case pipe.OpOverlapFB, pipe.OpOverlapBF:
					if k != tc.composite || i+2 >= len(ops) {
						t.Fatalf("%s rank %d op %d: unexpected %s", tc.name, r, i, k)
					}
					b := ops[i+2]
					if k == pipe.OpOverlapBF {
						b = ops[i+1]
					}
					if b.Kind != tc.inside {
						t.Fatalf("%s rank %d op %d: %s holds %s, want %s", tc.name, r, i, k, b.Kind, tc.inside)
					}
					composites++
					i += 2
				case pipe.OpBackward:
					full++
				case pipe.OpBackwardInput:
					split++
				}
			}
		}
		if (composites > 0) != (tc.composite != pipe.OpInvalid) || (full > 0) != tc.fullOutside {
			t.Errorf("%s: %d composites, %d B and %d I outside them", tc.name, composites, full, split)
		}
		if tc.composite == pipe.OpInvalid && split == 0 {
			t.Errorf("%s: no split backward", tc.name)
		}
	}
}

// TestOverlapSchedulesMatchSequential: the overlap entries train as
// sequential training does on the same micro-batches (docs/design.md §10), through
// the generated functions and the interpreter, in float64 and float32.
func TestOverlapSchedulesMatchSequential(t *testing.T) {
	for _, tc := range overlapSchedules {
		for _, dtype := range []string{"float64", "float32"} {
			for _, interpret := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/interpret=%v", tc.name, dtype, interpret), func(t *testing.T) {
					var out bytes.Buffer
					o := options{schedule: tc.name, transport: "inproc", steps: 3, check: true, dtype: dtype, lr: 0.1, seed: 11, interpret: interpret}
					if err := runInProc(o, &out); err != nil {
						t.Fatalf("%v\n%s", err, out.String())
					}
					if !strings.Contains(out.String(), "check: max relative difference") {
						t.Fatalf("no check line:\n%s", out.String())
					}
				})
			}
		}
	}
}

// TestOverlapSchedulesOverTCP: the overlap entries run as 4 OS processes
// on loopback (the command's own launcher) and every rank's -check passes.
func TestOverlapSchedulesOverTCP(t *testing.T) {
	bin := exampleBinary(t)
	for _, tc := range overlapSchedules {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, "-transport", "tcp", "-check", "-schedule", tc.name, "-steps", "3")
			for _, kv := range os.Environ() {
				switch strings.SplitN(kv, "=", 2)[0] {
				case "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "PPGEN_TOKEN":
					continue
				}
				cmd.Env = append(cmd.Env, kv)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if got := strings.Count(string(out), "check: max relative difference"); got != 4 {
				t.Fatalf("%d ranks reported a check, want 4:\n%s", got, out)
			}
		})
	}
}
