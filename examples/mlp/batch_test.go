package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestBatchedFamiliesMatchSequential lowers every family at P=4, M=8 with
// -batch and trains it in-process through the interpreter with -check:
// equal to sequential training within the example's tolerances (the
// committed zbv-batch also runs over TCP, TestTCPMatchesSequential).
func TestBatchedFamiliesMatchSequential(t *testing.T) {
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		res, err := gen.Lower(ir.Config{Schedule: f.Name, Ranks: 4, Micro: 8}, gen.Options{Passes: passes.Options{Batch: true}})
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		sc := asSchedule(res)
		if f.Name == "zbv" {
			// The conversion is what gen/emit's table holds.
			want := catalog["zbv-batch"]
			if !slices.EqualFunc(sc.Program, want.Program, slices.Equal) || sc.Spec.Fingerprint != want.Spec.Fingerprint {
				t.Errorf("zbv -batch lowered now differs from the committed zbv-batch")
			}
		}
		name := f.Name + "-test-batch"
		catalog[name] = sc
		t.Cleanup(func() { delete(catalog, name) })
		t.Run(f.Name, func(t *testing.T) {
			var out bytes.Buffer
			o := options{schedule: name, transport: "inproc", steps: 2, check: true, dtype: "float64", lr: 0.1, seed: 7, interpret: true}
			if err := runInProc(o, &out); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "check: max relative difference") {
				t.Fatalf("no check line in output:\n%s", out.String())
			}
		})
	}
}

// asSchedule is a lowered program as the example runs it through the
// interpreter: its Spec and its steps as ops (what gen/emit's -table
// writes), without rank functions.
func asSchedule(res gen.Result) schedule {
	p := res.Program
	sp := pipe.Spec{Schedule: res.Config.Schedule, Ranks: len(p.Ranks), Stages: p.Stages(), Micro: p.Micro,
		Slots: slices.Clone(res.Info.Slots), RankOf: slices.Clone(p.Placement.RankOf), Fingerprint: emit.Fingerprint(p),
		Owned: emit.Owned(p), ShipLabels: emit.ShipsLabels(p)}
	if p.Copies > 1 {
		sp.Copies = p.Copies
	}
	index := passes.IndexSlots(p)
	op := func(st ir.Step) pipe.Op {
		o := pipe.Op{Kind: st.Kind, Stage: int32(st.Stage), Micro: int32(st.Micro), Peer: -1, Slot: int32(st.Slot), Src: -1}
		switch st.Kind.Shape() {
		case abi.ArgsNone, abi.ArgsOverlap:
			o.Stage, o.Micro, o.Slot = -1, -1, -1
		case abi.ArgsStage:
			o.Micro, o.Slot = -1, -1
		case abi.ArgsComm:
			o.Peer = int32(st.Peer)
		case abi.ArgsCompute:
			o.Src = int32(index.Src(st))
		}
		return o
	}
	ops := make([][]pipe.Op, len(p.Ranks))
	for r, steps := range p.Ranks {
		for _, st := range steps {
			ops[r] = append(ops[r], op(st))
			for _, sub := range st.Sub {
				ops[r] = append(ops[r], op(sub))
			}
		}
	}
	return schedule{Spec: sp, Ranks: make([]func(*pipe.Exec) error, len(p.Ranks)), Program: ops}
}
