package main

import (
	"encoding/json"
	"fmt"
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
