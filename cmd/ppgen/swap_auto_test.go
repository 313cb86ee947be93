package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSwapAuto: -schedule auto -mem 2 -swap auto at P = 4, M = 8 with swap
// transfers of 0.5 chooses dualpipev V=2 swapping at distance 4 (22.5;
// recompute's best, 28, is slower). gen names the choice on stderr and
// records -swap auto in the header; check regenerates the same file from
// it; verify, the table and sim -json report the distance. With
// -recompute none auto tries swap alone. -swap auto without -schedule
// auto, without -mem or with a -recompute policy is refused, naming the
// fix.
func TestSwapAuto(t *testing.T) {
	flags := []string{"-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "2", "-swap", "auto", "-cost", "swap=0.5"}
	var stdout, stderr bytes.Buffer
	path := filepath.Join(t.TempDir(), "sched_gen.go")
	if code := run(append([]string{"gen", "-package", "p", "-o", path}, flags...), &stdout, &stderr); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr.String())
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "auto: dualpipev V=2 -swap 4: makespan 22.5, activation memory 2,") ||
		!strings.Contains(string(src), " -swap auto\n") || !strings.Contains(string(src), "SwapLaunchOffload(") {
		t.Errorf("gen: stderr %s\nheader:\n%s", stderr.String(), string(src)[:min(len(src), 400)])
	}
	stderr.Reset()
	if code := run([]string{"check", path}, &stdout, &stderr); code != 0 {
		t.Errorf("check of the -swap auto file: exit %d: %s", code, stderr.String())
	}
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"verify", []string{"ok (auto chose dualpipev V=2 -swap 4)"}},
		{"sim", []string{"\n* dualpipev (swap 4) ", "recompute selective:", "auto: dualpipev V=2 -swap 4:"}},
	} {
		stdout.Reset()
		if code := run(append([]string{tc.cmd}, flags...), &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.cmd, code, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%s: no %q in\n%s", tc.cmd, w, stdout.String())
			}
		}
	}
	stdout.Reset()
	if code := run(append([]string{"sim", "-json"}, flags...), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), `"swap": 4,`) {
		t.Errorf("sim -json: exit %d: %s", code, stdout.String())
	}
	// -recompute none leaves swap alone: within 1 no family fits, and
	// swap does.
	stdout.Reset()
	if code := run([]string{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "1", "-swap", "auto", "-recompute", "none", "-cost", "swap=0.1"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "auto: interleaved V=4 -swap 6:") || strings.Contains(stdout.String(), "(recompute ") {
		t.Errorf("-recompute none -swap auto: exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "-schedule", "gpipe", "-ranks", "4", "-micro", "8", "-swap", "auto"}, "use -schedule auto -mem X -swap auto"},
		{[]string{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-swap", "auto"}, "-swap auto needs -mem X"},
		{[]string{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "2", "-swap", "auto", "-recompute", "full"}, "drop -recompute"},
		{[]string{"sim", "-schedule", "gpipe", "-ranks", "4", "-micro", "8", "-swap", "often"}, "or auto"},
	} {
		stderr.Reset()
		if code := run(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, want 2 and %q: %s", tc.args, code, tc.want, stderr.String())
		}
	}
}
