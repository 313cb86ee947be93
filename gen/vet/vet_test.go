package vet

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/gencmd"
)

// vetFile parses the file at path and returns the analyzer's diagnostics as
// "line: message" strings.
func vetFile(t testing.TB, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	diags, err := Run(fset, []*ast.File{f})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range diags {
		out = append(out, fmt.Sprintf("%d: %s", fset.Position(d.Pos).Line, d.Message))
	}
	return out
}

// TestCatalog: every committed generated file passes.
func TestCatalog(t *testing.T) {
	files, err := filepath.Glob("../../generated/*/*_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../examples/mlp/schedules_gen.go")
	// Packages of two programs each, the second under -name Eval.
	charlm, err := filepath.Glob("../../examples/charlm/program/*/*_gen.go")
	if err != nil || len(charlm) < 4 {
		t.Fatalf("examples/charlm/program: %v, %v", charlm, err)
	}
	files = append(files, charlm...)
	// runtime/train's test programs, several per package (-name).
	train, err := filepath.Glob("../../runtime/train/internal/testprog/*_gen.go")
	if err != nil || len(train) < 10 {
		t.Fatalf("runtime/train/internal/testprog: %v, %v", train, err)
	}
	files = append(files, train...)
	if len(files) < 2 {
		t.Fatalf("found only %v", files)
	}
	for _, path := range files {
		t.Run(path, func(t *testing.T) {
			if d := vetFile(t, path); len(d) > 0 {
				t.Errorf("%s:\n%s", path, strings.Join(d, "\n"))
			}
		})
	}
}

// TestGoldens: every golden of gen/testdata/golden passes.
func TestGoldens(t *testing.T) {
	files, err := filepath.Glob("../testdata/golden/*/*.golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if d := vetFile(t, path); len(d) > 0 {
			t.Errorf("%s:\n%s", path, strings.Join(d, "\n"))
		}
	}
}

// generate writes `ppgen gen args` to dir/schedule_gen.go in package p.
func generate(t testing.TB, dir string, args ...string) (string, bool) {
	t.Helper()
	req, err := gencmd.Parse(args, gencmd.Env{Dir: dir, Package: "p"})
	if err != nil {
		t.Fatal(err)
	}
	src, _, err := req.Generate()
	if err != nil {
		return "", false // a configuration the family refuses
	}
	path := filepath.Join(dir, "schedule_gen.go")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, true
}

// TestRoundTrip generates every family with every cross-family option (and
// the -table and -helper forms) and checks that the analyzer reads each file
// back to the program it was generated from. A step kind gen/emit writes and
// this package cannot read fails here.
func TestRoundTrip(t *testing.T) {
	families := []string{"1f1b", "gpipe", "interleaved", "interleaved-zb", "looped-bfs", "v-half", "v-min", "zb-h1", "zb-h2", "zbv", "dualpipev", "dualpipe"}
	options := [][]string{nil, {"-split"}, {"-overlap"}, {"-overlap", "-dxdw-in-overlap"}, {"-table", "-helper", "7"}}
	n := 0
	for _, fam := range families {
		for _, opt := range options {
			for _, pm := range [][2]string{{"3", "2"}, {"4", "8"}} {
				args := append([]string{"-schedule", fam, "-ranks", pm[0], "-micro", pm[1]}, opt...)
				path, ok := generate(t, t.TempDir(), args...)
				if !ok {
					continue
				}
				n++
				if d := vetFile(t, path); len(d) > 0 {
					t.Errorf("ppgen gen %s: %d diagnostics on the unedited file:\n%s", strings.Join(args, " "), len(d), strings.Join(d, "\n"))
				}
			}
		}
	}
	if n < 50 {
		t.Errorf("only %d configurations generated; the families changed?", n)
	}
}

var callLine = regexp.MustCompile(`^\tx\.[A-Za-z]+\(([^()]*)\)( +//.*)?$`)

