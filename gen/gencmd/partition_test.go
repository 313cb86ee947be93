package gencmd

import (
	"bytes"
	"errors"
	"go/format"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/sim"
)

const llmModel = "../../examples/models/llm.json"

// TestGenRecordsLayers: gen -model -partition auto records the split in
// Spec.Layers, gofmt-clean, and the header's invocation regenerates the
// file byte for byte (what ppgen check does).
func TestGenRecordsLayers(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(llmModel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "llm.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		// 34 layers, 4 stages: even is 9, 9, 8, 8 layers.
		{[]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", "llm.json"}, "Layers:      [][2]int{{0, 9}, {9, 18}, {18, 26}, {26, 34}},"},
		// The head's stage takes fewer blocks.
		{[]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", "llm.json", "-partition", "auto"}, "Layers:      [][2]int{{0, 10}, {10, 19}, {19, 28}, {28, 34}},"},
		// Two model copies: the split repeated.
		{[]string{"-schedule", "dualpipe", "-ranks", "2", "-micro", "4", "-model", "llm.json"}, "Layers:      [][2]int{{0, 17}, {17, 34}, {0, 17}, {17, 34}},"},
		// -mpipe-pre: the embedding is the preprocess, the stages hold
		// layers 1 to 33 (numbered as in the file).
		{[]string{"-schedule", "mpipe", "-ranks", "2", "-micro", "4", "-model", "llm.json", "-mpipe-pre", "embed"}, "Layers:      [][2]int{{1, 10}, {10, 18}, {18, 26}, {26, 34}},"},
	} {
		r, err := Parse(append(tc.args, "-o", "s_gen.go", "-package", "s"), Env{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		src, _, err := r.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), tc.want) {
			t.Errorf("%v: the Spec lacks %q:\n%s", tc.args, tc.want, src[:min(len(src), 1200)])
		}
		if f, err := format.Source(src); err != nil || !bytes.Equal(f, src) {
			t.Errorf("%v: not gofmt-clean (%v)", tc.args, err)
		}
		path := filepath.Join(dir, "s_gen.go")
		again, err := FromHeader(path, src)
		if err != nil {
			t.Fatal(err)
		}
		src2, _, err := again.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src, src2) {
			t.Errorf("%v: regenerating from the header differs", tc.args)
		}
	}
}

// TestPartitionFlagErrors: -partition needs -model and one of its values;
// -mem with a fixed family needs -partition auto.
func TestPartitionFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{Schedule: "1f1b", Ranks: 2, Micro: 4, Partition: "auto"}, "give -model FILE"},
		{Request{Schedule: "1f1b", Ranks: 2, Micro: 4, Model: llmModel, simCost: true, Partition: "best"}, "want even"},
		{Request{Schedule: "1f1b", Ranks: 2, Micro: 4, Model: llmModel, simCost: true, Mem: 10}, "-partition auto"},
		{Request{Schedule: "1f1b", Ranks: 4, Micro: 8, Model: llmModel, simCost: true, Partition: "auto", Mem: 5}, "raise -mem to at least"},
	} {
		_, err := tc.r.Lower()
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want a usage error with %q", tc.r, err, tc.want)
		}
	}
}

// TestPartitionLayersReport: ppgen partition's library call on the
// LLM-like model beats the even split, and its stages cover the layers.
func TestPartitionLayersReport(t *testing.T) {
	r := &Request{Schedule: "zbv", Ranks: 4, Model: llmModel, simCost: true}
	rep, err := r.PartitionLayers()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Micro != 8 || len(rep.Stages) != 8 {
		t.Errorf("micro %d, %d stages; want 8 (2P) and 8", rep.Micro, len(rep.Stages))
	}
	next := 0
	for _, s := range rep.Stages {
		if s.First != next || s.End <= s.First {
			t.Errorf("stage %d covers %d..%d after %d", s.Stage, s.First, s.End, next)
		}
		next = s.End
	}
	if next != rep.LayerCount {
		t.Errorf("stages end at %d of %d layers", next, rep.LayerCount)
	}
	if !(rep.Makespan < rep.EvenMakespan) || rep.LowerBound > rep.Makespan {
		t.Errorf("makespan %g, even %g, bound %g", rep.Makespan, rep.EvenMakespan, rep.LowerBound)
	}
}

