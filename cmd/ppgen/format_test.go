package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputFormatExtension: every output flag with a format refuses a
// file whose extension contradicts it (exit 2 naming the flag, the file
// and the extension to use, nothing written) and accepts the right
// extension, in any case, and a name without one.
func TestOutputFormatExtension(t *testing.T) {
	dir := t.TempDir()
	const trace = "../../gen/tune/testdata/dualpipev-wide.json"
	sched := []string{"-schedule", "1f1b", "-ranks", "2", "-micro", "2"}
	cmds := []struct {
		name string
		args func(out string) []string
		good []string // accepted names
		bad  string   // a refused name
		want string   // the extension the refusal asks for
	}{
		{"sim -svg", func(o string) []string { return append([]string{"sim", "-svg", o}, sched...) }, []string{"t.svg", "t.SVG", "t"}, "t.png", ".svg"},
		{"sim -compare -svg", func(o string) []string {
			return []string{"sim", "-compare", "1f1b,GPipe", "-ranks", "2", "-micro", "2", "-svg", o}
		}, []string{"c.svg"}, "c.html", ".svg"},
		{"trace -o", func(o string) []string { return append([]string{"trace", "-o", o}, sched...) }, []string{"t.json", "t"}, "t.csv", ".json"},
		{"report -o", func(o string) []string { return append([]string{"report", "-o", o}, sched...) }, []string{"r.html", "r.htm", "r"}, "r.svg", ".html or .htm"},
		{"export -o", func(o string) []string { return append([]string{"export", "-to", "torch-csv", "-o", o}, sched...) }, []string{"e.csv", "e"}, "e.json", ".csv"},
		{"gen -o", func(o string) []string { return append([]string{"gen", "-package", "p", "-o", o}, sched...) }, []string{"g_gen.go", "g"}, "g.txt", ".go"},
		{"import -o", func(o string) []string {
			return []string{"import", "-from", "torch-csv-legacy", "-package", "p", "testdata/torch_legacy_1f1b_p2_m2.csv", "-o", o}
		}, []string{"i_gen.go"}, "i.csv", ".go"},
		{"tune -o", func(o string) []string { return []string{"tune", "-trace", trace, "-o", o} }, []string{"m.json", "m"}, "m.yaml", ".json"},
		{"template k8s -o", func(o string) []string {
			return []string{"template", "-kind", "k8s", "-ranks", "2", "-image", "x", "-o", o, "--", "./trainer"}
		}, []string{"j.yaml", "j.yml", "j"}, "j.sh", ".yaml or .yml"},
		{"template slurm -o", func(o string) []string {
			return []string{"template", "-kind", "slurm", "-ranks", "2", "-o", o, "--", "./trainer"}
		}, []string{"s.sh", "s.sbatch", "s.slurm", "s"}, "s.yaml", ".sh or .sbatch or .slurm"},
	}
	for _, c := range cmds {
		t.Run(c.name, func(t *testing.T) {
			for _, name := range c.good {
				out := filepath.Join(dir, name)
				code, _, stderr := cliRun(t, c.args(out)...)
				if code != 0 {
					t.Errorf("%s %s: exit %d: %s", c.name, name, code, stderr)
				} else if _, err := os.Stat(out); err != nil {
					t.Errorf("%s %s: nothing written: %v", c.name, name, err)
				}
			}
			out := filepath.Join(dir, c.bad)
			code, _, stderr := cliRun(t, c.args(out)...)
			flag := strings.Fields(c.name)[len(strings.Fields(c.name))-1]
			ext := filepath.Ext(c.bad)
			if code != 2 || !strings.Contains(stderr, flag+" "+out+":") || !strings.Contains(stderr, "extension is "+c.want+", not "+ext) ||
				!strings.Contains(stderr, "name the file "+strings.TrimSuffix(out, ext)) {
				t.Errorf("%s %s: exit %d, stderr %q; want exit 2 naming %s, the file and %s", c.name, c.bad, code, stderr, flag, c.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s %s: written although refused", c.name, c.bad)
			}
		})
	}
}
