package gencmd

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestInvocationRoundTrip: what Parse records (emit.Invocation), emit.SplitArgs and Parse read
// back to the same request, odd values included.
func TestInvocationRoundTrip(t *testing.T) {
	tests := [][]string{
		{"-schedule", "1f1b", "-ranks", "4", "-micro", "8"},
		{"-schedule", "zbv", "-ranks", "2", "-micro", "4", "-table", "-helper", "7", "-package", "sched"},
		{"-in", "my schedule.csv", "-package", "p"},
		{"-in", `odd"name\.txt`},
		{"-schedule", "interleaved", "-ranks", "2", "-micro", "3", "-placement", "", "-comm-order", "eager", "-o", "out.go"},
		{"-schedule", "auto", "-ranks", "4", "-micro", "8", "-model", "m.json", "-budget", "50"},
		{"-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-forward-only", "-name", "Eval"},
	}
	for _, args := range tests {
		r, err := Parse(args, Env{})
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		words, err := emit.SplitArgs(r.Invocation)
		if err != nil {
			t.Fatalf("%s: %v", r.Invocation, err)
		}
		if words[0] != "ppgen" || words[1] != "gen" {
			t.Fatalf("invocation %q", r.Invocation)
		}
		again, err := Parse(words[2:], Env{})
		if err != nil {
			t.Fatalf("%s: %v", r.Invocation, err)
		}
		if again.Invocation != r.Invocation {
			t.Errorf("%q records %q, read back as %q", args, r.Invocation, again.Invocation)
		}
		r.Out, again.Out = "", "" // -o is not recorded
		if !reflect.DeepEqual(r, again) {
			t.Errorf("%q: %+v read back as %+v", args, r, again)
		}
	}
}

// TestBudget: -budget reaches auto's options, and is refused out of
// range or where it does nothing (no -schedule auto, no -model).
func TestBudget(t *testing.T) {
	model := filepath.Join("..", "..", "examples", "models", "uniform.json")
	for _, tt := range []struct {
		args []string
		want string // the error, or "" for none
	}{
		{[]string{"-schedule", "auto", "-model", model, "-budget", "50"}, ""},
		{[]string{"-schedule", "auto", "-model", model}, ""},
		{[]string{"-schedule", "auto", "-model", model, "-budget", "-1"}, "-budget = -1; want 0 (the default, 600 simulations per local search) or 1 to 100000"},
		{[]string{"-schedule", "auto", "-model", model, "-budget", "100001"}, "-budget = 100001"},
		{[]string{"-schedule", "auto", "-budget", "50"}, "-budget 50 bounds the local search of the orders -schedule auto synthesizes for a -model"},
		{[]string{"-schedule", "zbv", "-model", model, "-budget", "50"}, "-budget 50 bounds"},
	} {
		r, err := Parse(append(tt.args, "-ranks", "4", "-micro", "8"), Env{})
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		opt, err := r.LowerOptions()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v", tt.args, err)
		case tt.want == "" && opt.Budget != r.Budget:
			t.Errorf("%q: auto.Options.Budget = %d, want %d", tt.args, opt.Budget, r.Budget)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	if _, err := Parse([]string{"-h"}, Env{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"-ranks", "x"}, `invalid value "x" for flag -ranks`},
		{[]string{"-schedule", "1f1b", "extra"}, `unexpected argument "extra"`},
	} {
		_, err := Parse(tt.args, Env{})
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v; want a usage error with %q", tt.args, err, tt.want)
		}
	}
}

func TestPathAndPackage(t *testing.T) {
	tests := []struct {
		args     []string
		env      Env
		path     string
		pkg      string
		wantPath string
	}{
		{nil, Env{}, "", "", "schedule_gen.go"},
		{nil, Env{File: "model.go", Package: "model"}, "", "model", "model_gen.go"},
		{[]string{"-o", "s.go"}, Env{Dir: "/w/p", Package: "p"}, "", "p", "/w/p/s.go"},
		{[]string{"-o", "/abs/s.go", "-package", "q"}, Env{Dir: "/w/p", Package: "p"}, "", "q", "/abs/s.go"},
		{[]string{"-o", "-"}, Env{Dir: "/w/my-pkg.v2"}, "", "mypkgv2", "-"},
	}
	for _, tt := range tests {
		r, err := Parse(append([]string{"-schedule", "gpipe", "-ranks", "2", "-micro", "2"}, tt.args...), tt.env)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Path(); got != filepath.FromSlash(tt.wantPath) {
			t.Errorf("%q in %+v: path %q, want %q", tt.args, tt.env, got, tt.wantPath)
		}
		if tt.pkg != "" {
			if got, _ := r.PackageName(); got != tt.pkg {
				t.Errorf("%q in %+v: package %q, want %q", tt.args, tt.env, got, tt.pkg)
			}
		}
	}
}

