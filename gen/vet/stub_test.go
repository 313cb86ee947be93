package vet

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/emit"
)

// api is the exported surface of a runtime/pipe source tree, read with
// go/parser (gen/ may not import runtime/): *Exec's methods and the
// top-level functions by name with their signatures ("(At)", "() error"),
// the exported constants and types, and Spec's fields with their types.
type api struct {
	methods, funcs, spec map[string]string
	consts, types        map[string]bool
}

// readAPI parses the non-test Go files of dir.
func readAPI(t *testing.T, dir string) api {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	a := api{methods: map[string]string{}, funcs: map[string]string{}, spec: map[string]string{}, consts: map[string]bool{}, types: map[string]bool{}}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					a.funcs[d.Name.Name] = signature(d.Type)
				} else if s, ok := d.Recv.List[0].Type.(*ast.StarExpr); ok && isIdent(s.X, "Exec") {
					a.methods[d.Name.Name] = signature(d.Type)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if d.Tok == token.CONST && n.IsExported() {
								a.consts[n.Name] = true
							}
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						a.types[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok && s.Name.Name == "Spec" {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									a.spec[n.Name] = types.ExprString(fl.Type)
								}
							}
						}
					}
				}
			}
		}
	}
	return a
}

// signature renders a function type without parameter names: "(int, OpKind) error".
func signature(ft *ast.FuncType) string {
	list := func(fl *ast.FieldList) []string {
		var out []string
		if fl == nil {
			return nil
		}
		for _, f := range fl.List {
			for range max(1, len(f.Names)) {
				out = append(out, types.ExprString(f.Type))
			}
		}
		return out
	}
	s := "(" + strings.Join(list(ft.Params), ", ") + ")"
	if r := list(ft.Results); len(r) > 0 {
		s += " " + strings.Join(r, ", ")
	}
	return s
}

// stepSignature is the signature of the runtime method of a step of the
// given shape, as generated code calls it.
func stepSignature(s abi.Shape) string {
	switch {
	case s == abi.ArgsNone:
		return "()"
	case s == abi.ArgsStage:
		return "(int)"
	case s == abi.ArgsOverlap:
		return "" // the two overlaps differ in order; checked by name below
	case s.Packed():
		return "(At)"
	}
	return "?"
}

// nonStep are the exported *Exec methods that generated code does not call
// as steps (Err ends every rank function).
var nonStep = []string{"Close", "Err", "Fail", "Losses", "LossesGathered", "PeakLive", "Rank", "Reset", "Spec", "Sync"}

// TestVetAcceptsRuntimeAPI: the methods vet reads as steps are exactly the
// step methods runtime/pipe exports, each with the signature of its
// operands' shape, and the removed unpacked methods are gone from it.
func TestVetAcceptsRuntimeAPI(t *testing.T) {
	rt := readAPI(t, filepath.Join("..", "..", "runtime", "pipe"))
	overlap := map[string]string{
		"OverlapFB": "(int, int, int, int, OpKind, int, int, int, int)",
		"OverlapBF": "(OpKind, int, int, int, int, int, int, int, int)",
	}
	for name, m := range methods {
		want := "(At)"
		if m.fused == nil {
			want = stepSignature(m.args)
		}
		if o, ok := overlap[name]; ok && m.args == abi.ArgsOverlap {
			want = o
		}
		if have, ok := rt.methods[name]; !ok {
			t.Errorf("vet reads x.%s as a step, but runtime/pipe's Exec has no such method", name)
		} else if have != want {
			t.Errorf("x.%s: runtime/pipe's signature is %s; vet reads %s", name, have, want)
		}
	}
	for name := range rt.methods {
		if _, ok := methods[name]; !ok && !slices.Contains(nonStep, name) {
			t.Errorf("runtime/pipe's Exec.%s is neither a step vet reads (abi's Kind.Method or gen/emit's Fusions) nor in nonStep", name)
		}
	}
	for old, use := range removed {
		if _, ok := rt.methods[old]; ok {
			t.Errorf("vet reports x.%s as removed, but runtime/pipe has it", old)
		}
		if _, ok := methods[use]; !ok {
			t.Errorf("vet tells x.%s callers to call x.%s, which vet does not read", old, use)
		}
	}
	n := 0
	for _, names := range older {
		n += len(names)
	}
	if len(removed) != n {
		t.Errorf("%d older names but %d map to a method: %v", n, len(removed), removed)
	}
}

