package e2e_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/ppgen/ppgen/e2e/onerank"
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/generated/gpipe"
	"github.com/ppgen/ppgen/generated/interleaved"
	"github.com/ppgen/ppgen/generated/interleavedsplit"
	"github.com/ppgen/ppgen/generated/onef1b"
	"github.com/ppgen/ppgen/generated/zbh1"
	"github.com/ppgen/ppgen/generated/zbv"
	"github.com/ppgen/ppgen/generated/zbvbatch"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// prog is one program the tests run: a generated package of the catalog
// (straight-line rank functions and the same program as data), or one
// lowered by gen at test time (as data only).
type prog struct {
	name     string
	cfg      ir.Config   // what gen lowers to get it
	opt      gen.Options // with these options
	spec     pipe.Spec
	straight []func(*pipe.Exec) error // nil for a lowered program
	ops      [][]pipe.Op
}

// catalog returns the generated packages the tests run, with the config
// each was generated from (its //go:generate line).
func catalog() []prog {
	return []prog{
		{"onef1b", ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}, gen.Options{}, onef1b.Spec, onef1b.Ranks[:], onef1b.Program},
		{"gpipe", ir.Config{Schedule: "gpipe", Ranks: 4, Micro: 8}, gen.Options{}, gpipe.Spec, gpipe.Ranks[:], gpipe.Program},
		{"interleaved", ir.Config{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8}, gen.Options{}, interleaved.Spec, interleaved.Ranks[:], interleaved.Program},
		{"interleavedsplit", ir.Config{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8}, gen.Options{Passes: passes.Options{Split: true}}, interleavedsplit.Spec, interleavedsplit.Ranks[:], interleavedsplit.Program},
		{"zbh1", ir.Config{Schedule: "zb-h1", Ranks: 4, Micro: 8}, gen.Options{}, zbh1.Spec, zbh1.Ranks[:], zbh1.Program},
		{"zbv", ir.Config{Schedule: "zbv", Ranks: 4, Micro: 8}, gen.Options{}, zbv.Spec, zbv.Ranks[:], zbv.Program},
		{"zbvbatch", ir.Config{Schedule: "zbv", Ranks: 4, Micro: 8}, gen.Options{Passes: passes.Options{Batch: true}}, zbvbatch.Spec, zbvbatch.Ranks[:], zbvbatch.Program},
		{"onerank", ir.Config{Schedule: "interleaved", Ranks: 1, Virtual: 4, Micro: 64}, gen.Options{}, onerank.Spec, onerank.Ranks[:], onerank.Program},
	}
}

// loweredConfigs are small programs gen lowers at test time: two and three
// ranks, interleaved with remote neighbours, the V placement with I/W split,
// interleaved-zb.
var loweredConfigs = []ir.Config{
	{Schedule: "1f1b", Ranks: 2, Micro: 4},
	{Schedule: "gpipe", Ranks: 3, Micro: 4},
	{Schedule: "1f1b", Ranks: 3, Micro: 6},
	{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4},
	{Schedule: "zbv", Ranks: 2, Micro: 4},
	// interleaved-zb built for a cost with latency (another order than at
	// unit costs), and with less-memory.
	{Schedule: "interleaved-zb", Ranks: 3, Virtual: 2, Micro: 3, Cost: &ir.Costs{F: []float64{1}, I: []float64{1}, W: []float64{1}, Comm: 0.5}},
	{Schedule: "interleaved-zb", Ranks: 2, Virtual: 2, Micro: 4, Options: ir.Options{LessMemory: true}},
}

// programs returns the catalog and the lowered programs.
func programs(t testing.TB) []prog {
	ps := catalog()
	for _, cfg := range loweredConfigs {
		ps = append(ps, lowered(t, cfg, gen.Options{}))
	}
	return ps
}

func progByName(t testing.TB, name string) prog {
	for _, p := range programs(t) {
		if p.name == name {
			return p
		}
	}
	t.Fatalf("no program %q", name)
	return prog{}
}

