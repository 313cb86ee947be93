package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/examples/internal/compare"
	"github.com/ppgen/ppgen/runtime/nn"
)

// TestInProcMatchesSequential: every compiled-in schedule, through the
// generated functions and through the interpreter, in float64 and float32,
// trains exactly as sequential training on the same micro-batches
// (docs/design.md §10: relative error ≤ 1e-12 / 1e-5; -check fails beyond it).
func TestInProcMatchesSequential(t *testing.T) {
	for _, name := range scheduleNames() {
		for _, dtype := range []string{"float64", "float32"} {
			for _, interpret := range []bool{false, true} {
				if interpret && catalog[name].Program == nil {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/interpret=%v", name, dtype, interpret), func(t *testing.T) {
					var out bytes.Buffer
					o := options{schedule: name, transport: "inproc", steps: 3, check: true, dtype: dtype, lr: 0.1, seed: 7, interpret: interpret}
					if err := runInProc(o, &out); err != nil {
						t.Fatalf("%v\n%s", err, out.String())
					}
					if !strings.Contains(out.String(), "check: max relative difference") {
						t.Fatalf("no check line in output:\n%s", out.String())
					}
				})
			}
		}
	}
}

// TestCheckCatchesDivergence: -check is not vacuous. Training the pipeline
// with one learning rate and the reference with another must fail it.
func TestCheckCatchesDivergence(t *testing.T) {
	var out bytes.Buffer
	o := options{schedule: "1f1b", transport: "inproc", steps: 2, check: true, dtype: "float64", lr: 0.1, seed: 7}
	model, _, err := sequentialReference(o, catalog["1f1b"].Spec, tensor.Float64)
	if err != nil {
		t.Fatal(err)
	}
	o2 := o
	o2.lr = 0.2
	ref2, _, err := sequentialReference(o2, catalog["1f1b"].Spec, tensor.Float64)
	if err != nil {
		t.Fatal(err)
	}
	d, err := compare.Params(params(model), params(ref2))
	if err != nil || d <= o.tolerance() {
		t.Fatalf("different learning rates give parameter difference %g (err %v); the check could not see a divergence", d, err)
	}
	if err := report(&out, o, 0, d); err == nil {
		t.Errorf("report accepted a difference of %g", d)
	}
}

// exampleTempDir makes, once per test binary run, the directory the
// builds of this command go into.
var exampleTempDir = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "mlp-test")
	if err != nil {
		return "", err
	}
	exampleDir = dir // TestMain removes it
	return dir, nil
})

