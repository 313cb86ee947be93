package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenHeaderPathsFromOutput: gen into another directory records -in and
// -model relative to the generated file, so that check and diff, which run
// the header's command line in the file's directory, regenerate it from the
// directory gen ran in and from the file's own.
func TestGenHeaderPathsFromOutput(t *testing.T) {
	model, err := os.ReadFile("../../examples/models/tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	t.Chdir(root)
	schedule := cliMust(t, "show", "-schedule", "1f1b", "-ranks", "2", "-micro", "2")
	for name, data := range map[string][]byte{"good.txt": []byte(schedule), "m.json": model} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join("sub", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		out    string // relative to root
		args   []string
		header string
	}{
		{"in", "sub/in_gen.go", []string{"-in", "good.txt"}, "// ppgen gen -in ../good.txt\n"},
		{"model", "sub/model_gen.go", []string{"-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-model", "m.json"},
			"// ppgen gen -micro 4 -model ../m.json -ranks 2 -schedule 1f1b\n"},
		{"in and model, deeper", "sub/deep/both_gen.go", []string{"-in", "./good.txt", "-model", "m.json"},
			"// ppgen gen -in ../../good.txt -model ../../m.json\n"},
		{"absolute", "sub/abs_gen.go", []string{"-in", filepath.Join(root, "good.txt")},
			"// ppgen gen -in " + filepath.Join(root, "good.txt") + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(root)
			cliMust(t, append([]string{"gen", "-o", tc.out}, tc.args...)...)
			src, err := os.ReadFile(tc.out)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(src), tc.header) {
				t.Errorf("header of %s: want %q in\n%.200s", tc.out, tc.header, src)
			}
			for _, from := range []string{root, filepath.Join(root, filepath.Dir(tc.out))} {
				t.Chdir(from)
				file, err := filepath.Rel(from, filepath.Join(root, tc.out))
				if err != nil {
					t.Fatal(err)
				}
				for _, cmd := range []string{"check", "diff"} {
					if code, stdout, stderr := cliRun(t, cmd, file); code != 0 {
						t.Errorf("in %s: ppgen %s %s: exit %d: %s%s", from, cmd, file, code, stdout, stderr)
					}
				}
			}
		})
	}
	// The header reads the input itself: an edit of it makes the file stale.
	t.Chdir(filepath.Join(root, "sub"))
	other := cliMust(t, "show", "-schedule", "gpipe", "-ranks", "2", "-micro", "2")
	if err := os.WriteFile(filepath.Join(root, "good.txt"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cliRun(t, "check", "in_gen.go"); code != 1 {
		t.Errorf("check after an edit of -in: exit %d (%s); want 1 (stale)", code, stderr)
	}
}

// TestOutputIsNotInput: no command writes over a file it reads (-o or -svg
// naming its -in, -model, CSV or -trace, however spelled or linked): it
// exits 2 naming both, before any work, and leaves the directory as it was.
func TestOutputIsNotInput(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	files := map[string]string{
		"g.txt":           cliMust(t, "show", "-schedule", "1f1b", "-ranks", "2", "-micro", "2"),
		"g.csv":           "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n",
		"m.json":          `{"layers": [{"F": 1, "B": 2}, {"F": 1, "B": 2}]}`,
		"schedule_gen.go": cliMust(t, "show", "-schedule", "gpipe", "-ranks", "2", "-micro", "2"),
		"trace.json":      "{}",
	}
	for name, data := range files {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("g.txt", "link.txt"); err != nil {
		t.Fatal(err)
	}
	if err := os.Link("g.txt", "hard.txt"); err != nil {
		t.Fatal(err)
	}
	before := dirListing(t, root)
	sched := []string{"-schedule", "1f1b", "-ranks", "2", "-micro", "2"}
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"gen -in", []string{"gen", "-in", "g.txt", "-o", "g.txt"}, "-o g.txt is the same file as -in g.txt"},
		{"gen -in spelled otherwise", []string{"gen", "-in", "g.txt", "-o", "./sub/../g.txt"}, "-o ./sub/../g.txt is the same file as -in g.txt"},
		{"gen -in absolute", []string{"gen", "-in", "g.txt", "-o", filepath.Join(root, "g.txt")}, "-o " + filepath.Join(root, "g.txt") + " is the same file as -in g.txt"},
		{"gen -in symlink", []string{"gen", "-in", "link.txt", "-o", "g.txt"}, "-o g.txt is the same file as -in link.txt"},
		{"gen -in hard link", []string{"gen", "-in", "hard.txt", "-o", "g.txt"}, "-o g.txt is the same file as -in hard.txt"},
		{"gen -in default output", []string{"gen", "-in", "schedule_gen.go"}, "the default output schedule_gen.go is the same file as -in schedule_gen.go"},
		{"gen -model", append([]string{"gen", "-model", "m.json", "-o", "m.json"}, sched...), "-o m.json is the same file as -model m.json"},
		{"report -in", []string{"report", "-in", "g.txt", "-o", "g.txt"}, "-o g.txt is the same file as -in g.txt"},
		{"report -model", append([]string{"report", "-model", "m.json", "-o", "m.json"}, sched...), "-o m.json is the same file as -model m.json"},
		{"sim -svg -in", []string{"sim", "-in", "g.txt", "-svg", "g.txt"}, "-svg g.txt is the same file as -in g.txt"},
		{"sim -svg -model", append([]string{"sim", "-model", "m.json", "-svg", "m.json"}, sched...), "-svg m.json is the same file as -model m.json"},
		{"sim -compare -svg -model", []string{"sim", "-compare", "1f1b,gpipe", "-ranks", "2", "-micro", "2", "-model", "m.json", "-svg", "m.json"}, "-svg m.json is the same file as -model m.json"},
		{"trace -in", []string{"trace", "-in", "g.txt", "-o", "g.txt"}, "-o g.txt is the same file as -in g.txt"},
		{"trace -model", append([]string{"trace", "-model", "m.json", "-o", "m.json"}, sched...), "-o m.json is the same file as -model m.json"},
		{"export -in", []string{"export", "-to", "torch-csv", "-in", "g.csv", "-o", "g.csv"}, "-o g.csv is the same file as -in g.csv"},
		{"import", []string{"import", "-from", "torch-csv", "g.csv", "-o", "g.csv"}, "-o g.csv is the same file as the CSV file g.csv"},
		{"tune", []string{"tune", "-trace", "trace.json", "-o", "trace.json"}, "-o trace.json is the same file as -trace trace.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := cliRun(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "write the output to another file") {
				t.Errorf("ppgen %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q; want nothing", stdout)
			}
			if after := dirListing(t, root); after != before {
				t.Errorf("the directory changed:\n%s\nwant\n%s", after, before)
			}
		})
	}
	// Standard output and a file that is not the input are fine.
	cliMust(t, "gen", "-in", "g.txt", "-package", "p", "-o", "-")
	cliMust(t, "gen", "-in", "g.txt", "-package", "p", "-o", "out_gen.go")
}