func TestFromHeader(t *testing.T) {
	r, err := Parse([]string{"-schedule", "1f1b", "-ranks", "2", "-micro", "3", "-table"}, Env{Package: "sched"})
	if err != nil {
		t.Fatal(err)
	}
	src, _, err := r.Generate()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("some", "dir", "x_gen.go")
	again, err := FromHeader(path, src)
	if err != nil {
		t.Fatal(err)
	}
	if again.Path() != path {
		t.Errorf("regenerates %s, want %s", again.Path(), path)
	}
	if n, _ := again.PackageName(); n != "sched" {
		t.Errorf("package %q, want sched (the package clause)", n)
	}
	out, _, err := again.Generate()
	if err != nil || string(out) != string(src) {
		t.Errorf("regeneration differs (%v)", err)
	}

	// A prefixed program (-name Eval) regenerates with its prefix.
	r, err = Parse([]string{"-schedule", "1f1b", "-ranks", "2", "-micro", "3", "-forward-only", "-name", "Eval"}, Env{Package: "sched"})
	if err != nil {
		t.Fatal(err)
	}
	src, _, err = r.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "\n// ppgen gen -forward-only -micro 3 -name Eval -ranks 2 -schedule 1f1b\n") || !strings.Contains(string(src), "\nvar EvalRanks = ") {
		t.Errorf("-name Eval: the header or the names lack the prefix:\n%s", src[:min(len(src), 600)])
	}
	again, err = FromHeader(path, src)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := again.Generate(); err != nil || string(out) != string(src) {
		t.Errorf("-name Eval: regeneration differs (%v)", err)
	}

	for _, tt := range []struct {
		src, want string
	}{
		{"package p\n", "not a ppgen-generated file"},
		{emit.Header + "\n\npackage p\n", "records no invocation"},
		{emit.Header + "\n// ppgen trace -schedule 1f1b\n\npackage p\n", `records "ppgen trace -schedule 1f1b", not a ` + "`ppgen gen`"},
		{emit.Header + "\n// ppgen gen -bogus\n\npackage p\n", "flag provided but not defined: -bogus"},
	} {
		_, err := FromHeader("f.go", []byte(tt.src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v; want %q", tt.src, err, tt.want)
		}
	}
}

// TestPlacement: -placement reaches the families. gpipe and 1f1b take any
// table of one stage per rank: the program verifies (Lower), each rank
// computes the stage the table gives it, and it simulates in the makespan of
// 1F1B and GPipe at P=4, M=8 with F=1, B=2: (M+P-1)·(F+B) = 33. A family's
// own placement is accepted; another is refused with the family's reason.
func TestPlacement(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // error text; "" for success
	}{
		{[]string{"-schedule", "1f1b", "-placement", "3,2,1,0"}, ""},
		{[]string{"-schedule", "gpipe", "-placement", "1,0,3,2"}, ""},
		{[]string{"-schedule", "1f1b", "-placement", "loop"}, ""},
		{[]string{"-schedule", "interleaved", "-placement", "loop"}, ""},
		{[]string{"-schedule", "zbv", "-placement", "v"}, ""},
		{[]string{"-schedule", "zbv", "-placement", "loop"}, "supports only that placement"},
		{[]string{"-schedule", "interleaved", "-placement", "1,0,3,2,0,1,2,3"}, "supports only the loop placement"},
		{[]string{"-schedule", "1f1b", "-placement", "0,1,2,3,3,2,1,0"}, "one stage on each of the 4 ranks"},
		{[]string{"-schedule", "auto", "-placement", "3,2,1,0"}, "auto tries each family with its own placement"},
	} {
		args := append([]string{"-ranks", "4", "-micro", "8"}, tc.args...)
		r, err := Parse(args, Env{Package: "p"})
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		res, err := r.Lower()
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: error %v; want %q", args, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		if strings.Contains(r.Placement, ",") {
			want, _ := ir.ParsePlacement(r.Placement, 4, 1)
			if !slices.Equal(res.Program.Placement.RankOf, want.RankOf) {
				t.Errorf("%q: placement %v", args, res.Program.Placement.RankOf)
			}
			for rank, steps := range res.Program.Ranks {
				for _, st := range steps {
					if st.Kind.IsCompute() && want.RankOf[st.Stage] != rank {
						t.Errorf("%q: rank %d computes %s, a stage of rank %d", args, rank, st, want.RankOf[st.Stage])
					}
				}
			}
			sr, err := sim.Run(res.Program, sim.DefaultCost())
			if err != nil {
				t.Fatal(err)
			}
			if sr.Makespan != 33 {
				t.Errorf("%q: makespan %g, want 33", args, sr.Makespan)
			}
		}
		// What the header records regenerates the same program.
		src, _, err := r.Generate()
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		again, err := FromHeader("x_gen.go", src)
		if err != nil {
			t.Fatal(err)
		}
		if out, _, err := again.Generate(); err != nil || string(out) != string(src) {
			t.Errorf("%q: regeneration differs (%v)", args, err)
		}
	}
}

