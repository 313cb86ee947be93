package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestPartitionCommand: ppgen partition prints the stages and the makespan
// against the even split; -virtual V > 1 without -schedule splits for
// interleaved (1f1b takes only V = 1); a memory limit no split fits exits 2
// naming the least it found; -partition auto changes what sim simulates.
func TestPartitionCommand(t *testing.T) {
	const llm = "../../examples/models/llm.json"
	code, stdout, stderr := cliRun(t, "partition", "-model", llm, "-ranks", "2")
	if code != 0 || !strings.Contains(stdout, "1f1b P=2 V=1 M=4: 34 layers") || !strings.Contains(stdout, "embed..") || !strings.Contains(stdout, "..head") || !strings.Contains(stdout, "% faster") {
		t.Errorf("exit %d, stdout:\n%s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = cliRun(t, "partition", "-model", llm, "-ranks", "4", "-virtual", "2")
	if code != 0 || !strings.Contains(stdout, "interleaved P=4 V=2 M=8: 34 layers of") || !strings.Contains(stdout, "% faster") {
		t.Errorf("-virtual 2: exit %d, stdout:\n%s\nstderr %s", code, stdout, stderr)
	}
	code, _, stderr = cliRun(t, "partition", "-model", llm, "-ranks", "4", "-mem", "5")
	if code != 2 || !strings.Contains(stderr, "raise -mem to at least") {
		t.Errorf("-mem 5: exit %d, stderr %s", code, stderr)
	}
	_, even, _ := cliRun(t, "sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", llm, "-json")
	_, part, _ := cliRun(t, "sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", llm, "-partition", "auto", "-json")
	var e, p struct {
		Makespan   float64 `json:"makespan"`
		LowerBound float64 `json:"lower_bound"`
	}
	if err := json.Unmarshal([]byte(even), &e); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(part), &p); err != nil {
		t.Fatal(err)
	}
	if !(p.Makespan < e.Makespan) || p.LowerBound <= 0 || p.LowerBound > p.Makespan || e.LowerBound > e.Makespan {
		t.Errorf("sim -json even:\n%s\npartition auto:\n%s", even, part)
	}
}

// TestPartitionRejectsPartitionFlag: partition always searches the split,
// so its -partition (a shared schedule flag, for sim, trace and report) is
// refused whatever its value rather than ignored.
func TestPartitionRejectsPartitionFlag(t *testing.T) {
	const llm = "../../examples/models/llm.json"
	for _, value := range []string{"bogus", "even", "auto", ""} {
		code, stdout, stderr := cliRun(t, "partition", "-model", llm, "-ranks", "2", "-partition", value)
		want := fmt.Sprintf("ppgen partition: -partition %q: ppgen partition always searches the split", value)
		if code != 2 || stdout != "" || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("-partition %q: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", value, code, stdout, stderr, want)
		}
	}
}

// TestPartitionAutoRecomputeCommands: sim -schedule 1f1b -partition auto
// -mem at a limit only a recompute policy meets says in one line which
// policy it chose (the line ppgen partition prints) and simulates it; gen
// notes it on stderr, and ppgen check finds the file up to date;
// -recompute none keeps the refusal.
func TestPartitionAutoRecomputeCommands(t *testing.T) {
	const llm = "../../examples/models/llm.json"
	flags := []string{"-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", llm, "-partition", "auto", "-mem", "12"}
	_, want, _ := cliRun(t, "partition", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", llm, "-mem", "12")
	line := want[strings.LastIndex(strings.TrimSuffix(want, "\n"), "\n")+1:]
	if !strings.HasPrefix(line, "recompute ") {
		t.Fatalf("ppgen partition -mem 12 chose no policy:\n%s", want)
	}
	code, stdout, stderr := cliRun(t, append([]string{"sim"}, flags...)...)
	if code != 0 || !strings.HasPrefix(stdout, line) || strings.Count(stdout, "chosen under") != 1 {
		t.Errorf("sim: exit %d, want the line %q first:\n%s\nstderr %s", code, line, stdout, stderr)
	}
	path := filepath.Join(t.TempDir(), "s_gen.go")
	code, _, stderr = cliRun(t, append([]string{"gen", "-package", "s", "-o", path}, flags...)...)
	if code != 0 || !strings.Contains(stderr, "ppgen: "+line) {
		t.Fatalf("gen: exit %d, want the line %q on stderr: %s", code, line, stderr)
	}
	if code, _, stderr = cliRun(t, "check", path); code != 0 {
		t.Errorf("check: exit %d: %s", code, stderr)
	}
	code, _, stderr = cliRun(t, append([]string{"sim", "-recompute", "none"}, flags...)...)
	if code != 2 || !strings.Contains(stderr, "no split fits") {
		t.Errorf("sim -recompute none: exit %d, stderr %s", code, stderr)
	}
}
