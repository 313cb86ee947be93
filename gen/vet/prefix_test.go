package vet

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/gencmd"
)

// TestTwoPrograms vets a package holding two programs, a train program
// (schedule_gen.go) and its forward-only eval program under -name Eval
// (eval_gen.go): both pass as generated, each is checked on its own (an edit
// of the eval program is reported in its file, with its prefixed names), and
// the prefix is found from the declared names when the header records no
// invocation.
func TestTwoPrograms(t *testing.T) {
	base := []string{"-schedule", "1f1b", "-ranks", "2", "-micro", "3", "-table", "-helper", "6"}
	gen := func(args ...string) string {
		t.Helper()
		req, err := gencmd.Parse(append(append([]string(nil), base...), args...), gencmd.Env{Package: "p"})
		if err != nil {
			t.Fatal(err)
		}
		src, _, err := req.Generate()
		if err != nil {
			t.Fatal(err)
		}
		return string(src)
	}
	train, eval := gen(), gen("-forward-only", "-name", "Eval")
	noInvocation := strings.Replace(eval, "// ppgen gen -forward-only -helper 6 -micro 3 -name Eval -ranks 2 -schedule 1f1b -table\n", "", 1)
	if noInvocation == eval {
		t.Fatalf("the eval program's header is not the expected invocation:\n%s", eval[:200])
	}
	for _, tt := range []struct {
		name string
		eval string
		want []string // "file:line: message" substrings, in order; none: clean
	}{
		{"generated", eval, nil},
		{"no invocation", noInvocation, nil},
		{"swapped table", strings.Replace(eval, "{EvalRank0, EvalRank1}", "{EvalRank1, EvalRank0}", 1), []string{
			"eval_gen.go: rank table entry 0 is EvalRank1: EvalRanks[r] must run rank r",
			"eval_gen.go: rank table entry 1 is EvalRank0: EvalRanks[r] must run rank r",
		}},
		{"edited call", strings.Replace(eval, "x.F(0x0000_0001_0001_ffff)", "x.F(0x0000_0002_0001_ffff)", 1), []string{
			"eval_gen.go: edited generated code: rank 0 step 4 is x.F(0x0000_0002_0001_ffff) (0F2 slot 1) where `ppgen gen -forward-only -helper 6 -micro 3 -name Eval -ranks 2 -schedule 1f1b -table` generates x.F(0x0000_0001_0001_ffff)",
		}},
		{"renamed rank", strings.Replace(eval, "func EvalRank1(", "func Rank1(", 1), []string{
			"eval_gen.go: rank table entry 1 names EvalRank1, which this file does not declare",
			"eval_gen.go: no function EvalRank1",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range map[string]string{"schedule_gen.go": train, "eval_gen.go": tt.eval} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			fset := token.NewFileSet()
			var files []*ast.File
			for _, name := range []string{"eval_gen.go", "schedule_gen.go"} {
				f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			diags, err := Run(fset, files)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range diags {
				got = append(got, fmt.Sprintf("%s: %s", filepath.Base(fset.Position(d.Pos).Filename), d.Message))
			}
			if len(tt.want) == 0 && len(got) > 0 {
				t.Fatalf("diagnostics on generated files:\n%s", strings.Join(got, "\n"))
			}
			for _, w := range tt.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("no diagnostic %q in:\n%s", w, strings.Join(got, "\n"))
				}
			}
			for _, g := range got {
				if !strings.HasPrefix(g, "eval_gen.go: ") {
					t.Errorf("diagnostic outside the edited file: %s", g)
				}
			}
		})
	}
}