// TestMutations edits one call of generated files at random (delete it,
// swap it with the next call, change one of its integer arguments, duplicate
// it) and checks that every edit is reported, on the edited line or a line
// next to it when the header can regenerate the file.
func TestMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	configs := [][]string{
		{"-schedule", "1f1b", "-ranks", "4", "-micro", "8"},
		{"-schedule", "zbv", "-ranks", "3", "-micro", "6", "-helper", "10"},
		{"-schedule", "interleaved", "-ranks", "2", "-micro", "5", "-virtual", "2", "-overlap"},
		{"-schedule", "1f1b", "-ranks", "3", "-micro", "4", "-fsdp", "1"},
		{"-schedule", "gpipe", "-ranks", "2", "-micro", "5", "-swap", "2"},
		{"-schedule", "mpipe", "-ranks", "3", "-micro", "4"},
		{"-schedule", "1f1b", "-ranks", "3", "-micro", "4", "-ship-labels"},
	}
	for _, args := range configs {
		dir := t.TempDir()
		path, ok := generate(t, dir, args...)
		if !ok {
			t.Fatalf("ppgen gen %v failed", args)
		}
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(orig), "\n")
		var calls []int
		for i, l := range lines {
			if callLine.MatchString(l) {
				calls = append(calls, i)
			}
		}
		for range 60 {
			i := calls[rng.IntN(len(calls))]
			edited := append([]string(nil), lines...)
			var what string
			switch op := rng.IntN(4); {
			case op == 0:
				what = "deleted"
				edited = append(edited[:i], edited[i+1:]...)
			case op == 1 && i+1 < len(lines) && callLine.MatchString(lines[i+1]):
				what = "swapped with the next call"
				edited[i], edited[i+1] = edited[i+1], edited[i]
			case op == 2 && !strings.HasSuffix(lines[i], "()"):
				args := strings.Split(callLine.FindStringSubmatch(lines[i])[1], ", ")
				k := rng.IntN(len(args))
				switch {
				case strings.HasPrefix(args[k], "pipe."):
					continue
				case strings.HasPrefix(args[k], "0x"):
					// A pipe.At: one of its four 16-bit fields changes.
					fields := strings.Split(args[k][2:], "_")
					f := rng.IntN(len(fields))
					v, _ := strconv.ParseUint(fields[f], 16, 16)
					fields[f] = fmt.Sprintf("%04x", (v+1)&0xffff)
					args[k] = "0x" + strings.Join(fields, "_")
				default:
					args[k] += "1" // 0 -> 01 is 1 in Go's octal; -1 -> -11
					if args[k] == "01" {
						args[k] = "1"
					}
				}
				what = "argument changed"
				edited[i] = lines[i][:strings.IndexByte(lines[i], '(')+1] + strings.Join(args, ", ") + ")"
			default:
				what = "duplicated"
				edited = append(edited[:i+1], edited[i:]...)
			}
			if strings.Join(edited, "\n") == string(orig) {
				continue
			}
			if err := os.WriteFile(path, []byte(strings.Join(edited, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			d := vetFile(t, path)
			if len(d) == 0 {
				t.Errorf("ppgen gen %v: line %d %q %s: no diagnostic", args, i+1, lines[i], what)
				continue
			}
			// One diagnostic points at the edit (the edited-code one, or a
			// range error on the edited call).
			// A deleted call's diagnostic may be at the next call, past
			// the end of a helper function.
			hi := i + 2
			for j := i; j < len(edited); j++ {
				if callLine.MatchString(edited[j]) {
					hi = max(hi, j+1)
					break
				}
			}
			near := false
			for _, msg := range d {
				var line int
				fmt.Sscanf(msg, "%d:", &line)
				near = near || line >= i && line <= hi
			}
			if !near {
				t.Errorf("ppgen gen %v: line %d %q %s: no diagnostic at lines %d-%d:\n%s", args, i+1, lines[i], what, i, hi, strings.Join(d, "\n"))
			}
		}
	}
}

// TestOwnedMismatch: an mpipe file whose Spec.Owned disagrees with the
// owners' transfers is reported (the fingerprint does not cover the Spec,
// so only the Owned checks see the edit).
func TestOwnedMismatch(t *testing.T) {
	dir := t.TempDir()
	path, ok := generate(t, dir, "-schedule", "mpipe", "-ranks", "3", "-micro", "4")
	if !ok {
		t.Fatal("ppgen gen failed")
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := vetFile(t, path); len(d) > 0 {
		t.Fatalf("as generated:\n%s", strings.Join(d, "\n"))
	}
	re := regexp.MustCompile(`Owned:( +)3,`)
	if !re.Match(orig) {
		t.Fatalf("no Owned: 3 field in\n%s", orig)
	}
	if err := os.WriteFile(path, re.ReplaceAll(orig, []byte("Owned:${1}2,")), 0o644); err != nil {
		t.Fatal(err)
	}
	d := vetFile(t, path)
	// The owners of micro-batches past Owned no longer own them: their
	// loads and sends are reported, naming Spec.Owned.
	if len(d) == 0 || !strings.Contains(strings.Join(d, "\n"), "not on rank 2, which does not own micro 2 (Spec.Owned = 2") {
		t.Errorf("diagnostics %v, want the Owned mismatch", d)
	}
}

// TestShipLabelsMismatch: a file that ships labels but whose Spec does not
// say so (the runtime's first stage would not load them) is reported.
func TestShipLabelsMismatch(t *testing.T) {
	dir := t.TempDir()
	path, ok := generate(t, dir, "-schedule", "1f1b", "-ranks", "3", "-micro", "4", "-ship-labels")
	if !ok {
		t.Fatal("ppgen gen failed")
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := vetFile(t, path); len(d) > 0 {
		t.Fatalf("as generated:\n%s", strings.Join(d, "\n"))
	}
	re := regexp.MustCompile(`ShipLabels:( +)true,`)
	if !re.Match(orig) {
		t.Fatalf("no ShipLabels: true field in\n%s", orig)
	}
	if err := os.WriteFile(path, re.ReplaceAll(orig, []byte("ShipLabels:${1}false,")), 0o644); err != nil {
		t.Fatal(err)
	}
	d := vetFile(t, path)
	if len(d) == 0 || !strings.Contains(strings.Join(d, "\n"), "Spec.ShipLabels is false, but the rank functions ship labels (DATA_SEND/DATA_RECV): true") {
		t.Errorf("diagnostics %v, want the ShipLabels mismatch", d)
	}
}
