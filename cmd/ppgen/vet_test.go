package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/internal/long"
)

func TestVetCommand(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not found")
	}
	broken := "../../gen/vet/testdata/src/deletedrecv/schedule_gen.go"
	tests := []struct {
		args   []string
		code   int
		stderr []string
	}{
		{[]string{"vet", "../../generated/...", "../../examples/..."}, 0, nil},
		{[]string{"vet", broken}, 1, []string{
			broken + ":45:2: rank 0 step 5: x.SendF(0x0000_0001_0001_0001) (0SEND_F1 peer 1, slot 1) is the 2nd act send from rank 0 to rank 1",
			"\t" + broken + ":89:2: the receive it pairs with: rank 1 step 9",
			broken + ":85:2: edited generated code: rank 1 step 5 is x.SendB(0x0001_0000_0000_0000) (1SEND_B0 peer 0, slot 0)",
			"ppgen vet: 2 problem(s) in 1 generated file(s)",
		}},
		{[]string{"vet", "../../gen/vet/testdata/src/github.com/ppgen/ppgen/runtime/pipe/pipe.go"}, 2, []string{"is not a ppgen-generated file"}},
		{[]string{"vet"}, 2, []string{"name packages (./...) or generated .go files"}},
		{[]string{"vet", "./no/such/dir"}, 2, []string{"ppgen vet:"}},
		{[]string{"vet", broken, "-v"}, 2, []string{`ppgen vet: flag -v after the argument "` + broken + `": flags go before arguments; see ` + "`ppgen vet -h`"}},
	}
	for _, tt := range tests {
		code, stdout, stderr := dcRun(tt.args...)
		if code != tt.code {
			t.Errorf("ppgen %s: exit %d, want %d\n%s%s", strings.Join(tt.args, " "), code, tt.code, stdout, stderr)
		}
		for _, s := range tt.stderr {
			if !strings.Contains(stderr, s) {
				t.Errorf("ppgen %s: stderr lacks %q:\n%s", strings.Join(tt.args, " "), s, stderr)
			}
		}
	}
}

// TestCIGate demonstrates the generated-code gate of .ci/run on a copy of
// this module: it passes as committed, fails naming the file and line once
// one line of a committed generated file is edited, and passes again once
// the edit is reverted.
//
// By default the copy keeps one generated package, generated/onef1b (the
// one edited), and none of examples/: the same three verdicts of the same
// script in a few seconds. PPGEN_LONG=1 copies the whole module, every
// generated file checked, regenerated and vetted three times.
func TestCIGate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go generate and ppgen over a copy of the module")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not found")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dcCopyModule(t, root, dir, long.Enabled())
	gate := func() (int, string) {
		cmd := exec.Command(bash, filepath.Join(dir, ".ci", "run"), "gate")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), string(out)
			}
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := gate(); code != 0 {
		t.Fatalf("gate fails on the committed tree: exit %d\n%s", code, out)
	}

	file := filepath.Join(dir, "generated", "onef1b", "schedule_gen.go")
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(orig), "\n")
	edit := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "\tx.RecvAndB(0x0000_0000_") {
			edit = i // the first gradient receive of rank 0
			break
		}
	}
	if edit < 0 {
		t.Fatal("no x.RecvAndB of stage 0 micro 0 in generated/onef1b/schedule_gen.go")
	}
	edited := append([]string(nil), lines...)
	edited[edit] = strings.Replace(lines[edit], "(0x0000_0000_", "(0x0000_0001_", 1) // receive and run micro 1's backward first
	if edited[edit] == lines[edit] {
		t.Fatalf("line %d %q: edit did not apply", edit+1, lines[edit])
	}
	if err := os.WriteFile(file, []byte(strings.Join(edited, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := gate()
	want := "generated/onef1b/schedule_gen.go:" + strconv.Itoa(edit+1) + ":"
	if code == 0 || !strings.Contains(out, want) {
		t.Fatalf("gate after editing line %d (%q -> %q): exit %d, want a failure naming %s\n%s", edit+1, lines[edit], edited[edit], code, want, out)
	}
	t.Logf("gate with line %d edited (exit %d):\n%s", edit+1, code, out)

	if err := os.WriteFile(file, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := gate(); code != 0 {
		t.Fatalf("gate fails after reverting the edit: exit %d\n%s", code, out)
	}
}

// dcCopyModule copies what the gate needs of the module at root into dir:
// go.mod, go.sum, .ci and every package directory (testdata directories,
// .git and top-level build outputs left out). Unless full, it keeps of
// generated/ only generated/onef1b and of examples/ only the empty
// directory, which the gate's go generate and vet steps then cover.
func dcCopyModule(t *testing.T, root, dir string, full bool) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (d.Name() == ".git" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			if parent := filepath.Dir(rel); !full && (parent == "examples" || parent == "generated" && d.Name() != "onef1b") {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if filepath.Dir(rel) == "." && rel != "go.mod" && rel != "go.sum" {
			return nil // binaries and notes at the top level
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}
