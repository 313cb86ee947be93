package main

import (
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
		"gen/vet/testdata/src/deletedrecv/schedule_gen.go:45:2: rank 0 step 5: x.SendF(0x0000_0001_0001_0001) (0SEND_F1 peer 1, slot 1) is the 2nd act send from rank 0 to rank 1",
		"gen/vet/testdata/src/deletedrecv/schedule_gen.go:89:2: \tthe receive it pairs with: rank 1 step 9",
		"gen/vet/testdata/src/deletedrecv/schedule_gen.go:85:2: edited generated code: rank 1 step 5",
		"gen/vet/testdata/src/missingrank/schedule_gen.go:28:13: rank table has no entry for rank 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("go vet output lacks %q:\n%s", want, out)
		}
	}
}
