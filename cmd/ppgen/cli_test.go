package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// mkdirTemp returns a new directory named name under a test's temporary
// directory (ppgen never creates the directory of an output file).
func mkdirTemp(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// flagLine is a flag's line in the help: "  -name" and its placeholder.
var flagLine = regexp.MustCompile(`^  -([^ ]+)(?: (.*))?$`)

// TestHelp: -h (and -help, and ppgen help NAME) of every command prints its
// usage line, a paragraph and its flags to stdout and exits 0; no flag's
// placeholder is a word taken from back quotes in its usage ("-schedule
// ppgen list"), and nothing says "flag: help requested".
func TestHelp(t *testing.T) {
	placeholders := map[string]bool{"": true, "string": true, "int": true, "uint": true, "float": true, "duration": true, "value": true, "int64": true, "uint64": true}
	for _, c := range commands() {
		if _, ok := helps[c.name]; !ok {
			t.Errorf("command %s has no help text in helps", c.name)
		}
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "-help"}, {"help", c.name}} {
			code, stdout, stderr := cliRun(t, args...)
			if code != 0 || stderr != "" {
				t.Errorf("ppgen %s: exit %d, stderr %q; want exit 0 and nothing on stderr", strings.Join(args, " "), code, stderr)
			}
			if !strings.HasPrefix(stdout, "usage: ppgen "+c.name) {
				t.Errorf("ppgen %s: stdout does not start with %q:\n%s", strings.Join(args, " "), "usage: ppgen "+c.name, stdout)
			}
			paragraphs := strings.Split(stdout, "\n\n")
			if len(paragraphs) < 2 || len(strings.TrimSpace(paragraphs[1])) < 40 {
				t.Errorf("ppgen %s: no description paragraph after the usage line:\n%s", strings.Join(args, " "), stdout)
			}
			if strings.Contains(stdout, "help requested") {
				t.Errorf("ppgen %s prints %q", strings.Join(args, " "), "help requested")
			}
			for _, line := range strings.Split(stdout, "\n") {
				if m := flagLine.FindStringSubmatch(line); m != nil && !placeholders[m[2]] {
					t.Errorf("ppgen %s: flag -%s has the placeholder %q (a back-quoted word of its usage?)", strings.Join(args, " "), m[1], m[2])
				}
				if len([]rune(line)) > 80 && !strings.HasPrefix(line, "    \t") && !strings.HasPrefix(line, "usage: ") {
					t.Errorf("ppgen %s: description line over 80 columns: %q", strings.Join(args, " "), line)
				}
			}
		}
	}
	// A command that takes flags lists them; sim's -cost is one.
	if _, stdout, _ := cliRun(t, "sim", "-h"); !strings.Contains(stdout, "\nflags:\n") || !strings.Contains(stdout, "\n  -cost string\n") {
		t.Errorf("ppgen sim -h lists no -cost flag:\n%s", stdout)
	}
	// ppgen -h lists every command.
	code, stdout, _ := cliRun(t, "-h")
	if code != 0 {
		t.Errorf("ppgen -h: exit %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(stdout, "\n  "+c.name+" ") {
			t.Errorf("ppgen -h does not list %s:\n%s", c.name, stdout)
		}
	}
	if code, _, stderr := cliRun(t); code != 2 || !strings.HasPrefix(stderr, "usage: ppgen") {
		t.Errorf("ppgen without a command: exit %d, stderr %q; want 2 and the usage", code, stderr)
	}
}

