//go:build linux

package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ppgen/ppgen/internal/doctable"
	"github.com/ppgen/ppgen/internal/long"
)

// Bounds every bad input must stay within (docs/trust.md).
const (
	badInputTime   = 10 * time.Second
	badInputMemKiB = 1 << 20 // 1 GiB (Maxrss is in KiB on Linux)
)

// TestBadInputs runs the ppgen binary on bad schedule files and flags, each
// through the commands that read it, and asserts what docs/trust.md
// promises: the expected exit status (2 bad input, 1 unsafe program, 0 for
// inputs ppgen now accepts as documented), a one-line message on stderr
// with no panic, Go runtime error or "please report", nothing written,
// within 10 s and 1 GB.
// With -update it writes the rows into docs/trust.md (region cli). The test
// is Linux-only: the memory bound reads the child's peak RSS.
func TestBadInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the ppgen binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ppgen")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	defer os.Remove(bin)

	// The schedule files, written into dir and named relative to it.
	files := map[string][]byte{
		"micro-2pow32.txt":    []byte("rank 0: 0F4294967296 0B0\n"),
		"micro-1e8.txt":       []byte("rank 0: 0F100000000\n"),
		"micro-20-digits.txt": []byte("rank 0: 0F18446744073709551617 0B0\n"),
		"negative.txt":        []byte("rank 0: 0F-1 0B0\n"),
		"stage-70000.txt":     []byte("rank 0: 70000F0 70000B0\n"),
		"chunks.txt":          []byte("rank 0: 0F0 0B0 300F65000 300B65000\n"),
		"gappy.txt":           []byte("rank 0: 0F0 0B0 0F2 0B2\n"),
		"no-backward.txt":     []byte("rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B1 0B1\nrank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B1 1SEND_B1\n"),
		"no-backward.csv":     []byte("0F0,0F1,0B1\n"),
		"forward-opt.txt":     []byte("rank 0: 0F0 0SEND_F0 OPT_STEP\nrank 1: 1RECV_F0 1F0 OPT_STEP\n"),
		"opt-one-rank.txt":    []byte("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0\n"),
		"truncated.txt":       []byte("rank 0: 0F0 0SEND_F"),
		"garbage.txt":         []byte("hello, world\n"),
		"unknown-kind.txt":    []byte("rank 0: 0F0 0Q0 0B0\n"),
		"micro-2pow32.csv":    []byte("0F4294967296,0B0\n"),
		"torch-form.csv":      []byte("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
		"mismatch.csv":        []byte("0F0,0F1,0SEND_F0,0RECV_B0,0SEND_F1,0RECV_B1,0B0,0B1\n1RECV_F1,1RECV_F0,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n"),
		"quote.csv":           []byte("0F0,\"0B0\n"),
		"long-line.txt":       bytes.Repeat([]byte("x"), 20<<20),
		"many-ranks.txt":      bytes.Repeat([]byte("0F0 0B0\n"), 70000),
		"tie-early.txt":       []byte("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 0TIE_GRAD OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1TIE_GRAD 1SEND_B0 OPT_STEP\n"),
		"model-nan.json":      []byte(`{"layers": [{"F": NaN, "B": 1, "act": 1, "params": 1}]}`),
		"model-typo.json":     []byte(`{"layers": [{"F": 1, "B": 1, "act": 1, "param": 1}]}`),
		"model-1layer.json":   []byte(`{"layers": [{"F": 1, "B": 2, "act": 1, "params": 1}]}`),
		"model-huge.json":     append(append([]byte(`{"layers": [`), bytes.Repeat([]byte(`{"F": 1, "B": 2, "act": 1, "params": 1},`), 400000)...), []byte(`{"F": 1, "B": 2, "act": 1, "params": 1}]}`)...),
	}
	deadlock, err := os.ReadFile(filepath.Join("testdata", "rendezvous_deadlock.csv"))
	if err != nil {
		t.Fatal(err)
	}
	files["deadlock.csv"] = deadlock
	binary := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range binary {
		binary[i] = byte(rng.UintN(256))
	}
	files["binary.bin"] = binary
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Two 100 MB files, streamed to disk: steps without end, and commas.
	for name, unit := range map[string]string{"huge.txt": "0F0 0B0 ", "huge.csv": ","} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		chunk := []byte(strings.Repeat(unit, (1<<20)/len(unit)))
		for range 100 {
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}

	type tcase struct {
		name string
		args []string
		code int
	}
	var cases []tcase
	// in adds a case per command that reads the file with -in.
	in := func(name, file string, code int, cmds ...string) {
		for _, c := range cmds {
			args := []string{c, "-in", file}
			if c == "gen" {
				args = append(args, "-package", "x", "-o", "x_gen.go")
			}
			if c == "report" {
				args = append(args, "-o", "x.html")
			}
			cases = append(cases, tcase{fmt.Sprintf("%s (`%s -in`)", name, c), args, code})
		}
	}
	all := []string{"verify", "show", "sim", "gen"}
	in("text, micro 4294967296", "micro-2pow32.txt", 2, all...)
	in("text, micro 100000000", "micro-1e8.txt", 2, "verify", "sim")
	in("text, 20-digit micro", "micro-20-digits.txt", 2, "verify", "gen")
	in("text, negative micro", "negative.txt", 2, "verify")
	in("text, stage 70000", "stage-70000.txt", 2, "verify")
	in("text, 301 stages × 65001 micro-batches", "chunks.txt", 2, "verify")
	in("text, 70000 ranks", "many-ranks.txt", 2, "verify")
	in("text, micro-batches 0 and 2 (gap)", "gappy.txt", 2, "verify", "gen")
	in("text, a forward without its backward", "no-backward.txt", 1, "verify", "gen")
	in("CSV, a forward without its backward", "no-backward.csv", 1, "verify", "sim")
	in("text, forwards only (forward-only) with OPT_STEP", "forward-opt.txt", 2, "verify", "gen")
	in("text, OPT_STEP on one rank only", "opt-one-rank.txt", 1, "verify", "gen")
	in("text, truncated step", "truncated.txt", 2, "verify")
	in("text, garbage", "garbage.txt", 2, "show")
	in("binary bytes", "binary.bin", 2, "verify")
	in("text, unknown step kind", "unknown-kind.txt", 2, "sim")
	in("text, 20 MB line", "long-line.txt", 2, "verify")
	in("text, 100 MB of steps", "huge.txt", 2, "verify", "report")
	in("CSV, 100 MB of commas", "huge.csv", 2, "verify")
	in("CSV, micro 4294967296", "micro-2pow32.csv", 2, "verify", "report")
	in("CSV, unterminated quote", "quote.csv", 2, "verify")
	in("CSV, rendezvous deadlock", "deadlock.csv", 1, "verify", "gen")
	in("CSV, transfers paired out of order", "mismatch.csv", 1, "verify")
	in("PyTorch form without DATA_LOAD/OPT_STEP (accepted: added)", "torch-form.csv", 0, "gen", "sim")
	for _, f := range []string{"micro-2pow32.csv", "binary.bin", "huge.csv"} {
		cases = append(cases, tcase{fmt.Sprintf("import of %s", f), []string{"import", "-from", "torch-csv", f}, 2})
	}
	flagCase := func(name string, code int, args ...string) {
		cases = append(cases, tcase{name, args, code})
	}
	flagCase("-ranks 70000 (`show`)", 2, "show", "-schedule", "1f1b", "-ranks", "70000", "-micro", "2")
	flagCase("-ranks 65535 -micro 2 (`verify`; chunk cap)", 2, "verify", "-schedule", "1f1b", "-ranks", "65535", "-micro", "2")
	flagCase("-ranks -1", 2, "verify", "-schedule", "1f1b", "-ranks", "-1", "-micro", "2")
	flagCase("-micro 1000000000000", 2, "sim", "-schedule", "gpipe", "-ranks", "2", "-micro", "1000000000000")
	flagCase("-micro 20 digits", 2, "show", "-schedule", "gpipe", "-ranks", "2", "-micro", "99999999999999999999")
	flagCase("-virtual 100000", 2, "verify", "-schedule", "interleaved", "-ranks", "4", "-virtual", "100000", "-micro", "8")
	flagCase("-cost F=1e308,B=1e308", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-cost", "F=1e308,B=1e308")
	flagCase("-cost F=NaN", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-cost", "F=NaN")
	flagCase("-cost F=1,B=2 (missing keys keep defaults)", 0, "sim", "-schedule", "zb-h1", "-ranks", "2", "-micro", "4", "-cost", "F=1,B=2")
	flagCase("-cost B=0.5 (W default above B)", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-cost", "B=0.5")
	flagCase("-cost F=1:2:3 on 2 stages", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-cost", "F=1:2:3")
	flagCase("-cost with 50000 per-stage values", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-cost", "F="+strings.Repeat("1:", 50000)+"1")
	flagCase("-mem NaN (auto)", 2, "verify", "-schedule", "auto", "-ranks", "2", "-micro", "4", "-mem", "NaN")
	flagCase("-budget -1 (auto)", 2, "sim", "-schedule", "auto", "-ranks", "2", "-micro", "4", "-budget", "-1")
	flagCase("-budget 1000000 (auto)", 2, "sim", "-schedule", "auto", "-ranks", "2", "-micro", "4", "-budget", "1000000")
	flagCase("-budget 10 without -model", 2, "verify", "-schedule", "auto", "-ranks", "2", "-micro", "4", "-budget", "10")
	flagCase("-placement 0,x", 2, "show", "-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-placement", "0,x")
	flagCase("-placement with a 20-digit rank", 2, "show", "-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-placement", "0,18446744073709551617")
	flagCase("-placement loop -ranks 1000000000", 2, "show", "-schedule", "1f1b", "-ranks", "1000000000", "-micro", "2", "-placement", "loop")
	flagCase("-fsdp 1 on dualpipev (`verify`)", 2, "verify", "-schedule", "dualpipev", "-ranks", "4", "-micro", "8", "-fsdp", "1")
	flagCase("-model with NaN", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-model", "model-nan.json")
	flagCase("-model with a misspelt key", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-model", "model-typo.json")
	flagCase("-model of 1 layer on 2 stages", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-model", "model-1layer.json")
	flagCase("-model of 400,001 layers (16 MiB)", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-model", "model-huge.json")
	flagCase("-tie 3:3 (a stage tied to itself)", 2, "verify", "-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", "3:3")
	flagCase("-tie x", 2, "verify", "-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", "x")
	flagCase("-tie 0:4 on 4 stages", 2, "verify", "-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", "0:4")
	flagCase("-tie 0:3,0:2 (a stage in two ties)", 2, "verify", "-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", "0:3,0:2")
	flagCase("-tie 0:3 -fsdp 1", 2, "verify", "-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", "0:3", "-fsdp", "1")
	flagCase("text, TIE_GRAD without -tie (`verify -in`)", 2, "verify", "-in", "tie-early.txt")
	flagCase("text, TIE_GRAD before the send its peer waits for (`verify -in -tie 0:1`)", 1, "verify", "-in", "tie-early.txt", "-tie", "0:1")
	flagCase("unknown schedule", 2, "verify", "-schedule", "nope", "-ranks", "2", "-micro", "2")
	flagCase("-compare of 200 schedules", 2, "sim", "-compare", strings.Repeat("1f1b,", 199)+"1f1b", "-ranks", "2", "-micro", "2")
	flagCase("-compare of 8 schedules at the size cap", 2, "sim", "-compare", strings.Repeat("interleaved:16,", 7)+"interleaved:16", "-ranks", "64", "-micro", "32")
	flagCase("-grid -width 1000000000", 2, "sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-grid", "-width", "1000000000")

	var rows [][]string
	outputs := []string{filepath.Join(dir, "x_gen.go"), filepath.Join(dir, "x.html")}
	for _, tc := range cases {
		for _, o := range outputs {
			os.Remove(o)
		}
		cmd := exec.Command(bin, tc.args...)
		cmd.Dir = dir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		elapsed := time.Since(start)
		code := 0
		if err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatalf("%s: %v", tc.name, err)
			}
			code = ee.ExitCode()
		}
		maxrss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
		msg := strings.TrimSpace(stderr.String())
		if code == 0 && msg == "" {
			msg = headLine(stdout.String())
		}
		switch {
		case code != tc.code:
			t.Errorf("%s: exit %d, want %d; stderr %q", tc.name, code, tc.code, clipMsg(stderr.String(), 300))
		case strings.Contains(msg, "panic") || strings.Contains(msg, "fatal error") || strings.Contains(msg, "please report") || strings.Contains(msg, "goroutine "):
			t.Errorf("%s: stderr %q is a crash or asks for a bug report", tc.name, clipMsg(msg, 300))
		case code != 0 && (msg == "" || strings.Contains(msg, "\n")):
			t.Errorf("%s: want a one-line message, got %q", tc.name, clipMsg(stderr.String(), 300))
		case code != 0 && len(msg) > 400:
			t.Errorf("%s: message of %d bytes; want a short line: %q", tc.name, len(msg), clipMsg(msg, 300))
		}
		if code != 0 {
			for _, o := range outputs {
				if _, err := os.Stat(o); err == nil {
					t.Errorf("%s: exit %d but wrote %s", tc.name, code, filepath.Base(o))
				}
			}
		}
		if cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(); cpu > badInputTime {
			t.Errorf("%s: took %v of CPU, want < %v", tc.name, cpu, badInputTime)
		}
		if long.Enabled() && elapsed > badInputTime {
			t.Errorf("%s: took %v, want < %v", tc.name, elapsed, badInputTime)
		}
		if maxrss > badInputMemKiB {
			t.Errorf("%s: peak RSS %d MiB, want < 1 GiB", tc.name, maxrss>>10)
		}
		rows = append(rows, []string{tc.name, fmt.Sprint(code), fmt.Sprintf("%.2f s", elapsed.Seconds()), fmt.Sprintf("%d MB", (maxrss*1024+500_000)/1_000_000), "`" + clipMsg(msg, 120) + "`"})
	}
	if len(cases) < 28 {
		t.Errorf("%d cases; want at least 28", len(cases))
	}
	if cliUpdate() {
		header := []string{"case", "result", "time", "peak memory", "message"}
		if err := doctable.Replace(filepath.Join("..", "..", "docs", "trust.md"), "cli", header, rows); err != nil {
			t.Fatal(err)
		}
	}
}

func headLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// clipMsg shortens a message to at most n bytes for a table or a failure.
func clipMsg(s string, n int) string {
	s = strings.ReplaceAll(s, "`", "'")
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
