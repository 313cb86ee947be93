package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The console blocks of README.md and the docs are checked: TestREADME runs
// each command of every ```console block with a ppgen built from this
// checkout, in the repository root, and compares stdout and stderr together
// with the text under it. A block whose output cannot be compared (ports, timings, a
// state the block does not set up) carries a comment on the line before it:
//
//	<!-- not checked: the reason -->
//
// `go test ./cmd/ppgen -run TestREADME -update` rewrites the output of the
// checked blocks in every file; -run 'TestREADME$/docs/schedules.md' picks
// one file.

// consoleCmd is one "$ command" line of a console block and the output
// printed under it.
type consoleCmd struct {
	line  int    // 1-based line of the command in the file
	cmd   string // after "$ "
	want  string // the lines under it, each ending in "\n", trailing blank lines dropped
	blank bool   // a blank line separates it from the next command
}

// consoleBlock is one ```console block.
type consoleBlock struct {
	line       int    // 1-based line of the opening fence
	from, to   int    // 0-based lines of its body: [from, to)
	notChecked string // the reason of a <!-- not checked: ... --> comment before it
	cmds       []consoleCmd
}

var notChecked = regexp.MustCompile(`^<!-- not checked: (.+) -->$`)

// parseConsoleBlocks finds the console blocks of a Markdown file.
func parseConsoleBlocks(lines []string) ([]consoleBlock, error) {
	var blocks []consoleBlock
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```console" {
			continue
		}
		b := consoleBlock{line: i + 1, from: i + 1}
		for j := i - 1; j >= 0; j-- {
			if strings.TrimSpace(lines[j]) == "" {
				continue
			}
			if m := notChecked.FindStringSubmatch(strings.TrimSpace(lines[j])); m != nil {
				b.notChecked = m[1]
			}
			break
		}
		j := i + 1
		for ; j < len(lines) && lines[j] != "```"; j++ {
			switch l := lines[j]; {
			case strings.HasPrefix(l, "$ "):
				if n := len(b.cmds); n > 0 && strings.HasSuffix("\n"+b.cmds[n-1].want, "\n\n") {
					b.cmds[n-1].blank = true
				}
				b.cmds = append(b.cmds, consoleCmd{line: j + 1, cmd: strings.TrimPrefix(l, "$ ")})
			case len(b.cmds) == 0:
				return nil, fmt.Errorf("line %d: console block text before its first \"$ \" command", j+1)
			default:
				b.cmds[len(b.cmds)-1].want += l + "\n"
			}
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: console block not closed", i+1)
		}
		b.to = j
		for k := range b.cmds {
			b.cmds[k].want = strings.TrimRight(b.cmds[k].want, "\n")
			if b.cmds[k].want != "" {
				b.cmds[k].want += "\n"
			}
		}
		blocks = append(blocks, b)
		i = j
	}
	return blocks, nil
}

// examples are the example trainers TestREADME builds and runs (in
// process, they print the same on every run), by directory under
// examples/.
var examples = []string{"mlp", "tower"}

// readmeCommand turns a README command into a shell command line for the
// built ppgen (and the built example trainers), or says why it is not one
// the test runs.
func readmeCommand(cmd string) (string, error) {
	for _, prefix := range []string{"go run ./cmd/ppgen ", "go tool ppgen ", "ppgen "} {
		if strings.HasPrefix(cmd, prefix) {
			return "ppgen " + strings.TrimPrefix(cmd, prefix), nil
		}
	}
	for _, ex := range examples {
		if rest, ok := strings.CutPrefix(cmd, "go run ./examples/"+ex+" "); ok && !strings.Contains(rest, "tcp") {
			return ex + " " + rest, nil
		}
	}
	if strings.HasPrefix(cmd, "cat ") && !strings.ContainsAny(cmd, ";|&><`$") {
		return cmd, nil
	}
	return "", fmt.Errorf("%q is not a ppgen command: make it one, or mark the block <!-- not checked: why -->", cmd)
}

// repoDocFiles returns the repository's root (two levels up) and its
// docFiles, failing t when either cannot be had.
func repoDocFiles(t *testing.T) (root string, files []string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, err = docFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, files
}

