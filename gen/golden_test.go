package gen_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/gencmd"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*/schedule_gen.go.golden from the current output")

// goldenDir holds one directory per case: config.txt says what `ppgen gen`
// is given, schedule_gen.go.golden is what it must write, byte for byte.
const goldenDir = "testdata/golden"

// goldenCase is one parsed config.txt.
type goldenCase struct {
	name string
	dir  string
	args []string // the arguments of `ppgen gen`
	pkg  string   // $GOPACKAGE
}

// readGoldenCase reads dir/config.txt: "args: ..." (the ppgen gen
// arguments, as on a //go:generate line) and "package: name" ($GOPACKAGE);
// blank lines and '#' comments are skipped. Paths in args (-in) are relative
// to the case directory.
func readGoldenCase(dir string) (goldenCase, error) {
	c := goldenCase{name: filepath.Base(dir), dir: dir}
	f, err := os.Open(filepath.Join(dir, "config.txt"))
	if err != nil {
		return c, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		val = strings.TrimSpace(val)
		switch {
		case !ok:
			return c, fmt.Errorf("%s/config.txt:%d: want key: value", dir, n)
		case key == "args":
			if c.args, err = emit.SplitArgs(val); err != nil {
				return c, fmt.Errorf("%s/config.txt:%d: %v", dir, n, err)
			}
		case key == "package":
			c.pkg = val
		default:
			return c, fmt.Errorf("%s/config.txt:%d: unknown key %q (want args or package)", dir, n, key)
		}
	}
	if c.args == nil || c.pkg == "" {
		return c, fmt.Errorf("%s/config.txt: needs args: and package:", dir)
	}
	return c, sc.Err()
}

func (c goldenCase) goldenPath() string { return filepath.Join(c.dir, "schedule_gen.go.golden") }

// generate runs `ppgen gen` on the case in memory, as go generate would in
// the case directory.
func (c goldenCase) generate() ([]byte, error) {
	req, err := gencmd.Parse(c.args, gencmd.Env{Dir: c.dir, File: "schedule.go", Package: c.pkg})
	if err != nil {
		return nil, err
	}
	src, _, err := req.Generate()
	return src, err
}

func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(goldenDir, "*", "config.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatalf("no cases in %s", goldenDir)
	}
	var cases []goldenCase
	for _, d := range dirs {
		c, err := readGoldenCase(filepath.Dir(d))
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, c)
	}
	return cases
}

// TestGolden generates every case and compares it with its golden file;
// -update rewrites the goldens instead.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases(t) {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.generate()
			if err != nil {
				t.Fatalf("ppgen gen %s: %v", strings.Join(c.args, " "), err)
			}
			if *update {
				if err := os.WriteFile(c.goldenPath(), got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(c.goldenPath())
			if err != nil {
				t.Fatalf("%v (run `go test ./gen -run TestGolden -update` to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("ppgen gen %s differs from %s (- golden, + generated; if the change is intended, rerun with -update and review the diff):\n%s",
					strings.Join(c.args, " "), c.goldenPath(), lineDiff(string(want), string(got)))
			}
		})
	}
}

// TestGoldenHeaders: each golden records the invocation that regenerates it
// (what ppgen diff, check and vet rely on).
func TestGoldenHeaders(t *testing.T) {
	for _, c := range goldenCases(t) {
		src, err := os.ReadFile(c.goldenPath())
		if err != nil {
			t.Fatal(err)
		}
		req, err := gencmd.FromHeader(filepath.Join(c.dir, "schedule_gen.go"), src)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		again, _, err := req.Generate()
		if err != nil {
			t.Fatalf("%s: regenerating from the header: %v", c.name, err)
		}
		if !bytes.Equal(again, src) {
			t.Errorf("%s: regenerating from the header (%s) gives another file:\n%s", c.name, req.Invocation, lineDiff(string(src), string(again)))
		}
	}
}

// goCommand returns the path of the go command, skipping the test when it
// is missing or in -short mode.
func goCommand(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped in -short mode: runs the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	return gobin
}

