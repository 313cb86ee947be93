package templates

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestRenderGolden(t *testing.T) {
	d := Data{Job: "mlp-pp", Ranks: 4, Port: 29500, Image: "registry.example/trainer:1", GPUs: 1,
		Command: []string{"/app/trainer", "-schedule", "zbv", "-note", "it's quoted"}}
	for _, kind := range Kinds {
		got, err := Render(kind, d)
		if err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", kind+".golden")
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from %s:\n%s", kind, golden, got)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	ok := Data{Job: "j", Ranks: 2, Port: 29500, Image: "img", Command: []string{"t"}}
	tests := []struct {
		kind string
		mod  func(d *Data)
		want string
	}{
		{"pbs", func(d *Data) {}, `template "pbs": want one of k8s, slurm`},
		{"slurm", func(d *Data) { d.Job = "Bad_Name" }, `job name "Bad_Name"`},
		{"slurm", func(d *Data) { d.Ranks = 0 }, "ranks = 0"},
		{"slurm", func(d *Data) { d.Port = 70000 }, "port = 70000"},
		{"slurm", func(d *Data) { d.Command = nil }, "no trainer command"},
		{"k8s", func(d *Data) { d.Image = "" }, "needs a container image"},
	}
	for _, tc := range tests {
		d := ok
		tc.mod(&d)
		_, err := Render(tc.kind, d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: error %v, want %q", tc.kind, d, err, tc.want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	got := shellQuote([]string{"a", "b c", "it's", "", "-x=1"})
	want := `a 'b c' 'it'\''s' '' -x=1`
	if got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}
