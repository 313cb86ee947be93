package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagsThatDoNotApply: a flag the command would ignore where it is
// given is refused (exit 2) with a reason naming it; where it applies it
// is accepted.
func TestFlagsThatDoNotApply(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "s.csv")
	if err := os.WriteFile(csv, []byte("0F0,0B0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sched := []string{"-schedule", "1f1b", "-ranks", "2", "-micro", "2"}
	with := func(cmd string, args ...string) []string { return append(append([]string{cmd}, sched...), args...) }
	for _, tc := range []struct {
		args []string
		want string // "" : accepted
	}{
		{[]string{"template", "-kind", "slurm", "-ranks", "2", "-mpi", "pmi2", "--", "python", "t.py"}, "-mpi does not apply to -kind slurm"},
		{[]string{"template", "-kind", "slurm", "-ranks", "2", "-image", "x", "--", "python", "t.py"}, "-image does not apply to -kind slurm"},
		{[]string{"template", "-kind", "slurm-mpi", "-ranks", "2", "-port", "1234", "--", "python", "t.py"}, "-port does not apply to -kind slurm-mpi"},
		{[]string{"template", "-kind", "k8s", "-ranks", "2", "-mpi", "pmix", "--", "python", "t.py"}, "-mpi does not apply to -kind k8s"},
		{[]string{"template", "-kind", "slurm-mpi", "-ranks", "2", "-mpi", "pmi2", "--", "python", "t.py"}, ""},
		{[]string{"template", "-kind", "slurm", "-ranks", "2", "-port", "1234", "--", "python", "t.py"}, ""},
		{[]string{"template", "-kind", "k8s", "-ranks", "2", "-image", "x", "-port", "1234", "--", "python", "t.py"}, ""},
		{[]string{"import", "-from", "torch-csv", csv, "-package", "p"}, "-package shapes the Go source"},
		{[]string{"import", "-from", "torch-csv", "-name", "n", csv}, "-name shapes the Go source"},
		{[]string{"import", "-from", "torch-csv", "-table", csv}, "-table shapes the Go source"},
		{[]string{"import", "-from", "torch-csv", csv, "-helper", "3"}, "-helper shapes the Go source"},
		{[]string{"import", "-from", "torch-csv", csv, "-helper", "3", "-package", "p", "-o", "-"}, ""},
		{[]string{"import", "-from", "torch-csv", csv, "-max-activations", "-1"}, "-max-activations -1; want 0 (no limit) or a positive"},
		{with("sim", "-width", "50"), "-width 50 applies to the -grid timeline only"},
		{with("sim", "-grid", "-json"), "-grid does not apply with -json"},
		{with("sim", "-svg-width", "800"), "-svg-width 800 applies to the -svg timeline only"},
		{with("sim", "-grid", "-width", "50"), ""},
		{with("verify", "-max-activations", "-1"), "-max-activations -1; want 0 (no limit) or a positive"},
		{with("verify", "-max-activations", "0"), ""},
	} {
		code, _, stderr := cliRun(t, tc.args...)
		switch {
		case tc.want == "" && code != 0:
			t.Errorf("ppgen %v: exit %d, %s; want it accepted", tc.args, code, stderr)
		case tc.want != "" && (code != 2 || !strings.Contains(stderr, tc.want)):
			t.Errorf("ppgen %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