// overlay writes an overlay file for `go build -overlay` that maps each
// path (absolute, in this module) to the given contents.
func overlay(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	replace := map[string]string{}
	i := 0
	for path, data := range files {
		f := filepath.Join(dir, fmt.Sprintf("%d_%s", i, filepath.Base(path)))
		i++
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
		replace[path] = f
	}
	js, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGoldensCompile builds and vets every golden as a package against this
// module's runtime/pipe. Each golden is laid over its case directory as
// schedule_gen.go with `go build -overlay`, so nothing is written into the
// tree.
func TestGoldensCompile(t *testing.T) {
	gobin := goCommand(t)
	files := map[string][]byte{}
	var pkgs []string
	for _, c := range goldenCases(t) {
		src, err := os.ReadFile(c.goldenPath())
		if err != nil {
			t.Fatal(err)
		}
		abs, err := filepath.Abs(filepath.Join(c.dir, "schedule_gen.go"))
		if err != nil {
			t.Fatal(err)
		}
		files[abs] = src
		pkgs = append(pkgs, "./"+filepath.ToSlash(c.dir))
	}
	ov := overlay(t, files)
	for _, verb := range []string{"build", "vet"} {
		cmd := exec.Command(gobin, append([]string{verb, "-overlay", ov}, pkgs...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go %s of the goldens: %v\n%s", verb, err, out)
		}
	}
}

// TestGuardBreaksBuild proves the compile-time guard: generated code builds
// against runtime/pipe as it is, and fails to build, with an error at the
// guard line, against a runtime/pipe without the guard constant (abi.VersionGuard: an
// API that dropped the version the code was generated for) and when the
// code asks for a version the runtime does not have yet. The variants are
// `go build -overlay` layers; nothing is written into the tree.
func TestGuardBreaksBuild(t *testing.T) {
	gobin := goCommand(t)
	c, err := readGoldenCase(filepath.Join(goldenDir, "1f1b-p4-m8-table"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(c.goldenPath())
	if err != nil {
		t.Fatal(err)
	}
	guard := "const _ = pipe." + abi.VersionGuard
	next := fmt.Sprintf("SupportPackageIsVersion%d", abi.Version+1)
	guardLine := 1 + bytes.Count(src[:bytes.Index(src, []byte(guard))], []byte("\n"))

	// Find the runtime/pipe file that declares the version constant.
	pipeDir, err := filepath.Abs("../runtime/pipe")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(pipeDir)
	if err != nil {
		t.Fatal(err)
	}
	decl := "const " + abi.VersionGuard + " = true"
	var declFile string
	var declSrc []byte
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(pipeDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(decl)) {
			declFile, declSrc = filepath.Join(pipeDir, e.Name()), data
		}
	}
	if declFile == "" {
		t.Fatalf("no file of runtime/pipe declares %q", decl)
	}
	genPath, err := filepath.Abs(filepath.Join(c.dir, "schedule_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		files   map[string][]byte
		wantErr string // "" means the build must succeed
	}{
		{"matching runtime", map[string][]byte{genPath: src}, ""},
		{"runtime dropped the version", map[string][]byte{
			genPath:  src,
			declFile: bytes.Replace(declSrc, []byte(decl), []byte("// (this version dropped)"), 1),
		}, fmt.Sprintf(":%d:16: undefined: pipe.%s", guardLine, abi.VersionGuard)},
		{"code newer than the runtime", map[string][]byte{
			genPath: bytes.Replace(src, []byte(guard), []byte("const _ = pipe."+next), 1),
		}, fmt.Sprintf(":%d:16: undefined: pipe.%s", guardLine, next)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(gobin, "build", "-overlay", overlay(t, tt.files), "./"+filepath.ToSlash(c.dir))
			out, err := cmd.CombinedOutput()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("go build failed against the matching runtime: %v\n%s", err, out)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("go build succeeded; the guard should have broken it")
			case tt.wantErr != "" && !strings.Contains(string(out), tt.wantErr):
				t.Fatalf("go build failed, but not at the guard (want %q):\n%s", tt.wantErr, out)
			}
		})
	}
}

// lineDiff returns the differing lines of a and b with their line numbers
// ("-" only in a, "+" only in b) around the first difference, enough to
// see what changed in a golden.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	i := 0
	for i < len(x) && i < len(y) && x[i] == y[i] {
		i++
	}
	ex, ey := len(x), len(y)
	for ex > i && ey > i && x[ex-1] == y[ey-1] {
		ex, ey = ex-1, ey-1
	}
	var out strings.Builder
	const ctx, most = 2, 40
	for k := max(0, i-ctx); k < i; k++ {
		fmt.Fprintf(&out, "  %4d %s\n", k+1, x[k])
	}
	for k := i; k < ex && k < i+most; k++ {
		fmt.Fprintf(&out, "- %4d %s\n", k+1, x[k])
	}
	if ex-i > most {
		fmt.Fprintf(&out, "  ... %d more lines only in the golden\n", ex-i-most)
	}
	for k := i; k < ey && k < i+most; k++ {
		fmt.Fprintf(&out, "+ %4d %s\n", k+1, y[k])
	}
	if ey-i > most {
		fmt.Fprintf(&out, "  ... %d more lines only in the output\n", ey-i-most)
	}
	for k := ex; k < len(x) && k < ex+ctx; k++ {
		fmt.Fprintf(&out, "  %4d %s\n", k+1, x[k])
	}
	return out.String()
}
