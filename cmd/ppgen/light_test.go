package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLight: the command links no tensor library (gorgonia) and nothing of
// runtime/ but the launcher (runtime/launch, for `ppgen launch`, with
// runtime/internal/swapdir) and the checkpoint format (runtime/checkpoint, standard library only, for `ppgen
// checkpoint`): every user's first `go generate` builds this binary. BENCHMARKS.md, "The ppgen
// binary", has the size and cold-build figures this keeps.
func TestLight(t *testing.T) {
	light := map[string]bool{
		"github.com/ppgen/ppgen/runtime/launch":     true,
		"github.com/ppgen/ppgen/runtime/checkpoint": true,
		"github.com/ppgen/ppgen/runtime/dtype":      true, // checkpoint's element types (no imports)
		// the swap directories' names and lock, which the launcher cleans
		// after killed ranks (standard library only)
		"github.com/ppgen/ppgen/runtime/internal/swapdir": true,
	}
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(pkg, "gorgonia.org/"):
			t.Errorf("ppgen links %s (a tensor library); keep runtime/launch free of runtime/transport", pkg)
		case strings.HasPrefix(pkg, "github.com/ppgen/ppgen/runtime/") && !light[pkg]:
			t.Errorf("ppgen links %s; the command needs only runtime/launch, runtime/internal/swapdir, runtime/checkpoint and runtime/dtype from runtime/", pkg)
		}
	}
}