// lowered lowers cfg with gen, emits it with its table (gen/emit) and reads
// the program as data and the Spec back from the emitted source: the
// interpreter path of generated code, without compiling it.
func lowered(t testing.TB, cfg ir.Config, opt gen.Options) prog {
	t.Helper()
	src, res, err := gen.Generate(cfg, opt, emit.Options{Package: "p", Table: true})
	if err != nil {
		t.Fatalf("%+v: %v", cfg, err)
	}
	return progOf(t, fmt.Sprintf("%s-P%d-V%d-M%d", cfg.Schedule, cfg.Ranks, cfg.Virtual, cfg.Micro), cfg, opt, src, res)
}

// progOf reads a lowered result's emitted source (with its table) back as
// a prog.
func progOf(t testing.TB, name string, cfg ir.Config, opt gen.Options, src []byte, res gen.Result) prog {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "schedule_gen.go", src, 0)
	if err != nil {
		t.Fatalf("%s: parsing the emitted file: %v", name, err)
	}
	ops, err := emittedOps(f)
	if err != nil {
		t.Fatalf("%s: reading the emitted table: %v", name, err)
	}
	var spec pipe.Spec
	if err := emittedSpec(f, &spec); err != nil {
		t.Fatalf("%s: reading the emitted Spec: %v", name, err)
	}
	if spec.Fingerprint != emit.Fingerprint(res.Program) || spec.Ranks != len(res.Program.Ranks) {
		t.Fatalf("%s: the emitted Spec (fingerprint %q, %d ranks) is not the lowered program's (%q, %d)", name, spec.Fingerprint, spec.Ranks, emit.Fingerprint(res.Program), len(res.Program.Ranks))
	}
	if len(ops) != spec.Ranks {
		t.Fatalf("%s: the emitted table has %d ranks, the program %d", name, len(ops), spec.Ranks)
	}
	return prog{name: name, cfg: cfg, opt: opt, spec: spec, ops: ops}
}

// emittedOps returns the Program table of an emitted file: each rank's
// pipe.DecodeOps(kinds, []pipe.At{...}) call, decoded.
func emittedOps(f *ast.File) ([][]pipe.Op, error) {
	var err error
	var out [][]pipe.Op
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || err != nil {
			return err == nil
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "DecodeOps" {
			return true
		}
		kinds, ok1 := call.Args[0].(*ast.BasicLit)
		lits, ok2 := call.Args[1].(*ast.CompositeLit)
		if len(call.Args) != 2 || !ok1 || !ok2 {
			err = fmt.Errorf("a DecodeOps call of unexpected shape")
			return false
		}
		k, e := strconv.Unquote(kinds.Value)
		if e != nil {
			err = e
			return false
		}
		ats := make([]pipe.At, len(lits.Elts))
		for i, el := range lits.Elts {
			lit, ok := el.(*ast.BasicLit)
			if !ok {
				err = fmt.Errorf("element %d of a DecodeOps table is not a literal", i)
				return false
			}
			v, e := strconv.ParseUint(lit.Value, 0, 64)
			if e != nil {
				err = e
				return false
			}
			ats[i] = pipe.At(v)
		}
		out = append(out, pipe.DecodeOps(k, ats))
		return false
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("no DecodeOps table")
	}
	return out, err
}

// TestCatalogIsWhatGenLowers checks each catalog package against gen: the
// same Spec and program as data as lowering its config now.
func TestCatalogIsWhatGenLowers(t *testing.T) {
	for _, c := range catalog() {
		t.Run(c.name, func(t *testing.T) {
			l := lowered(t, c.cfg, c.opt)
			if fmt.Sprint(l.spec) != fmt.Sprint(c.spec) {
				t.Errorf("spec:\n generated %+v\n lowered   %+v", c.spec, l.spec)
			}
			if !slices.EqualFunc(l.ops, c.ops, slices.Equal) {
				t.Errorf("the generated Program differs from lowering %+v", c.cfg)
			}
		})
	}
}
