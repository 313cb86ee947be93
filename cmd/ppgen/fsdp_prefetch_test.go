package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFSDPPrefetchFlag: -fsdp-prefetch is taken wherever -fsdp is, moves
// the UNSHARD steps, is recorded in a generated file's header so that
// check regenerates the same file, and is refused without -fsdp or below 0.
func TestFSDPPrefetchFlag(t *testing.T) {
	sched := []string{"-schedule", "interleaved", "-ranks", "2", "-virtual", "2", "-micro", "4", "-fsdp", "2"}
	with := func(cmd string, extra ...string) []string {
		return append(append([]string{cmd}, sched...), extra...)
	}
	plain := cliMust(t, with("show")...)
	ahead := cliMust(t, with("show", "-fsdp-prefetch", "1")...)
	// 2UNSHARD is issued before 0F1, one compute step ahead of 2F0.
	if strings.Contains(plain, "0SEND_F0 2UNSHARD 0F1") || !strings.Contains(ahead, "0SEND_F0 2UNSHARD 0F1") {
		t.Errorf("show -fsdp-prefetch 1 does not move 2UNSHARD ahead of 0F1:\n%s\nwithout:\n%s", ahead, plain)
	}
	for _, cmd := range [][]string{
		with("verify", "-fsdp-prefetch", "2"),
		with("sim", "-fsdp-prefetch", "2", "-cost", "unshard=0.5"),
		with("trace", "-fsdp-prefetch", "2", "-cost", "unshard=0.5"),
		with("export", "-to", "torch-csv", "-fsdp-prefetch", "2"),
	} {
		out := cliMust(t, cmd...)
		if cmd[0] == "verify" && !strings.Contains(out, "peak unsharded stages per rank [2 2]") {
			t.Errorf("verify: %s", out)
		}
		if cmd[0] == "trace" && !strings.Contains(out, `"thread_name","ph":"M","pid":0,"tid":3,"args":{"name":"fsdp"}`) {
			t.Errorf("trace has no fsdp thread:\n%s", cliClip([]byte(out)))
		}
	}
	ms := func(out string) string {
		_, rest, _ := strings.Cut(out, "makespan ")
		v, _, _ := strings.Cut(rest, " ")
		return v
	}
	if a, b := ms(cliMust(t, with("sim", "-cost", "unshard=0.5")...)), ms(cliMust(t, with("sim", "-cost", "unshard=0.5", "-fsdp-prefetch", "1")...)); a != "28" || b != "27.5" {
		t.Errorf("sim -cost unshard=0.5: makespan %s without prefetch, %s with -fsdp-prefetch 1; want 28 and 27.5", a, b)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "schedule_gen.go")
	src := dcGenerate(t, path, append(sched[:len(sched):len(sched)], "-fsdp-prefetch", "1")...)
	if !strings.Contains(string(src), "// ppgen gen -fsdp 2 -fsdp-prefetch 1 -micro 4 -ranks 2 -schedule interleaved -virtual 2\n") {
		t.Errorf("header does not record -fsdp-prefetch:\n%s", cliClip(src))
	}
	if code, out, errs := dcRun("check", path); code != 0 {
		t.Errorf("check: exit %d\n%s%s", code, out, errs)
	}
	other := filepath.Join(dir, "plain_gen.go")
	if plainSrc := dcGenerate(t, other, sched...); string(plainSrc) == strings.Replace(string(src), " -fsdp-prefetch 1", "", 1) {
		t.Error("gen -fsdp-prefetch 1 emits the same code as without it")
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-fsdp-prefetch", "1"}, "-fsdp-prefetch 1 needs -fsdp N"},
		{with("sim", "-fsdp-prefetch", "-1"), "-fsdp-prefetch = -1"},
		{with("gen", "-fsdp-prefetch", "-1", "-o", "-", "-package", "p"), "-fsdp-prefetch = -1"},
	} {
		code, _, errs := cliRun(t, bad.args...)
		if code != 2 || !strings.Contains(errs, bad.want) {
			t.Errorf("ppgen %v: exit %d, stderr %q; want 2 and %q", bad.args, code, errs, bad.want)
		}
	}
}
