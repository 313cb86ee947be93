package deps_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/ppgen/ppgen"

// node is one package of the import graph: a package, or its test (the
// in-package test variant and the external _test package, both Test).
type node struct {
	Path    string // import path; an external test's ends in _test
	Test    bool
	Imports []string
}

// layer returns "gen", "runtime", "internal" or "e2e" for a package of
// those trees (an external test counts as its package), "" otherwise
// (abi/, cmd/, generated/, examples/, templates/).
func layer(path string) string {
	path = strings.TrimSuffix(path, "_test")
	for _, l := range []string{"gen", "runtime", "internal", "e2e"} {
		if p := module + "/" + l; path == p || strings.HasPrefix(path, p+"/") {
			return l
		}
	}
	return ""
}

// std reports whether path is a standard library package: its first element
// has no dot.
func std(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// shared are the packages both sides import: standard library only, so that
// neither side reaches the other through them.
var shared = map[string]bool{
	module + "/abi":                  true, // the step vocabulary, At, limits, version
	module + "/internal/chrometrace": true, // the Chrome trace writer of sim and pipe's Timeline
}

// runtimeMayImport reports whether the runtime/ package pkg (its test when
// test) may import path directly: the standard library, gorgonia,
// runtime/..., the shared packages, and the one third-party module a
// package's job needs (runtimeExtra).
func runtimeMayImport(pkg, path string, test bool) bool {
	switch {
	case std(path), strings.HasPrefix(path, "gorgonia.org/"), layer(path) == "runtime", shared[path]:
		return true
	case test && (path == module+"/internal/doctable" || path == module+"/internal/long"):
		return true
	}
	extra, ok := runtimeExtra[strings.TrimSuffix(pkg, "_test")]
	return ok && strings.HasPrefix(path, extra)
}

// runtimeExtra is, per runtime/ package, the third-party import prefix it
// may use besides gorgonia: runtime/nn, the reference layers, gonum's BLAS
// for its matrix products; runtime/value/gonumvalue, the value adapter of
// gonum's matrices, gonum's mat; the NCCL transport purego, which loads
// NCCL and the CUDA runtime without cgo.
var runtimeExtra = map[string]string{
	module + "/runtime/nn":               "gonum.org/v1/gonum/blas",
	module + "/runtime/value/gonumvalue": "gonum.org/v1/gonum/mat",
	module + "/runtime/transport/nccl":   "github.com/ebitengine/purego",
}

// top are the runtime/ packages at the top of the runtime, which code
// outside runtime/ imports (trainers: examples/, a user's main) but no other
// runtime/ package does: runtime/world opens every transport (inproc, TCP,
// MPI, NCCL) by name, so a runtime package that imported it would link
// every engine; runtime/train, the training loop, opens its world. Tests
// may import them.
var top = map[string]bool{
	module + "/runtime/world": true,
	module + "/runtime/train": true,
}

// violations returns every breach of the rule in nodes, sorted. The graph
// a package reaches is followed through the module's non-test packages.
func violations(nodes []node) []string {
	byPath := map[string]node{}
	for _, n := range nodes {
		if !n.Test {
			byPath[n.Path] = n
		}
	}
	// reach returns the module packages from n's imports to the first
	// package that is, or nil.
	reach := func(n node, is func(string) bool) []string {
		prev := map[string]string{}
		var queue []string
		for _, p := range n.Imports {
			if _, seen := prev[p]; !seen && strings.HasPrefix(p, module+"/") {
				prev[p] = ""
				queue = append(queue, p)
			}
		}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			if is(p) {
				var out []string
				for q := p; q != ""; q = prev[q] {
					out = append(out, q)
				}
				slices.Reverse(out)
				return out
			}
			for _, q := range byPath[p].Imports {
				if _, seen := prev[q]; !seen && strings.HasPrefix(q, module+"/") {
					prev[q] = p
					queue = append(queue, q)
				}
			}
		}
		return nil
	}
	// chain is reach for the first package of layer want.
	chain := func(n node, want string) []string {
		return reach(n, func(p string) bool { return layer(p) == want })
	}
	var out []string
	for _, n := range nodes {
		if n.Path == module+"/gen" && !n.Test {
			// gen's root package, the compiler's front door, knows
			// nothing of the search (gen/auto imports gen, not the
			// other way).
			if c := reach(n, func(p string) bool { return p == module+"/gen/auto" || strings.HasPrefix(p, module+"/gen/auto/") }); c != nil {
				name := "gen"
				for i := range c {
					c[i] = strings.TrimPrefix(c[i], module+"/")
				}
				out = append(out, fmt.Sprintf("%s imports %s: gen's root package imports none of the search (gen/auto imports gen)", name, strings.Join(c, " -> ")))
			}
		}
		if shared[n.Path] && !n.Test {
			for _, p := range n.Imports {
				if !std(p) {
					out = append(out, fmt.Sprintf("%s imports %s: a package both gen/ and runtime/ import uses only the standard library", strings.TrimPrefix(n.Path, module+"/"), p))
				}
			}
		}
		l := layer(n.Path)
		name := strings.TrimPrefix(n.Path, module+"/")
		if n.Test {
			name += " (test)"
		}
		// reach reports a chain from n to a package of layer want.
		reach := func(want, rule string) {
			c := chain(n, want)
			if c == nil {
				return
			}
			for i := range c {
				c[i] = strings.TrimPrefix(c[i], module+"/")
			}
			how := ""
			if len(c) > 1 {
				how = " through " + strings.Join(c[:len(c)-1], " -> ")
			}
			out = append(out, fmt.Sprintf("%s imports %s%s: %s", name, c[len(c)-1], how, rule))
		}
		switch l {
		case "gen", "runtime":
			other := map[string]string{"gen": "runtime", "runtime": "gen"}[l]
			reach(other, "gen/ and runtime/ must not import each other; a test that needs both belongs in e2e/")
		case "internal":
			for _, other := range []string{"gen", "runtime"} {
				reach(other, "no package under internal/ imports gen/ or runtime/, tests included (runtime/ imports internal/ packages, so that arrow would run back up); a test that needs them belongs in e2e/")
			}
		}
		if l != "e2e" {
			reach("e2e", "only e2e/ imports e2e/ (the harness and its generated programs); it may import anything")
		}
		if l == "runtime" {
			for _, p := range n.Imports {
				if top[p] && !n.Test && strings.TrimSuffix(n.Path, "_test") != p && !top[strings.TrimSuffix(n.Path, "_test")] {
					out = append(out, fmt.Sprintf("%s imports %s: runtime/world opens the transports and sits above the rest of runtime/ (with runtime/train, which opens its world); only trainers (examples/, a user's main) and tests import it", name, strings.TrimPrefix(p, module+"/")))
				}
				if !runtimeMayImport(n.Path, p, n.Test) {
					out = append(out, fmt.Sprintf("%s imports %s: runtime/ imports only the standard library, gorgonia.org/..., runtime/... and the shared abi/ and internal/chrometrace (and runtimeExtra's one module for runtime/nn, runtime/value/gonumvalue and runtime/transport/nccl)", name, p))
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// load returns the module's import graph, tests included.
func load(t *testing.T) []node {
	t.Helper()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedImports, Tests: true, Dir: "../.."}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		t.Fatalf("loading the module's packages: %v", err)
	}
	var nodes []node
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("%s: %v", p.ID, e)
		}
		if strings.HasSuffix(p.PkgPath, ".test") {
			continue // the generated test main
		}
		n := node{Path: p.PkgPath, Test: p.ID != p.PkgPath}
		for path := range p.Imports {
			n.Imports = append(n.Imports, path)
		}
		sort.Strings(n.Imports)
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		t.Fatal("no packages loaded")
	}
	return nodes
}

// TestImports checks the rule on the module as it is.
func TestImports(t *testing.T) {
	nodes := load(t)
	var sawGen, sawRuntime bool
	for _, n := range nodes {
		sawGen = sawGen || layer(n.Path) == "gen"
		sawRuntime = sawRuntime || layer(n.Path) == "runtime"
	}
	if !sawGen || !sawRuntime {
		t.Fatalf("loaded %d packages but no gen/ (%v) or no runtime/ (%v) package: the test checks nothing", len(nodes), sawGen, sawRuntime)
	}
	for _, v := range violations(nodes) {
		t.Error(v)
	}
}

// TestViolations feeds the checker synthetic graphs: each breach is found,
// and a graph that keeps the rule passes.
func TestViolations(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	ok := []node{
		{Path: m("gen/ir"), Imports: []string{"fmt"}},
		{Path: m("gen/emit"), Imports: []string{m("gen/ir"), "github.com/dave/jennifer/jen"}},
		{Path: m("abi"), Imports: []string{"fmt"}},
		{Path: m("runtime/transport"), Imports: []string{"net", "gorgonia.org/tensor"}},
		{Path: m("internal/chrometrace"), Imports: []string{"encoding/json", "io"}},
		{Path: m("runtime/pipe"), Imports: []string{m("runtime/transport"), m("abi"), m("internal/chrometrace")}},
		{Path: m("runtime/pipe"), Test: true, Imports: []string{m("internal/doctable"), "testing"}},
		{Path: m("runtime/nn"), Imports: []string{"gonum.org/v1/gonum/blas/gonum", "gorgonia.org/tensor"}},
		{Path: m("generated/gpipe"), Imports: []string{m("runtime/pipe")}},
		{Path: m("internal/doctable"), Imports: []string{"fmt", "os"}},
		{Path: m("e2e/onerank"), Imports: []string{m("runtime/pipe")}},
		{Path: m("e2e"), Test: true, Imports: []string{m("gen/emit"), m("runtime/pipe"), m("generated/gpipe"), m("e2e/onerank"), m("internal/doctable"), m("internal/chrometrace")}},
		{Path: m("cmd/ppgen"), Imports: []string{m("gen/emit"), m("internal/chrometrace")}},
		{Path: m("runtime/world"), Imports: []string{m("runtime/transport"), m("runtime/launch"), m("runtime/collective")}},
		{Path: m("runtime/world_test"), Test: true, Imports: []string{m("runtime/world"), "testing"}},
		{Path: m("runtime/mesh"), Test: true, Imports: []string{m("runtime/world"), "testing"}},
		{Path: m("examples/mlp"), Imports: []string{m("runtime/world"), m("runtime/pipe"), m("runtime/launch")}},
		{Path: m("gen"), Imports: []string{m("gen/emit")}},
		{Path: m("gen/auto"), Imports: []string{m("gen"), m("gen/ir")}},
		{Path: m("gen/gencmd"), Imports: []string{m("gen/auto"), m("gen")}},
	}
	cases := []struct {
		name  string
		extra node
		want  string
	}{
		{"gen imports runtime", node{Path: m("gen/vet"), Imports: []string{m("runtime/pipe")}},
			"gen/vet imports runtime/pipe: gen/ and runtime/ must not import each other"},
		{"gen test imports runtime", node{Path: m("gen/vet_test"), Test: true, Imports: []string{m("runtime/transport")}},
			"gen/vet_test (test) imports runtime/transport:"},
		{"gen reaches runtime through generated code", node{Path: m("gen/sim"), Test: true, Imports: []string{m("generated/gpipe")}},
			"gen/sim (test) imports runtime/pipe through generated/gpipe:"},
		{"runtime imports gen", node{Path: m("runtime/launch"), Imports: []string{m("gen/ir")}},
			"runtime/launch imports gen/ir: gen/ and runtime/ must not import each other"},
		{"runtime test imports gen", node{Path: m("runtime/nn_test"), Test: true, Imports: []string{m("gen/emit")}},
			"runtime/nn_test (test) imports gen/emit:"},
		{"runtime imports a third-party package", node{Path: m("runtime/swap"), Imports: []string{"github.com/dave/jennifer/jen"}},
			"runtime/swap imports github.com/dave/jennifer/jen: runtime/ imports only"},
		{"runtime imports internal", node{Path: m("runtime/launch"), Imports: []string{m("internal/gencmd")}},
			"runtime/launch imports github.com/ppgen/ppgen/internal/gencmd: runtime/ imports only"},
		{"a shared package imports a third-party one", node{Path: m("abi"), Imports: []string{"golang.org/x/tools/go/analysis"}},
			"abi imports golang.org/x/tools/go/analysis: a package both gen/ and runtime/ import uses only the standard library"},
		{"runtime/pipe imports gonum (only runtime/nn may)", node{Path: m("runtime/pipe"), Imports: []string{"gonum.org/v1/gonum/blas/gonum"}},
			"runtime/pipe imports gonum.org/v1/gonum/blas/gonum: runtime/ imports only"},
		{"internal imports runtime", node{Path: m("internal/chrometrace"), Imports: []string{m("runtime/pipe")}},
			"internal/chrometrace imports runtime/pipe: no package under internal/ imports gen/ or runtime/"},
		{"internal test imports gen", node{Path: m("internal/doctable_test"), Test: true, Imports: []string{m("gen/ir")}},
			"internal/doctable_test (test) imports gen/ir: no package under internal/ imports gen/ or runtime/"},
		{"internal reaches runtime through generated code", node{Path: m("internal/long"), Imports: []string{m("generated/gpipe")}},
			"internal/long imports runtime/pipe through generated/gpipe: no package under internal/"},
		{"internal reaches runtime through e2e", node{Path: m("internal/long"), Test: true, Imports: []string{m("e2e/onerank")}},
			"internal/long (test) imports runtime/pipe through e2e/onerank: no package under internal/"},
		{"gen test imports e2e", node{Path: m("gen/sim_test"), Test: true, Imports: []string{m("e2e/onerank")}},
			"gen/sim_test (test) imports e2e/onerank: only e2e/ imports e2e/"},
		{"cmd imports e2e", node{Path: m("cmd/ppgen"), Test: true, Imports: []string{m("e2e/onerank")}},
			"cmd/ppgen (test) imports e2e/onerank: only e2e/ imports e2e/"},
		{"a runtime package imports runtime/world", node{Path: m("runtime/pipe"), Imports: []string{m("runtime/world")}},
			"runtime/pipe imports runtime/world: runtime/world opens the transports and sits above the rest of runtime/"},
		{"runtime/world imports gen", node{Path: m("runtime/world"), Imports: []string{m("runtime/transport"), m("gen/ir")}},
			"runtime/world imports gen/ir: gen/ and runtime/ must not import each other"},
		{"gen imports the search", node{Path: m("gen"), Imports: []string{m("gen/auto")}},
			"gen imports gen/auto: gen's root package imports none of the search"},
		{"gen reaches the search", node{Path: m("gen"), Imports: []string{m("gen/gencmd")}},
			"gen imports gen/gencmd -> gen/auto: gen's root package imports none of the search"},
		{"runtime test imports generated code", node{Path: m("runtime/pipe_test"), Test: true, Imports: []string{m("generated/gpipe")}},
			"runtime/pipe_test (test) imports github.com/ppgen/ppgen/generated/gpipe: runtime/ imports only"},
	}
	if v := violations(ok); len(v) != 0 {
		t.Fatalf("a graph that keeps the rule: %q", v)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := violations(append(slices.Clone(ok), tc.extra))
			if len(v) == 0 || !slices.ContainsFunc(v, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("violations = %q\nwant one containing %q", v, tc.want)
			}
		})
	}
}