// TestStubMatchesRuntime: the stub of runtime/pipe under testdata/src, which
// analysistest type-checks the broken files against, declares exactly the
// methods generated code calls, each as runtime/pipe declares it, and only
// constants, types and functions runtime/pipe has; its Spec has the same
// fields.
func TestStubMatchesRuntime(t *testing.T) {
	rt := readAPI(t, filepath.Join("..", "..", "runtime", "pipe"))
	stub := readAPI(t, filepath.Join("testdata", "src", "github.com", "ppgen", "ppgen", "runtime", "pipe"))
	want := []string{"Err"}
	for _, k := range abi.Kinds() {
		want = append(want, k.Method())
		if op := "Op" + k.GoName(); !stub.consts[op] {
			t.Errorf("the stub lacks pipe.%s (abi names it for %v)", op, k)
		}
	}
	for _, f := range emit.Fusions() {
		want = append(want, f.Method)
	}
	slices.Sort(want)
	if have := slices.Sorted(maps.Keys(stub.methods)); !slices.Equal(have, want) {
		t.Errorf("the stub's Exec methods are\n%v\nwant the ones generated code calls\n%v", have, want)
	}
	for name, sig := range stub.methods {
		if rs, ok := rt.methods[name]; !ok {
			t.Errorf("the stub declares Exec.%s, which runtime/pipe lacks", name)
		} else if rs != sig {
			t.Errorf("Exec.%s: the stub's signature %s, runtime/pipe's %s", name, sig, rs)
		}
	}
	for name, sig := range stub.funcs {
		if rs, ok := rt.funcs[name]; !ok || rs != sig {
			t.Errorf("the stub's func %s%s; runtime/pipe's %q", name, sig, rs)
		}
	}
	for name := range stub.consts {
		if !rt.consts[name] {
			t.Errorf("the stub declares const %s, which runtime/pipe lacks", name)
		}
	}
	for name := range rt.consts {
		if strings.HasPrefix(name, "Op") && !stub.consts[name] {
			t.Errorf("runtime/pipe declares %s, which the stub lacks", name)
		}
	}
	if !stub.consts[abi.VersionGuard] || !rt.consts[abi.VersionGuard] {
		t.Errorf("%s: in the stub %v, in runtime/pipe %v", abi.VersionGuard, stub.consts[abi.VersionGuard], rt.consts[abi.VersionGuard])
	}
	for name := range stub.types {
		if !rt.types[name] {
			t.Errorf("the stub declares type %s, which runtime/pipe lacks", name)
		}
	}
	if !maps.Equal(stub.spec, rt.spec) {
		t.Errorf("the stub's Spec fields %v; runtime/pipe's %v", stub.spec, rt.spec)
	}
}

// TestRemovedMethods: a call of a step method runtime/pipe no longer has
// (the unpacked twins of the packed steps, Version 1's names) is an error that names it and the
// packed method that replaced it; a non-constant argument of a method that
// takes ints is an error too.
func TestRemovedMethods(t *testing.T) {
	cases := []struct{ call, want string }{
		{"x.Load(0x0000_0000_0000_ffff)", "calls Load, which runtime/pipe no longer has; generated code calls x.DataLoad(pipe.At)"},
		{"x.RecvAct(0, 0, 1, 0)", "calls RecvAct, which runtime/pipe no longer has; generated code calls x.RecvF(pipe.At)"},
		{"x.SendAct(0, 0, 1, 0)", "x.SendF(pipe.At)"},
		{"x.RecvGrad(0, 0, 1, 0)", "x.RecvB(pipe.At)"},
		{"x.SendGrad(0, 0, 1, 0)", "x.SendB(pipe.At)"},
		{"x.Forward(0, 0, 0, -1)", "calls Forward, which runtime/pipe no longer has; generated code calls x.F(pipe.At)"},
		{"x.Backward(0, 0, 0, -1)", "x.B(pipe.At)"},
		{"x.BackwardInput(0, 0, 0, -1)", "x.I(pipe.At)"},
		{"x.BackwardWeight(0, 0, 0)", "x.W(pipe.At)"},
		{"x.LaunchOffload(0x0000_0000_0000_ffff)", "x.SwapLaunchOffload(pipe.At)"},
		{"x.WaitOffload(0x0000_0000_0000_ffff)", "x.SwapWaitOffload(pipe.At)"},
		{"x.LaunchLoad(0x0000_0000_0000_ffff)", "x.SwapLaunchLoad(pipe.At)"},
		{"x.WaitLoad(0x0000_0000_0000_ffff)", "x.SwapWaitLoad(pipe.At)"},
		{"x.RecvData(0, 0, 1, 0)", "x.DataRecv(pipe.At)"},
		{"x.RecvLabels(0x0000_0000_0001_0000)", "x.DataRecv(pipe.At)"},
		{"x.SendData(0, 0, 1, 0)", "x.DataSend(pipe.At)"},
		{"x.SendLabels(0x0000_0000_0001_0000)", "x.DataSend(pipe.At)"},
		{"x.RecvInput(0x0000_0000_0001_0000)", "x.MpipeRecv(pipe.At)"},
		{"x.SendInput(0x0000_0000_0001_0000)", "calls SendInput, which runtime/pipe no longer has; generated code calls x.MpipeSend(pipe.At)"},
		{"x.Sync()", "x.Sync() is not a runtime step call ppgen generates"},
		{"x.Unshard(stage)", "argument stage of x.Unshard(stage) is stage, not a constant"},
	}
	if n := len(cases) - 2; n != len(removed) {
		t.Errorf("%d removed methods tested, vet knows %d", n, len(removed))
	}
	dir := t.TempDir()
	path, ok := generate(t, dir, "-schedule", "1f1b", "-ranks", "2", "-micro", "3", "-fuse=false")
	if !ok {
		t.Fatal("ppgen gen failed")
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first := "\tx.DataLoad(0x0000_0000_0000_ffff)"
	line := strings.Count(string(orig[:strings.Index(string(orig), first)]), "\n") + 1
	for _, c := range cases {
		t.Run(c.call, func(t *testing.T) {
			lines := strings.Split(string(orig), "\n")
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, first) })
			lines[i] = "\t" + c.call
			if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			d := vetFile(t, path)
			found := false
			for _, msg := range d {
				found = found || strings.HasPrefix(msg, strconv.Itoa(line)+": rank 0 step 0: ") && strings.Contains(msg, c.want)
			}
			if !found {
				t.Errorf("no diagnostic at line %d containing %q:\n%s", line, c.want, strings.Join(d, "\n"))
			}
		})
	}
}