// docFiles returns the Markdown files whose console blocks TestREADME
// checks, relative to root: README.md, every other top-level .md file but
// BENCHMARKS.md (its figures are measurements, not outputs a rerun
// reproduces), and docs/*.md.
func docFiles(root string) ([]string, error) {
	var files []string
	for _, glob := range []string{"*.md", "docs/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			return nil, err
		}
		for _, path := range m {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return nil, err
			}
			if rel != "BENCHMARKS.md" {
				files = append(files, filepath.ToSlash(rel))
			}
		}
	}
	sort.Strings(files)
	return files, nil
}

// TestREADME runs the console blocks of every Markdown file docFiles
// lists, one subtest per file (go test ./cmd/ppgen -run
// 'TestREADME$/docs/schedules.md' checks one).
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ppgen and runs the docs' commands")
	}
	root, files := repoDocFiles(t)
	if !slices.Contains(files, "README.md") || !slices.Contains(files, "docs/cli.md") {
		t.Fatalf("docFiles = %v: README.md or docs/cli.md is missing", files)
	}
	bin := t.TempDir()
	var built sync.Once
	build := func(t *testing.T) {
		built.Do(func() {
			pkgs := map[string]string{"ppgen": "."}
			for _, ex := range examples {
				pkgs[ex] = "../../examples/" + ex
			}
			for name, pkg := range pkgs {
				if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg).CombinedOutput(); err != nil {
					t.Fatalf("go build %s: %v\n%s", pkg, err, out)
				}
			}
		})
		for _, ex := range examples {
			if _, err := os.Stat(filepath.Join(bin, ex)); err != nil {
				t.Fatalf("ppgen and examples/%s were not built: %v", ex, err)
			}
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		// Nothing of go generate's or the caller's may change the output
		// (COLUMNS: ppgen list's width).
		if k, _, _ := strings.Cut(kv, "="); k != "GOFILE" && k != "GOPACKAGE" && k != "PATH" && k != "COLUMNS" && !strings.HasPrefix(k, "PPGEN_") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		progressEnv+"=off") // a slow machine must not add progress lines
	entries := func() map[string]bool { // the files of root and docs/
		names := map[string]bool{}
		for _, dir := range []string{".", "docs"} {
			des, err := os.ReadDir(filepath.Join(root, dir))
			if err != nil {
				t.Fatal(err)
			}
			for _, de := range des {
				names[path.Join(dir, de.Name())] = true
			}
		}
		return names
	}
	before := entries()
	checked := map[string]int{} // file -> commands run; absent: filtered out by -run
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			checked[file] = checkConsoleBlocks(t, root, file, env, build)
		})
	}
	for name := range entries() {
		if !before[name] {
			t.Errorf("the docs' commands left %s behind: name the file it writes in the command, so that the test removes it", name)
		}
	}
	if n, ran := checked["README.md"]; ran && n == 0 {
		t.Error("README.md: no command was checked")
	}
}

