package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildTool builds ppgenvet into a temporary directory.
func buildTool(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds ppgenvet and runs go vet")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not found")
	}
	bin := filepath.Join(t.TempDir(), "ppgenvet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// goVet runs `go vet -vettool=bin pkgs` at the module root.
func goVet(t *testing.T, bin string, pkgs ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"vet", "-vettool=" + bin}, pkgs...)...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestGoVetCatalog(t *testing.T) {
	bin := buildTool(t)
	if out, err := goVet(t, bin, "./generated/...", "./examples/..."); err != nil {
		t.Fatalf("go vet -vettool=ppgenvet ./generated/... ./examples/...: %v\n%s", err, out)
	}
}

func TestGoVetBroken(t *testing.T) {
	bin := buildTool(t)
	out, err := goVet(t, bin, "./gen/vet/testdata/src/deletedrecv", "./gen/vet/testdata/src/missingrank")
	if err == nil {
		t.Fatalf("go vet passed broken generated files:\n%s", out)
	}
	for _, want := range []string{
		"gen/vet/testdata/src/deletedrecv/schedule_gen.go:45:2: rank 0 step 5: x.SendAct(0, 1, 1, 1) is the 2nd act send from rank 0 to rank 1",
		"gen/vet/testdata/src/deletedrecv/schedule_gen.go:89:2: \tthe receive it pairs with: rank 1 step 9",
		"gen/vet/testdata/src/deletedrecv/schedule_gen.go:85:2: edited generated code: rank 1 step 5",
		"gen/vet/testdata/src/missingrank/schedule_gen.go:28:13: rank table has no entry for rank 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("go vet output lacks %q:\n%s", want, out)
		}
	}
}

// TestProtocol covers what go vet asks a vet tool besides the .cfg run.
func TestProtocol(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"-V=full"}, &out, &errs); code != 0 || !strings.Contains(out.String(), " version devel ") || !strings.Contains(out.String(), " buildID=") {
		t.Errorf("-V=full: exit %d, %q %q", code, out.String(), errs.String())
	}
	out.Reset()
	if code := run([]string{"-flags"}, &out, &errs); code != 0 || !strings.HasPrefix(out.String(), "[") {
		t.Errorf("-flags: exit %d, %q", code, out.String())
	}
	errs.Reset()
	if code := run([]string{"./..."}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "usage: go vet -vettool=") {
		t.Errorf("run without a .cfg: exit %d, %q", code, errs.String())
	}
	// A .cfg for one broken package, in text and JSON form.
	dir := t.TempDir()
	abs, err := filepath.Abs("../../gen/vet/testdata/src/swappedsends/schedule_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "vet.cfg")
	vetx := filepath.Join(dir, "vet.out")
	stdout := filepath.Join(dir, "vet.stdout")
	if err := os.WriteFile(cfg, []byte(`{"ID": "swappedsends", "ImportPath": "swappedsends", "GoFiles": ["`+abs+`"], "VetxOutput": "`+vetx+`", "Stdout": "`+stdout+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	errs.Reset()
	if code := run([]string{cfg}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "schedule_gen.go:43:2: rank 0 step 3:") {
		t.Errorf("text mode: exit %d\n%s", code, errs.String())
	}
	if _, err := os.Stat(vetx); err != nil {
		t.Errorf("no facts file written: %v", err)
	}
	if code := run([]string{"-json", cfg}, &out, &errs); code != 0 {
		t.Errorf("json mode: exit %d", code)
	}
	js, err := os.ReadFile(stdout)
	if err != nil || !strings.Contains(string(js), `"swappedsends": {`) || !strings.Contains(string(js), `"ppgen": [`) || !strings.Contains(string(js), `schedule_gen.go:43:2"`) {
		t.Errorf("json mode wrote %q (%v)", js, err)
	}
}
