package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestTemplateCommand(t *testing.T) {
	var out, errs bytes.Buffer
	code := run([]string{"template", "-kind", "slurm", "-ranks", "8", "-job", "zbv", "--", "./trainer", "-schedule", "zbv"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"#SBATCH --ntasks=8", "srun --kill-on-bad-exit=1 ./trainer -schedule zbv"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	errs.Reset()
	if code := run([]string{"template", "-kind", "k8s", "-ranks", "2", "--", "t"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "container image") {
		t.Errorf("k8s without image: exit %d, %s", code, errs.String())
	}
	// An -image that YAML would read as more than one string is refused,
	// naming it.
	for _, tc := range []struct{ image, want string }{
		{"img:1\n  securityContext: {privileged: true}", `ppgen template: image "img:1\n  securityContext: {privileged: true}" holds '\n'`},
		{"img #x", `ppgen template: image "img #x" holds ' '`},
	} {
		out.Reset()
		errs.Reset()
		if code := run([]string{"template", "-kind", "k8s", "-ranks", "2", "-image", tc.image, "--", "t"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), tc.want) || out.Len() != 0 {
			t.Errorf("-image %q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.image, code, out.String(), errs.String(), tc.want)
		}
	}
}

// TestTemplateSlurmMPI: -kind slurm-mpi starts the ranks as one MPI job
// (srun --mpi=pmix, or the -mpi plugin), without ppgen's TCP rendezvous.
func TestTemplateSlurmMPI(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "srun --kill-on-bad-exit=1 --mpi=pmix ./mlp -transport mpi -mpi-sync\n"},
		{[]string{"-mpi", "pmi2"}, "srun --kill-on-bad-exit=1 --mpi=pmi2 ./mlp -transport mpi -mpi-sync\n"},
	} {
		var out, errs bytes.Buffer
		args := append(append([]string{"template", "-kind", "slurm-mpi", "-ranks", "4"}, tc.args...), "--", "./mlp", "-transport", "mpi", "-mpi-sync")
		if code := run(args, &out, &errs); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs.String())
		}
		for _, want := range []string{"#SBATCH --ntasks=4\n", tc.want} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out.String())
			}
		}
		if strings.Contains(out.String(), "PPGEN_TOKEN=") || strings.Contains(out.String(), "MASTER_ADDR=") {
			t.Errorf("%v: the MPI script sets up the TCP rendezvous:\n%s", args, out.String())
		}
	}
	var out, errs bytes.Buffer
	if code := run([]string{"template", "-kind", "slurm-mpi", "-ranks", "4", "-mpi", "PMIx!", "--", "t"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), `MPI plugin "PMIx!"`) {
		t.Errorf("bad plugin: exit %d, %s", code, errs.String())
	}
}