// checkConsoleBlocks runs the commands of file's checked console blocks in
// root and compares their output with the file's, or with -update rewrites
// the file's outputs. It returns how many commands it ran; build builds
// the binaries the first time a file has a command to run.
func checkConsoleBlocks(t *testing.T, root, file string, env []string, build func(*testing.T)) int {
	path := filepath.Join(root, filepath.FromSlash(file))
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	blocks, err := parseConsoleBlocks(lines)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	checked, update := 0, cliUpdate()
	replace := map[int][]string{} // block index -> new body
	for bi, b := range blocks {
		if b.notChecked != "" {
			continue
		}
		if len(b.cmds) == 0 {
			t.Errorf("%s:%d: an empty console block", file, b.line)
			continue
		}
		var body []string
		for _, c := range b.cmds {
			shell, err := readmeCommand(c.cmd)
			if err != nil {
				t.Errorf("%s:%d: %v", file, c.line, err)
				continue
			}
			build(t)
			// The files the command names: one it writes (sim -svg
			// docs/...) must come out the same, or the committed file is
			// stale; without -update it is put back as it was. One it
			// creates (trace -o zbv.json) is removed after it.
			before := map[string][]byte{}
			var absent []string
			for _, arg := range strings.Fields(c.cmd) {
				if b, err := os.ReadFile(filepath.Join(root, arg)); err == nil {
					before[arg] = b
				} else if errors.Is(err, fs.ErrNotExist) && filepath.IsLocal(arg) {
					absent = append(absent, arg)
				}
			}
			cmd := exec.Command("bash", "-c", shell)
			cmd.Dir, cmd.Env = root, env
			out, _ := cmd.CombinedOutput() // the exit status is part of the text where the doc shows it
			for _, arg := range absent {
				if info, err := os.Lstat(filepath.Join(root, arg)); err == nil && info.Mode().IsRegular() {
					if err := os.Remove(filepath.Join(root, arg)); err != nil {
						t.Fatal(err)
					}
				}
			}
			for arg, b := range before {
				if now, err := os.ReadFile(filepath.Join(root, arg)); err != nil || string(now) != string(b) {
					if update {
						continue
					}
					t.Errorf("%s:%d: `%s` changed %s: the committed file is stale (-update keeps the new one)", file, c.line, c.cmd, arg)
					if err := os.WriteFile(filepath.Join(root, arg), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A console block cannot show trailing blank lines.
			got := strings.TrimRight(string(out), "\n")
			if got != "" {
				got += "\n"
			}
			checked++
			if got != c.want && !update {
				t.Errorf("%s:%d: `%s` prints\n%s\nbut %s shows\n%s\n(go test ./cmd/ppgen -run 'TestREADME$/%s' -update rewrites it)", file, c.line, c.cmd, got, file, c.want, file)
			}
			body = append(body, "$ "+c.cmd)
			if got != "" {
				body = append(body, strings.Split(strings.TrimSuffix(got, "\n"), "\n")...)
			}
			if c.blank {
				body = append(body, "")
			}
		}
		replace[bi] = body
	}
	if update && len(replace) > 0 {
		var out []string
		next := 0
		for bi, b := range blocks {
			body, ok := replace[bi]
			if !ok {
				continue
			}
			out = append(out, lines[next:b.from]...)
			out = append(out, body...)
			next = b.to
		}
		out = append(out, lines[next:]...)
		if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return checked
}

func TestParseConsoleBlocks(t *testing.T) {
	md := strings.Split("text\n```console\n$ ppgen list\nA\nB\n\n$ cat f\nC\n```\n<!-- not checked: ports -->\n\n```console\n$ go run ./examples/mlp\nx\n```\n", "\n")
	blocks, err := parseConsoleBlocks(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("%d blocks; want 2", len(blocks))
	}
	b := blocks[0]
	want := []consoleCmd{{line: 3, cmd: "ppgen list", want: "A\nB\n", blank: true}, {line: 7, cmd: "cat f", want: "C\n"}}
	if b.notChecked != "" || b.from != 2 || b.to != 8 || fmt.Sprint(b.cmds) != fmt.Sprint(want) {
		t.Errorf("block 0 = %+v; want lines [2, 8) and %+v", b, want)
	}
	if blocks[1].notChecked != "ports" {
		t.Errorf("block 1 not checked = %q; want %q", blocks[1].notChecked, "ports")
	}
	for _, bad := range []string{"```console\nno command\n```", "```console\n$ ppgen list\n"} {
		if _, err := parseConsoleBlocks(strings.Split(bad, "\n")); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"go run ./cmd/ppgen list", "ppgen list"},
		{"go tool ppgen check ./...", "ppgen check ./..."},
		{"ppgen verify -in x; echo \"exit $?\"", "ppgen verify -in x; echo \"exit $?\""},
		{"cat docs/crossed.txt", "cat docs/crossed.txt"},
		{"go run ./examples/mlp -schedule zbv -check", "mlp -schedule zbv -check"},
		{"go run ./examples/mlp -transport tcp", ""},
		{"go run ./examples/tower -loop -check", "tower -loop -check"},
		{"go build ./...", ""},
		{"cat x; rm -rf y", ""},
	} {
		got, err := readmeCommand(tc.in)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("readmeCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestNoCitationOutsideRepo: code and docs cite the design in the
// repository (docs/design.md §N), never a file outside it.
func TestNoCitationOutsideRepo(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Spelled in pieces so that this file does not match itself.
	banned := []string{"shared/" + "DESIGN", "DESIGN" + ".md", "DESIGN" + " §", "../" + "shared"}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") && name != ".ci") {
				return filepath.SkipDir
			}
			return nil
		}
		if info, err := d.Info(); err != nil || !info.Mode().IsRegular() || info.Size() > 1<<20 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.IndexByte(string(b), 0) >= 0 {
			return nil // binary
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, s := range banned {
				if strings.Contains(line, s) {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d cites %q, outside the repository: cite docs/design.md §N", rel, i+1, s)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
