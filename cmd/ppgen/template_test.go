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
}