// buildExample builds this command once per test binary run.
var buildExample = sync.OnceValues(func() (string, error) {
	dir, err := exampleTempDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mlp")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func exampleBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the example and starts OS processes")
	}
	bin, err := buildExample()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestTCPMatchesSequential: 4 OS processes on loopback (the command's own
// launcher) train exactly as sequential training, for every schedule.
func TestTCPMatchesSequential(t *testing.T) {
	bin := exampleBinary(t)
	for _, name := range scheduleNames() {
		for _, dtype := range []string{"float64", "float32"} {
			t.Run(name+"/"+dtype, func(t *testing.T) {
				cmd := exec.Command(bin, "-transport", "tcp", "-check", "-schedule", name, "-steps", "3", "-dtype", dtype)
				cmd.Env = withoutRankEnv(os.Environ())
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				if got := strings.Count(string(out), "check: max relative difference"); got != 4 {
					t.Fatalf("%d ranks reported a check, want 4:\n%s", got, out)
				}
			})
		}
	}
}

func withoutRankEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k := strings.SplitN(kv, "=", 2)[0]
		switch k {
		case "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "PPGEN_TOKEN":
			continue
		}
		// The other launchers launch.FromEnv reads (mpirun, srun).
		if strings.HasPrefix(k, "OMPI_COMM_WORLD_") || strings.HasPrefix(k, "PMI_") || strings.HasPrefix(k, "SLURM_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// rankProc is one rank started by hand, as a cluster launcher would.
type rankProc struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan error
	exited time.Time
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// mlpToken is the ranks' PPGEN_TOKEN (32 hex digits: the 128 bits the
// transport asks at least).
const mlpToken = "5ec7e75ec7e75ec7e75ec7e75ec7e75e"

// startRanks starts world ranks of bin; args[r] are rank r's flags and
// token[r] its PPGEN_TOKEN.
func startRanks(t *testing.T, bin string, args [][]string, token []string) []*rankProc {
	t.Helper()
	port := freePort(t)
	procs := make([]*rankProc, len(args))
	for r := range args {
		cmd := exec.Command(bin, append([]string{"-transport", "tcp"}, args[r]...)...)
		cmd.Env = append(withoutRankEnv(os.Environ()),
			fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", len(args)),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port, "PPGEN_TOKEN="+token[r])
		p := &rankProc{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
		cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.done <- cmd.Wait() }()
		procs[r] = p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
		}
	})
	return procs
}

// waitAll waits up to limit for every process but skip to exit and returns
// each one's error (nil when it exited 0) and when it exited.
func waitAll(t *testing.T, procs []*rankProc, skip int, limit time.Duration) map[int]error {
	t.Helper()
	errs := map[int]error{}
	deadline := time.After(limit)
	for r, p := range procs {
		if r == skip {
			continue
		}
		select {
		case err := <-p.done:
			errs[r] = err
			p.exited = time.Now()
		case <-deadline:
			t.Fatalf("rank %d still running after %v; stderr:\n%s", r, limit, p.stderr.String())
		}
	}
	return errs
}

// TestKilledRankIsNamed: killing one rank of a TCP run makes every other rank
// exit with an error naming it within 10 s.
func TestKilledRankIsNamed(t *testing.T) {
	bin := exampleBinary(t)
	flags := []string{"-schedule", "1f1b", "-steps", "100000", "-step-delay", "5ms"}
	procs := startRanks(t, bin, [][]string{flags, flags, flags, flags}, []string{mlpToken, mlpToken, mlpToken, mlpToken})
	// Wait until training runs (world rank 0 prints the losses).
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(procs[0].stdout.String(), "step 3 loss") {
		if time.Now().After(deadline) {
			t.Fatalf("training did not start; rank 0 stderr:\n%s", procs[0].stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	const victim = 2
	killed := time.Now()
	if err := procs[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	errs := waitAll(t, procs, victim, 10*time.Second)
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d exited 0 after rank %d was killed", r, victim)
		}
		msg := procs[r].stderr.String()
		if !strings.Contains(msg, fmt.Sprintf("rank %d", victim)) {
			t.Errorf("rank %d's error does not name rank %d:\n%s", r, victim, msg)
		}
		if d := procs[r].exited.Sub(killed); d > 10*time.Second {
			t.Errorf("rank %d took %v to notice", r, d)
		}
	}
}

// TestMismatchedPeersRefused: a rank running another schedule (different
// fingerprint) or holding another token is refused at the handshake with a
// message that says what differs, and no rank trains; a rank on another
// -seed or -dp fails every rank at Open, naming the flag. A rank with another
// token cannot be told from an outsider, so the others drop its connection
// and keep waiting for the real rank (until the rendezvous timeout, or until
// a launcher stops them); the rank itself fails at once saying why.
func TestMismatchedPeersRefused(t *testing.T) {
	bin := exampleBinary(t)
	same := []string{"-schedule", "1f1b", "-steps", "1"}
	tests := []struct {
		name  string
		args  [][]string
		token []string
		only  int // -1: every rank exits; else only this one does
		want  string
	}{
		// The refusal names both schedules and what to do.
		{"fingerprint", [][]string{same, same, {"-schedule", "gpipe", "-steps", "1"}, same}, []string{mlpToken, mlpToken, mlpToken, mlpToken}, -1,
			"runs schedule gpipe (P=4, V=1, M=8), fingerprint sha256:"},
		{"fingerprint advice", [][]string{same, same, {"-schedule", "gpipe", "-steps", "1"}, same}, []string{mlpToken, mlpToken, mlpToken, mlpToken}, -1,
			"build every rank from the same generated code (go generate ./... and rebuild, then start that one binary on every rank), or pass the same -schedule to every rank"},
		{"token", [][]string{same, same, same, same}, []string{mlpToken, mlpToken, "deadbeefdeadbeefdeadbeefdeadbeef", mlpToken}, 2, "refused this rank: failed authentication: the shared token differs"},
		// The run configuration is compared at Open (world.Options.Config):
		// a rank on another -seed trained apart, one on another -dp (another
		// world size) left the others waiting for the rendezvous timeout.
		{"seed", [][]string{same, same, {"-schedule", "1f1b", "-steps", "1", "-seed", "2"}, same}, []string{mlpToken, mlpToken, mlpToken, mlpToken}, -1,
			"the ranks run different configurations: rank 2 runs -seed 2, rank 0 -seed 1"},
		{"dp", [][]string{same, same, same, {"-schedule", "1f1b", "-steps", "1", "-dp", "2"}}, []string{mlpToken, mlpToken, mlpToken, mlpToken}, -1,
			"the ranks run different configurations: rank 3 runs -dp 2, rank 0 -dp 1; they differ in size too"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			procs := startRanks(t, bin, tc.args, tc.token)
			var errs map[int]error
			if tc.only < 0 {
				errs = waitAll(t, procs, -1, 60*time.Second)
			} else {
				errs = waitAll(t, procs[tc.only:tc.only+1], -1, 60*time.Second)
				procs = procs[tc.only : tc.only+1]
			}
			var all strings.Builder
			failed := 0
			for r, err := range errs {
				if err != nil {
					failed++
				}
				all.WriteString(procs[r].stderr.String())
				if strings.Contains(procs[r].stdout.String(), "loss") {
					t.Errorf("rank %d trained despite the mismatch", r)
				}
			}
			if failed == 0 {
				t.Fatalf("every rank exited 0")
			}
			if !strings.Contains(all.String(), tc.want) {
				t.Errorf("no rank's error mentions %q:\n%s", tc.want, all.String())
			}
		})
	}
}

// TestSwapTiers: the swap schedule really offloads through each tier (and
// trains exactly as sequential training, as -check asserts), the report
// shows it, and a bad -swap-tier is refused.
func TestSwapTiers(t *testing.T) {
	for _, tier := range []string{"host", "file"} {
		var out bytes.Buffer
		o := options{schedule: "1f1b-fsdp-swap", transport: "inproc", steps: 2, check: true, dtype: "float64", lr: 0.1, seed: 7, swapTier: tier}
		if err := runInProc(o, &out); err != nil {
			t.Fatalf("%s: %v\n%s", tier, err, out.String())
		}
		if !strings.Contains(out.String(), "rank 0 swap (") || strings.Contains(out.String(), "rank 0 swap ("+tier+" tier): 0 offloads") {
			t.Errorf("%s: no offloads reported on rank 0:\n%s", tier, out.String())
		}
	}
	var out bytes.Buffer
	o := options{schedule: "1f1b-fsdp-swap", transport: "inproc", steps: 1, dtype: "float64", lr: 0.1, seed: 7, swapTier: "disk"}
	if err := runInProc(o, &out); err == nil || !strings.Contains(err.Error(), `-swap-tier "disk"; want host, file or none`) {
		t.Errorf("err = %v, want the -swap-tier refusal", err)
	}
}

// TestTrace: -trace writes the last step's measured timeline, one event per
// stage call named by its step, and the swap schedule still offloads with
// the stages wrapped for it (the runtime finds pipe.Swapper behind them).
func TestTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	var out bytes.Buffer
	o := options{schedule: "1f1b-fsdp-swap", transport: "inproc", steps: 2, check: true, dtype: "float64", lr: 0.1, seed: 7, trace: path}
	if err := runInProc(o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`rank 0 swap \(host tier\): [1-9][0-9]* offloads`).MatchString(out.String()) {
		t.Errorf("no offloads with a timeline:\n%s", out.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct{ Name, Ph, Cat string }
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	n, comm := 0, 0
	for _, e := range doc.TraceEvents {
		switch {
		case e.Ph == "X" && e.Cat == "compute":
			n++
		case e.Ph == "X" && e.Cat == "comm":
			comm++
		}
	}
	if comm == 0 {
		t.Errorf("no transfers recorded")
	}
	sp := catalog["1f1b-fsdp-swap"].Spec
	if want := 3 * sp.Stages * sp.Micro; n != want { // F, I, W per chunk, one step
		t.Errorf("%d events, want %d", n, want)
	}
	if !strings.Contains(string(b), `"name":"3F7"`) {
		t.Errorf("no event named 3F7")
	}
}

// TestTiedReferenceIsSequential: the sequential reference of a tied
// schedule (tieShared: one parameter value, its gradient the sum of the two
// uses' buffers, stage A's plus stage B's, the pipeline's association) is
// plain sequential training of the model with one layer in two places
// (tieSameLayer, whose gradient accumulates use by use) within 1e-12 in
// float64; and the tie matters: two untied copies trained apart end
// elsewhere, so -check would see a missing sum.
func TestTiedReferenceIsSequential(t *testing.T) {
	sp := catalog["1f1b-tie"].Spec
	if len(sp.Ties) == 0 {
		t.Fatal("1f1b-tie has no ties")
	}
	train := func(mode tieMode) []*nn.Param {
		stages, err := buildTiedStages(stagesPerCopy(sp), tensor.Float64, 7, sp.Ties, mode, widen{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := trainSequential(stages, newBatches(tensor.Float64, 7, sp.Micro), &nn.SGD{LR: 0.1}, nn.MSE{Scale: 1 / float64(sp.Micro)}, 5); err != nil {
			t.Fatal(err)
		}
		return params(stages)
	}
	shared, same, copies := train(tieShared), train(tieSameLayer), train(tieCopies)
	if d, err := compare.Params(shared, same); err != nil || d > 1e-12 {
		t.Errorf("the reference differs from plain sequential training by %g (%v); want ≤ 1e-12", d, err)
	}
	if d, err := compare.Params(shared, copies); err != nil || d < 1e-6 {
		t.Errorf("untied copies end within %g of the tied model (%v): the tie does not matter to the check", d, err)
	}
}