// dirListing returns the names and contents of the files in dir.
func dirListing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(e.Name() + ": " + string(data) + "\n")
	}
	return b.String()
}

// TestWriteFileAtomicLinksAndMode: -o naming a symlink writes its target
// (the link stays a link; a dangling one creates its target), and an
// existing file keeps its permission bits.
func TestWriteFileAtomicLinksAndMode(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "real")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(sub, "sched_gen.go")
	if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.go")
	if err := os.Symlink(filepath.Join("real", "sched_gen.go"), link); err != nil {
		t.Fatal(err)
	}
	chain := filepath.Join(dir, "chain.go")
	if err := os.Symlink("link.go", chain); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling.go")
	if err := os.Symlink(filepath.Join("real", "new.go"), dangling); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct{ path, file string }{{link, target}, {chain, target}, {dangling, filepath.Join(sub, "new.go")}} {
		data := []byte(fmt.Sprintf("new %d", i))
		if err := writeFileAtomic(tc.path, data); err != nil {
			t.Fatalf("writeFileAtomic(%s): %v", tc.path, err)
		}
		if fi, err := os.Lstat(tc.path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symlink (%v, %v)", tc.path, fi.Mode(), err)
		}
		if got, err := os.ReadFile(tc.file); err != nil || string(got) != string(data) {
			t.Errorf("target %s = %q, %v; want %q", tc.file, got, err, data)
		}
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("target mode %v, %v; want 0600 kept", fi.Mode(), err)
	}
	// A plain file keeps its mode too.
	plain := filepath.Join(dir, "plain.go")
	if err := os.WriteFile(plain, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(plain, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(plain); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("plain mode %v, %v; want 0640 kept", fi.Mode(), err)
	}
	// No temporary files are left anywhere.
	for _, d := range []string{dir, sub} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp") {
				t.Errorf("left %s in %s", e.Name(), d)
			}
		}
	}
	// A symlink loop is refused with a reason.
	loop := filepath.Join(dir, "loop.go")
	if err := os.Symlink("loop.go", loop); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(loop, []byte("x")); err == nil || !strings.Contains(err.Error(), "levels of symlinks") {
		t.Errorf("loop: %v, want a refusal", err)
	}
}