// TestImportFromHeader: `ppgen import -o` records the CSV relative to the
// output's directory, so its header regenerates the file from anywhere; an
// edit of the CSV then makes it stale, and an import from standard input
// is refused with the fix.
func TestImportFromHeader(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"data", "out"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	csv := filepath.Join(dir, "data", "two.csv")
	writeFile(t, csv, "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
	r, err := ParseImport([]string{"-from", "torch-csv", "data/two.csv", "-o", "out/two_gen.go", "-package", "two"}, Env{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if want := "ppgen import -from torch-csv -package two ../data/two.csv"; r.Invocation != want {
		t.Errorf("invocation %q, want %q", r.Invocation, want)
	}
	src, _, err := r.Generate()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out", "two_gen.go")
	again, err := FromHeader(out, src)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := again.Generate(); err != nil || string(got) != string(src) {
		t.Errorf("regeneration from the header differs (%v)", err)
	}
	writeFile(t, csv, "0F0,0F1,0SEND_F0,0RECV_B0,0SEND_F1,0RECV_B1,0B0,0B1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n")
	if got, _, err := again.Generate(); err != nil || string(got) == string(src) {
		t.Errorf("after an edit of the CSV: regeneration %v, same bytes %v; want other bytes", err, string(got) == string(src))
	}
	stdin := []byte(emit.Header + "\n// ppgen import -from torch-csv -\n\npackage two\n")
	if _, err := FromHeader(out, stdin); err == nil || !strings.Contains(err.Error(), "import the file again") {
		t.Errorf("import from stdin: %v; want the refusal", err)
	}
}

// TestRecordedPaths: the invocation a generated file records names the
// files it reads (-in, -model, an import's file) relative to the output's
// directory, where check and diff run it (FromHeader); absolute paths,
// standard input and requests without an output file keep them as given.
func TestRecordedPaths(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "w")
	abs := filepath.Join(root, "elsewhere", "g.txt")
	tests := []struct {
		name     string
		isImport bool
		args     []string
		want     string // the invocation after "ppgen gen " or "ppgen import "
	}{
		{"in into a subdirectory", false, []string{"-in", "good.txt", "-o", "sub/x_gen.go"}, "-in ../good.txt"},
		{"model into a subdirectory", false, []string{"-schedule", "1f1b", "-model", "m.json", "-o", "sub/x_gen.go"}, "-model ../m.json -schedule 1f1b"},
		{"in and model, deeper", false, []string{"-in", "data/g.txt", "-model", "data/m.json", "-o", "sub/deep/x_gen.go"}, "-in ../../data/g.txt -model ../../data/m.json"},
		{"input below the output", false, []string{"-in", "sub/g.txt", "-o", "sub/x_gen.go"}, "-in g.txt"},
		{"output in a sibling", false, []string{"-in", "good.txt", "-o", "../out/x_gen.go"}, "-in ../w/good.txt"},
		{"quoted", false, []string{"-in", "my schedule.txt", "-o", "sub/x_gen.go"}, `-in "../my schedule.txt"`},
		{"absolute stays", false, []string{"-in", abs, "-o", "sub/x_gen.go"}, "-in " + abs},
		{"stdin stays", false, []string{"-in", "-", "-o", "sub/x_gen.go"}, "-in -"},
		{"no -o: as given", false, []string{"-in", "./good.txt", "-model", "m.json"}, "-in ./good.txt -model m.json"},
		{"stdout: as given", false, []string{"-in", "good.txt", "-o", "-"}, "-in good.txt"},
		{"import", true, []string{"-from", "torch-csv", "data/two.csv", "-o", "sub/two_gen.go"}, "-from torch-csv ../data/two.csv"},
		{"import absolute", true, []string{"-from", "torch-csv", abs, "-o", "sub/two_gen.go"}, "-from torch-csv " + abs},
		{"import without -o", true, []string{"-from", "torch-csv", "data/two.csv"}, "-from torch-csv data/two.csv"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parse, cmd := Parse, "gen"
			if tc.isImport {
				parse, cmd = ParseImport, "import"
			}
			r, err := parse(tc.args, Env{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if want := "ppgen " + cmd + " " + tc.want; r.Invocation != want {
				t.Errorf("%q: invocation %q, want %q", tc.args, r.Invocation, want)
			}
		})
	}
}

// TestInputs: the files a request reads, joined to its directory; standard
// input is none.
func TestInputs(t *testing.T) {
	tests := []struct {
		args []string
		want []Input
	}{
		{[]string{"-schedule", "1f1b"}, nil},
		{[]string{"-in", "g.txt", "-model", "/m.json"}, []Input{{"-in", filepath.Join("d", "g.txt")}, {"-model", "/m.json"}}},
		{[]string{"-in", "-", "-model", "m.json"}, []Input{{"-model", filepath.Join("d", "m.json")}}},
	}
	for _, tc := range tests {
		r, err := Parse(tc.args, Env{Dir: "d"})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Inputs(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: Inputs %v, want %v", tc.args, got, tc.want)
		}
	}
	r, err := ParseImport([]string{"-from", "torch-csv", "x.csv", "-o", "x_gen.go"}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Inputs(), []Input{{"the CSV file", "x.csv"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("import: Inputs %v, want %v", got, want)
	}
}

// TestConfigMissingAndShort: a -ranks or -micro left out is said to be
// missing, not reported as a value 0 the user never gave (a 0 given is the
// family's "ranks = 0"), and a -placement table too short to give every
// rank a stage is reported by its length, not as a rank without a stage.
func TestConfigMissingAndShort(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-schedule", "1f1b", "-micro", "4"}, "-ranks is required: give -ranks P"},
		{[]string{"-schedule", "1f1b", "-ranks", "4"}, "-micro is required: give -micro M"},
		{[]string{"-schedule", "1f1b"}, "-ranks is required"},
		{[]string{"-schedule", "1f1b", "-ranks", "0", "-micro", "4"}, "ranks = 0 is not supported"},
		{[]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "0"}, "micro = 0 is not supported"},
		{[]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-placement", "1,0,3"}, `-placement "1,0,3": 3 entries for 4 stages (P·V = 4 × 1); give one rank per stage, such as 0,1,2,3`},
		{[]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-placement", "1,0,x"}, "3 entries for 4 stages"},
		{[]string{"-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-placement", "1,0,1"}, "one stage on each of the 2 ranks"},
		{[]string{"-schedule", "interleaved", "-ranks", "2", "-micro", "4", "-placement", "0,0"}, "2 entries for 4 stages (P·V = 2 × 2); give one rank per stage, such as 0,1,0,1"},
		{[]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-placement", "1,0,3,3"}, "rank 2 holds no stage"},
	} {
		r, err := Parse(tc.args, Env{})
		if err == nil {
			_, err = r.Lower()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.args, err, tc.want)
		}
	}
	// A table of the right length is taken.
	r, err := Parse([]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-placement", "3,2,1,0"}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lower(); err != nil {
		t.Errorf("a table of 4 stages: %v", err)
	}
}

// TestNamePrefixRefused: gen's -name takes an exported Go identifier; any
// other value is a usage error naming it and the fix.
func TestNamePrefixRefused(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"eval", `-name "eval" does not start an exported Go identifier (its names would be evalSpec, evalRanks, ...); give an upper-case identifier such as Eval`},
		{"Ev-al", `-name "Ev-al" does not start an exported Go identifier`},
		{"9", `-name "9"`},
	} {
		r, err := Parse([]string{"-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-package", "p", "-name", tt.name}, Env{})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = r.Generate()
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("-name %q: %v; want a usage error with %q", tt.name, err, tt.want)
		}
	}
}