func TestVersionLine(t *testing.T) {
	main := debug.Module{Path: "github.com/ppgen/ppgen", Version: "v1.2.3"}
	tests := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.0", Main: main},
			"ppgen github.com/ppgen/ppgen v1.2.3 go1.26.0"},
		{"checkout", debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/ppgen/ppgen", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "0123abcd"}}},
			"ppgen github.com/ppgen/ppgen (devel) (revision 0123abcd, modified) go1.26.1"},
		{"clean tree", debug.BuildInfo{GoVersion: "go1.26.1", Main: main,
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "false"}}},
			"ppgen github.com/ppgen/ppgen v1.2.3 (revision 0123abcd) go1.26.1"},
		{"no version", debug.BuildInfo{GoVersion: "go1.26.1", Path: "github.com/ppgen/ppgen/cmd/ppgen"},
			"ppgen github.com/ppgen/ppgen/cmd/ppgen (devel) go1.26.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionLine(&tc.bi); got != tc.want {
				t.Errorf("versionLine = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestVersion: ppgen version and ppgen -version print the module path and
// the Go version this binary was built with.
func TestVersion(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build information in the test binary")
	}
	for _, args := range [][]string{{"version"}, {"-version"}} {
		code, stdout, stderr := cliRun(t, args...)
		if code != 0 || stderr != "" {
			t.Errorf("ppgen %s: exit %d, stderr %q", args[0], code, stderr)
		}
		if !strings.HasPrefix(stdout, "ppgen github.com/ppgen/ppgen ") || !strings.HasSuffix(stdout, " "+bi.GoVersion+"\n") {
			t.Errorf("ppgen %s = %q; want ppgen github.com/ppgen/ppgen VERSION ... %s", args[0], stdout, bi.GoVersion)
		}
	}
	if code, _, stderr := cliRun(t, "version", "extra"); code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Errorf("ppgen version extra: exit %d, stderr %q; want 2", code, stderr)
	}
}

// TestVetNothingToCheck: vet, like check and diff, exits 2 when the
// patterns hold no generated file, naming them.
func TestVetNothingToCheck(t *testing.T) {
	for _, cmd := range []string{"vet", "check", "diff"} {
		code, stdout, stderr := cliRun(t, cmd, "../../gen/ir")
		if code != 2 || stdout != "" || !strings.Contains(stderr, "no ppgen-generated files") || !strings.Contains(stderr, "../../gen/ir") {
			t.Errorf("ppgen %s ../../gen/ir: exit %d, stdout %q, stderr %q; want exit 2 naming the pattern", cmd, code, stdout, stderr)
		}
	}
}

// TestOutputDirectoryMustExist: no command that writes a file creates its
// directory; the error names the directory and nothing is left behind,
// neither the file nor a temporary one.
func TestOutputDirectoryMustExist(t *testing.T) {
	sched := []string{"-schedule", "1f1b", "-ranks", "2", "-micro", "2"}
	csv := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(csv, []byte("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args func(out string) []string
	}{
		{"gen", func(o string) []string { return append([]string{"gen", "-o", o}, sched...) }},
		{"trace", func(o string) []string { return append([]string{"trace", "-o", o}, sched...) }},
		{"report", func(o string) []string { return append([]string{"report", "-o", o}, sched...) }},
		{"export", func(o string) []string { return append([]string{"export", "-to", "torch-csv", "-o", o}, sched...) }},
		{"sim -svg", func(o string) []string { return append([]string{"sim", "-svg", o}, sched...) }},
		{"sim -compare -svg", func(o string) []string {
			return []string{"sim", "-compare", "1f1b,gpipe", "-ranks", "2", "-micro", "2", "-svg", o}
		}},
		{"import", func(o string) []string { return []string{"import", "-from", "torch-csv", csv, "-o", o} }},
		{"template", func(o string) []string {
			return []string{"template", "-kind", "slurm", "-ranks", "2", "-o", o, "--", "./trainer"}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			missing := filepath.Join(root, "missing")
			out := filepath.Join(missing, "out")
			code, _, stderr := cliRun(t, tc.args(out)...)
			want := "directory " + missing + " does not exist; create it first"
			if code != 2 || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
			}
			if _, err := os.Stat(missing); err == nil {
				t.Errorf("%s was created", missing)
			}
			// The same command into a directory that exists writes the
			// file and nothing else.
			if err := os.Mkdir(missing, 0o755); err != nil {
				t.Fatal(err)
			}
			if code, _, stderr := cliRun(t, tc.args(out)...); code != 0 {
				t.Fatalf("into an existing directory: exit %d: %s", code, stderr)
			}
			entries, err := os.ReadDir(missing)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != "out" {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("the directory holds %v; want [out] (no temporary file left)", names)
			}
		})
	}
}