// TestComparePartition: sim -compare -partition auto runs each family with
// its own partition, never slower than the even split.
func TestComparePartition(t *testing.T) {
	entries, err := auto.ParseCompare("1f1b,zbv")
	if err != nil {
		t.Fatal(err)
	}
	even, err := (&Request{Ranks: 4, Micro: 8, Model: llmModel, simCost: true}).Compare(entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	part, err := (&Request{Ranks: 4, Micro: 8, Model: llmModel, simCost: true, Partition: PartitionAuto}).Compare(entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range entries {
		if part[i].Makespan > even[i].Makespan*(1+1e-9) {
			t.Errorf("%s: partition %g slower than even %g", entries[i].Family.Name, part[i].Makespan, even[i].Makespan)
		}
	}
	if !(part[0].Makespan < even[0].Makespan) {
		t.Errorf("1f1b on the LLM-like model: partition %g, even %g; want faster", part[0].Makespan, even[0].Makespan)
	}
}

// TestPartitionChoosesRecompute: under -mem without -recompute, ppgen
// partition tries recompute policies beside none and keeps the fastest
// split that fits: at a limit no split fits without recompute it picks a
// policy whose report equals the one given by hand; where none fits but a
// policy fits a faster split, the policy wins; with -recompute given, or
// without -mem, nothing is chosen; where nothing fits, the error says so.
func TestPartitionChoosesRecompute(t *testing.T) {
	req := func(mem float64, recompute string) *Request {
		r := &Request{Schedule: "1f1b", Ranks: 4, Micro: 8, Model: llmModel, Mem: mem, simCost: true}
		if recompute != "" {
			r.Passes = map[string]string{"recompute": recompute}
		}
		return r
	}
	if _, err := req(12, "none").PartitionLayers(); err == nil || !strings.Contains(err.Error(), "no split fits") {
		t.Fatalf("-mem 12 -recompute none: err %v, want no split fits", err)
	}
	chosen, err := req(12, "").PartitionLayers()
	if err != nil {
		t.Fatal(err)
	}
	if !chosen.RecomputeChosen || chosen.Recompute == "" || chosen.Mem > 12 {
		t.Fatalf("-mem 12: chose %q (%v), memory %g; want a policy within 12", chosen.Recompute, chosen.RecomputeChosen, chosen.Mem)
	}
	given, err := req(12, chosen.Recompute).PartitionLayers()
	if err != nil {
		t.Fatal(err)
	}
	if given.RecomputeChosen || given.Makespan != chosen.Makespan || !slices.Equal(given.Bounds, chosen.Bounds) {
		t.Errorf("-recompute %s given: makespan %g bounds %v chosen %v; chosen: %g %v", chosen.Recompute, given.Makespan, given.Bounds, given.RecomputeChosen, chosen.Makespan, chosen.Bounds)
	}
	// -mem 25: a split fits without recompute (336.6), a faster one with
	// half of every stage recomputed (322.1).
	none, err := req(25, "none").PartitionLayers()
	if err != nil {
		t.Fatal(err)
	}
	half, err := req(25, "").PartitionLayers()
	if err != nil {
		t.Fatal(err)
	}
	if !half.RecomputeChosen || !(half.Makespan < none.Makespan) || half.Mem > 25 {
		t.Errorf("-mem 25: chose %q at %g (memory %g) against none's %g", half.Recompute, half.Makespan, half.Mem, none.Makespan)
	}
	free, err := req(0, "").PartitionLayers()
	if err != nil || free.RecomputeChosen || free.Recompute != "" {
		t.Errorf("no -mem: chose %q (%v), err %v; want none", free.Recompute, free.RecomputeChosen, err)
	}
	if _, err := req(6, "").PartitionLayers(); err == nil || !strings.Contains(err.Error(), "nor with -recompute selective:0.5, full") {
		t.Errorf("-mem 6: err %v, want it to say no policy fits either", err)
	}
}

// TestPartitionAutoChoosesRecompute: gen -schedule FAMILY -partition auto
// -mem X without -recompute chooses the policy with the split as ppgen
// partition does (chooseRecompute): at a limit only a policy meets, the
// program is lowered with it (Spec.Recompute), its busiest rank fits -mem
// in the model's units, the split and policy are partition's, and the
// header regenerates the file byte for byte; -recompute none keeps the
// refusal, and without -mem nothing is chosen.
func TestPartitionAutoChoosesRecompute(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(llmModel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "llm.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(extra ...string) []string {
		return append([]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", "llm.json", "-partition", "auto", "-o", "s_gen.go", "-package", "s"}, extra...)
	}
	r, err := Parse(args("-mem", "12"), Env{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	src, res, err := r.Generate()
	if err != nil {
		t.Fatal(err)
	}
	want, err := (&Request{Schedule: "1f1b", Ranks: 4, Micro: 8, Model: llmModel, Mem: 12, simCost: true}).PartitionLayers()
	if err != nil {
		t.Fatal(err)
	}
	if res.Recompute == "" || res.Recompute != want.Recompute || !slices.Equal(res.Layers, want.Bounds) {
		t.Errorf("-mem 12: chose %q with %v; ppgen partition chose %q with %v", res.Recompute, res.Layers, want.Recompute, want.Bounds)
	}
	if !strings.Contains(string(src), "\tRecompute: ") {
		t.Errorf("-mem 12: the Spec names no recomputed stage:\n%s", src[:min(len(src), 1200)])
	}
	m, err := r.ReadModel()
	if err != nil {
		t.Fatal(err)
	}
	part := model.Partition{Bounds: res.Layers}
	price, err := r.Pricing()
	if err != nil {
		t.Fatal(err)
	}
	c, err := price.Split(part, 1)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := sim.Run(res.Program, c)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := partition.Memory(m, part, res.Program, sr)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Max(mem) > 12 || sr.Makespan != want.Makespan {
		t.Errorf("-mem 12 -recompute %s: memory per rank %v, makespan %g (partition's %g); want within 12", res.Recompute, mem, sr.Makespan, want.Makespan)
	}
	again, err := FromHeader(filepath.Join(dir, "s_gen.go"), src)
	if err != nil {
		t.Fatal(err)
	}
	if src2, _, err := again.Generate(); err != nil || !bytes.Equal(src, src2) {
		t.Errorf("-mem 12: regenerating from the header differs (err %v)", err)
	}

	r, err = Parse(args("-mem", "12", "-recompute", "none"), Env{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var ue *UsageError
	if _, _, err := r.Generate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "no split fits") || strings.Contains(err.Error(), "nor with") {
		t.Errorf("-mem 12 -recompute none: err %v, want the usage error no split fits", err)
	}
	r, err = Parse(args(), Env{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, res, err := r.Generate(); err != nil || res.Recompute != "" {
		t.Errorf("no -mem: chose %q, err %v; want none", res.Recompute, err)
	}
}

// TestComparePartitionChoosesRecompute: sim -compare -partition auto under
// -mem lowers each family as -schedule FAMILY -partition auto does: the
// recompute policy chosen with its split (1f1b: the same makespan and
// policy as the single command), and a family no policy fits is a row
// that says so (zbv at -mem 12), not the end of the comparison.
func TestComparePartitionChoosesRecompute(t *testing.T) {
	entries, err := auto.ParseCompare("1f1b,zbv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := (&Request{Ranks: 4, Micro: 8, Model: llmModel, simCost: true, Partition: PartitionAuto, Mem: 12}).Compare(entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	single, err := (&Request{Schedule: "1f1b", Ranks: 4, Micro: 8, Model: llmModel, simCost: true, Partition: PartitionAuto, Mem: 12}).PartitionLayers()
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; r.Skipped != "" || r.Recompute != single.Recompute || r.Recompute == "" || math.Abs(r.Makespan-single.Makespan) > 1e-9*single.Makespan {
		t.Errorf("1f1b row: policy %q makespan %g (skipped %q); -schedule 1f1b: policy %q makespan %g", r.Recompute, r.Makespan, r.Skipped, single.Recompute, single.Makespan)
	}
	if r := rows[1]; r.Virtual != 2 || !strings.Contains(r.Skipped, "no split fits the memory limit 12") || r.Program.Ranks != nil {
		t.Errorf("zbv row: V %d, skipped %q; want V 2 and the reason no split fits", r.Virtual, r.Skipped)
	}
}
