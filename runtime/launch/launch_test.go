package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromLookup(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want Env
		err  string
	}{
		{"torchrun", map[string]string{"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "node7", "MASTER_PORT": "29500", "PPGEN_TOKEN": "s3"},
			Env{Rank: 2, World: 4, MasterAddr: "node7", MasterPort: 29500, Token: "s3", Source: "torchrun"}, ""},
		{"slurm", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_NODELIST": "gpu[03-04,09],cpu1", "SLURM_JOB_ID": "123456"},
			Env{Rank: 5, World: 8, LocalRank: 1, MasterAddr: "gpu03", MasterPort: 15000 + 123456%20000, Source: "slurm"}, ""},
		{"torchrun wins over slurm", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			Env{Rank: 1, World: 2, MasterAddr: "h", MasterPort: 1, Source: "torchrun"}, ""},
		{"single rank needs no master", map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			Env{Rank: 0, World: 1, MasterAddr: "127.0.0.1", Source: "torchrun"}, ""},
		{"nothing", map[string]string{}, Env{}, "not started by a launcher"},
		{"bad rank", map[string]string{"RANK": "two", "WORLD_SIZE": "4"}, Env{}, `RANK="two": not an integer`},
		{"rank too big", map[string]string{"RANK": "4", "WORLD_SIZE": "4"}, Env{}, "RANK=4 is not in [0, WORLD_SIZE=4)"},
		{"no world", map[string]string{"RANK": "0"}, Env{}, "RANK=0 is set but WORLD_SIZE is not"},
		{"world without rank", map[string]string{"WORLD_SIZE": "3"}, Env{}, "WORLD_SIZE=3 is set but RANK is not"},
		{"zero world", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "0"}, Env{}, "SLURM_NTASKS=0: out of range, want 1..65536"},
		{"huge world", map[string]string{"RANK": "0", "WORLD_SIZE": "65537"}, Env{}, "WORLD_SIZE=65537: out of range, want 1..65536"},
		{"world overflows int", map[string]string{"RANK": "0", "WORLD_SIZE": "99999999999999999999"}, Env{}, `WORLD_SIZE="99999999999999999999": not an integer (want 1..65536)`},
		{"negative rank", map[string]string{"RANK": "-1", "WORLD_SIZE": "2"}, Env{}, "RANK=-1: out of range, want 0..65535"},
		{"local rank too big", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2"}, Env{}, "LOCAL_RANK=2: out of range, want 0..1"},
		{"negative local rank", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "-3"}, Env{}, "SLURM_LOCALID=-3: out of range, want 0..0"},
		{"bad job id", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "-5"}, Env{}, `SLURM_JOB_ID="-5": not a job number`},
		{"allow no token", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_ALLOW_NO_TOKEN": "1"},
			Env{World: 1, MasterAddr: "127.0.0.1", AllowNoToken: true, Source: "torchrun"}, ""},
		{"allow no token false", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_ALLOW_NO_TOKEN": "false"},
			Env{World: 1, MasterAddr: "127.0.0.1", Source: "torchrun"}, ""},
		{"allow no token yes", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_ALLOW_NO_TOKEN": "yes"}, Env{}, `PPGEN_ALLOW_NO_TOKEN="yes": want 1 or true (run without a token), or 0 or false`},
		{"timeout", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_TIMEOUT": "90s"},
			Env{World: 1, MasterAddr: "127.0.0.1", Timeout: 90 * time.Second, Source: "torchrun"}, ""},
		{"timeout not a duration", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_TIMEOUT": "30"}, Env{}, `PPGEN_TIMEOUT="30": not a duration`},
		{"timeout zero", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_TIMEOUT": "0s"}, Env{}, "PPGEN_TIMEOUT=0s: out of range, want more than 0 and at most 24h0m0s"},
		{"timeout negative", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_TIMEOUT": "-1s"}, Env{}, "PPGEN_TIMEOUT=-1s: out of range"},
		{"timeout too long", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_TIMEOUT": "25h"}, Env{}, "PPGEN_TIMEOUT=25h0m0s: out of range"},
		{"token too long", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "PPGEN_TOKEN": strings.Repeat("x", 1025)}, Env{}, "PPGEN_TOKEN is 1025 bytes long; want at most 1024"},
		{"bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, Env{}, `MASTER_PORT="70000": not a port number`},
		{"no master", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, Env{}, "MASTER_ADDR is not set"},
		{"no port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, Env{}, "MASTER_PORT is not set"},
		// OpenMPI's mpirun: rank from OMPI_COMM_WORLD_*, 127.0.0.1 when every
		// rank is on this node, the port from the job number.
		{"openmpi local", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
			"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_MCA_ess_base_jobid": "351600641"},
			Env{Rank: 3, World: 4, LocalRank: 3, MasterAddr: "127.0.0.1", MasterPort: 15000 + 351600641%20000, Source: "openmpi"}, ""},
		{"openmpi master", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
			"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"},
			Env{Rank: 1, World: 8, LocalRank: 1, MasterAddr: "n1", MasterPort: 29500, Source: "openmpi"}, ""},
		{"openmpi on two nodes needs a master", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "8",
			"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_MCA_ess_base_jobid": "7"}, Env{}, "MASTER_ADDR is not set (nor a SLURM node list) and OMPI_COMM_WORLD_SIZE=8 needs a rendezvous"},
		{"openmpi no size", map[string]string{"OMPI_COMM_WORLD_RANK": "1"}, Env{}, "OMPI_COMM_WORLD_RANK=1 is set but OMPI_COMM_WORLD_SIZE is not"},
		{"openmpi bad local size", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, Env{},
			"OMPI_COMM_WORLD_LOCAL_SIZE=3: out of range, want 1..2"},
		{"openmpi bad job id", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
			"OMPI_MCA_ess_base_jobid": "x"}, Env{}, `OMPI_MCA_ess_base_jobid="x": not a job number`},
		// mpirun inside an sbatch allocation: SLURM_PROCID is the batch
		// step's (0 everywhere); OpenMPI's rank wins.
		{"openmpi wins over slurm", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
			"SLURM_JOB_NODELIST": "c[1-2]", "SLURM_JOB_ID": "42"},
			Env{Rank: 2, World: 4, MasterAddr: "c1", MasterPort: 15042, Source: "openmpi"}, ""},
		{"torchrun wins over openmpi", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"},
			Env{World: 1, MasterAddr: "127.0.0.1", Source: "torchrun"}, ""},
		// MPICH's Hydra (and srun --mpi=pmi2): PMI_RANK, PMI_SIZE.
		{"pmi local", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "MASTER_PORT": "29400"},
			Env{Rank: 1, World: 2, LocalRank: 1, MasterAddr: "127.0.0.1", MasterPort: 29400, Source: "pmi"}, ""},
		{"pmi needs a port", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALNRANKS": "2"}, Env{}, "MASTER_PORT is not set (nor SLURM_JOB_ID) and PMI_SIZE=2 needs a rendezvous"},
		{"pmi under srun", map[string]string{"PMI_RANK": "5", "PMI_SIZE": "8", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "gpu[03-04]", "SLURM_JOB_ID": "9"},
			Env{Rank: 5, World: 8, MasterAddr: "gpu03", MasterPort: 15009, Source: "pmi"}, ""},
		{"pmi rank too big", map[string]string{"PMI_RANK": "2", "PMI_SIZE": "2"}, Env{}, "PMI_RANK=2 is not in [0, PMI_SIZE=2)"},
		{"bad nodelist", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "gpu[01-02", "SLURM_JOB_ID": "1"}, Env{},
			`SLURM_JOB_NODELIST="gpu[01-02": unbalanced '['`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromLookup(lookup(tc.env))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, err := FromLookup(lookup(nil)); !errors.Is(err, ErrNotLaunched) {
		t.Fatalf("not errors.Is(ErrNotLaunched): %v", err)
	}
}

// FuzzFromLookup: any environment either is refused with an error or gives
// an Env within its bounds.
func FuzzFromLookup(f *testing.F) {
	f.Add("RANK=2\nWORLD_SIZE=4\nMASTER_ADDR=h\nMASTER_PORT=29500\nPPGEN_TOKEN=abc")
	f.Add("SLURM_PROCID=5\nSLURM_NTASKS=8\nSLURM_LOCALID=1\nSLURM_JOB_NODELIST=gpu[03-04,09],cpu1\nSLURM_JOB_ID=123456")
	f.Add("RANK=0\nWORLD_SIZE=1\nPPGEN_TIMEOUT=90s\nPPGEN_ALLOW_NO_TOKEN=1")
	f.Add("RANK=0\nWORLD_SIZE=99999999999999999999")
	f.Add("SLURM_PROCID=0\nSLURM_NPROCS=2\nSLURM_NODELIST=a[]\nSLURM_JOB_ID=9223372036854775807")
	f.Add("OMPI_COMM_WORLD_RANK=3\nOMPI_COMM_WORLD_SIZE=4\nOMPI_COMM_WORLD_LOCAL_SIZE=4\nOMPI_MCA_ess_base_jobid=351600641")
	f.Add("PMI_RANK=1\nPMI_SIZE=2\nMPI_LOCALNRANKS=2\nMASTER_PORT=29400")
	f.Fuzz(func(t *testing.T, text string) {
		m := map[string]string{}
		for line := range strings.SplitSeq(text, "\n") {
			k, v, _ := strings.Cut(line, "=")
			m[k] = v
		}
		e, err := FromLookup(lookup(m))
		if err != nil {
			if e := err.Error(); !strings.HasPrefix(e, "launch: ") {
				t.Fatalf("error %q lacks the package prefix", e)
			}
			return
		}
		switch {
		case e.World < 1 || e.World > MaxWorld:
			t.Fatalf("World = %d out of 1..%d", e.World, MaxWorld)
		case e.Rank < 0 || e.Rank >= e.World:
			t.Fatalf("Rank = %d, World = %d", e.Rank, e.World)
		case e.LocalRank < 0 || e.LocalRank >= e.World:
			t.Fatalf("LocalRank = %d, World = %d", e.LocalRank, e.World)
		case e.MasterAddr == "":
			t.Fatal("empty MasterAddr")
		case e.World > 1 && (e.MasterPort < 1 || e.MasterPort > 65535):
			t.Fatalf("World = %d with MasterPort = %d", e.World, e.MasterPort)
		case e.MasterPort < 0 || e.MasterPort > 65535:
			t.Fatalf("MasterPort = %d", e.MasterPort)
		case e.Timeout < 0 || e.Timeout > MaxTimeout:
			t.Fatalf("Timeout = %v", e.Timeout)
		case len(e.Token) > MaxTokenLen:
			t.Fatalf("token of %d bytes", len(e.Token))
		}
	})
}

func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{
		"node1":                    "node1",
		"gpu[01-04,07],cpu3":       "gpu01",
		"cpu3,gpu[01-04]":          "cpu3",
		"rack[1-2]-n[5-6]":         "rack1-n5",
		"a-b[009-010]":             "a-b009",
		"host[7]":                  "host7",
		"login.example.org,gpu[1]": "login.example.org",
	} {
		got, err := FirstHost(in)
		if err != nil || got != want {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a]", "a[", "a[]"} {
		if _, err := FirstHost(bad); err == nil {
			t.Errorf("FirstHost(%q) succeeded", bad)
		}
	}
}

// TestHelperProcess is not a test: Local runs the test binary as a rank with
// LAUNCH_HELPER set to the behaviour wanted.
//
// With LAUNCH_AS_LAUNCHER set it is the launcher instead: it runs Local with
// LAUNCH_RANKS ranks of the helper mode LAUNCH_AS_LAUNCHER and a grace
// period of LAUNCH_GRACE, and exits 0, or 3 after a forwarded signal, or 4
// after another error.
func TestHelperProcess(t *testing.T) {
	if mode := os.Getenv("LAUNCH_AS_LAUNCHER"); mode != "" {
		os.Exit(launcherMain(mode))
	}
	mode := os.Getenv("LAUNCH_HELPER")
	if mode == "" {
		t.Skip("helper process for Local tests")
	}
	os.Exit(helper(mode))
}

func launcherMain(mode string) int {
	os.Unsetenv("LAUNCH_AS_LAUNCHER")
	n, _ := strconv.Atoi(os.Getenv("LAUNCH_RANKS"))
	grace, _ := time.ParseDuration(os.Getenv("LAUNCH_GRACE"))
	cmd := helperCmd()
	if os.Getenv("LAUNCH_UNDER_SH") != "" { // each rank a shell running the helper
		cmd = []string{"sh", "-c", strings.Join(cmd, " ") + "; true"}
	}
	err := Local(context.Background(), n, cmd, LocalOptions{Env: []string{"LAUNCH_HELPER=" + mode}, Grace: grace})
	var se *SignalError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &se):
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	fmt.Fprintln(os.Stderr, err)
	return 4
}

// ExtraHelpers are helper modes registered by the external test package
// (launch_test), run with the rank's Env.
var ExtraHelpers = map[string]func(Env) int{}

func helperCmd() []string { return []string{os.Args[0], "-test.run=^TestHelperProcess$"} }

func helper(mode string) int {
	env, err := FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch mode {
	case "hello":
		fmt.Printf("hello from rank %d of %d at %s\n", env.Rank, env.World, env.Addr())
		fmt.Fprintf(os.Stderr, "warning from rank %d\npartial line", env.Rank)
		return 0
	case "fail":
		if env.Rank == 1 {
			fmt.Println("rank 1 giving up")
			return 3
		}
		time.Sleep(time.Minute) // must be killed
		return 0
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	case "watch-pid": // watch the launcher, print the pid, wait to be killed
		if !WatchLauncher() {
			fmt.Println("no launcher to watch")
			return 5
		}
		fmt.Printf("pid %d\n", os.Getpid())
		time.Sleep(time.Minute)
		return 0
	case "pid": // print the pid, then wait to be killed
		fmt.Printf("pid %d\n", os.Getpid())
		time.Sleep(time.Minute)
		return 0
	case "term": // report SIGTERM and exit 0
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Printf("ready pid %d\n", os.Getpid())
		select {
		case s := <-c:
			fmt.Printf("got %v\n", s)
			return 0
		case <-time.After(time.Minute):
			return 1
		}
	case "ignore-term": // ignore SIGTERM: the launcher must kill the rank
		signal.Ignore(syscall.SIGTERM)
		fmt.Printf("ready pid %d\n", os.Getpid())
		time.Sleep(time.Minute)
		return 0
	case "order":
		// Rank 0 exits 0 at once; rank 2 fails at +0.1 s but leaves a
		// grandchild holding its output for 3 s; rank 1 fails at +2 s (the
		// gap leaves a loaded machine room to start rank 2 and its
		// grandchild late).
		switch env.Rank {
		case 0:
			return 0
		case 2:
			c := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
			c.Env = append(os.Environ(), "LAUNCH_HELPER=linger")
			c.Stdout, c.Stderr = os.Stdout, os.Stderr
			if err := c.Start(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 5
			}
			time.Sleep(100 * time.Millisecond)
			return 3
		default:
			time.Sleep(2 * time.Second)
			return 4
		}
	case "nap": // exit 0 after a second
		time.Sleep(time.Second)
		return 0
	case "linger":
		time.Sleep(3 * time.Second)
		return 0
	default:
		// Modes that need the transport live in the external test package
		// (transport imports launch, so this package's tests cannot).
		if f := ExtraHelpers[mode]; f != nil {
			return f(env)
		}
	}
	return 99
}

// syncBuffer is a bytes.Buffer safe for the launcher's concurrent writers.
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

func runHelper(t *testing.T, ctx context.Context, n int, mode string, grace time.Duration) (string, string, error, time.Duration) {
	t.Helper()
	var out, errOut syncBuffer
	start := time.Now()
	err := Local(ctx, n, helperCmd(), LocalOptions{
		Stdout: &out, Stderr: &errOut, Env: []string{"LAUNCH_HELPER=" + mode}, Grace: grace,
	})
	return out.String(), errOut.String(), err, time.Since(start)
}

func TestLocalPrefixesOutput(t *testing.T) {
	out, errOut, err, _ := runHelper(t, context.Background(), 3, "hello", time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	for r := range 3 {
		for _, want := range []string{fmt.Sprintf("[rank %d] hello from rank %d of 3 at 127.0.0.1:", r, r)} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
		}
		for _, want := range []string{
			fmt.Sprintf("[rank %d] warning from rank %d\n", r, r),
			fmt.Sprintf("[rank %d] partial line\n", r),
			fmt.Sprintf("[launch] rank %d exited with status 0\n", r),
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errOut)
			}
		}
	}
}

func TestLocalKillsOthersWhenOneFails(t *testing.T) {
	out, errOut, err, took := runHelper(t, context.Background(), 3, "fail", 300*time.Millisecond)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(err.Error(), "launch: rank 1 failed: exit status 3") {
		t.Fatalf("err = %v\n%s", err, errOut)
	}
	if took > 20*time.Second {
		t.Errorf("took %v", took)
	}
	if !strings.Contains(out, "[rank 1] rank 1 giving up") {
		t.Errorf("stdout: %s", out)
	}
	if re.Killed == nil || !slices.Equal(re.Killed, []int{0, 2}) || len(re.Later) != 0 {
		t.Errorf("killed %v, later %v; want killed [0 2]", re.Killed, re.Later)
	}
	for _, want := range []string{"[launch] rank 1 failed at +", "exit status 3", "[launch] rank 0 killed after rank 1 failed", "[launch] rank 2 killed after rank 1 failed",
		"[launch] summary: rank 1 failed first"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestLocalCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, errOut, err, took := runHelper(t, ctx, 2, "sleep", 2*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v\n%s", err, errOut)
	}
	if took > 15*time.Second {
		t.Errorf("took %v", took)
	}
}

func TestLocalBadCommand(t *testing.T) {
	err := Local(context.Background(), 2, []string{"/nonexistent/ppgen-rank"}, LocalOptions{Stdout: &syncBuffer{}, Stderr: &syncBuffer{}})
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 0 {
		t.Fatalf("err = %v", err)
	}
}

// TestLocalTCPRing runs a 3-process job that rendezvouses over TCP from the
// environment Local sets.
func TestLocalTCPRing(t *testing.T) {
	out, errOut, err, _ := runHelper(t, context.Background(), 3, "ring", 2*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, errOut)
	}
	for r := range 3 {
		want := fmt.Sprintf("[rank %d] got %d from rank %d", r, (r+2)%3, (r+2)%3)
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
}

// TestLocalNamesTheFirstFailure: rank 0 exits 0 first, rank 2 fails at
// +0.1 s (its output held open by a grandchild for 3 s), rank 1 fails at
// +2 s; the error names rank 2, the first to fail, and rank 1 as failing
// after it.
func TestLocalNamesTheFirstFailure(t *testing.T) {
	_, errOut, err, _ := runHelper(t, context.Background(), 3, "order", 15*time.Second)
	var re *RankError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v\n%s", err, errOut)
	}
	if re.Rank != 2 || !slices.Equal(re.Later, []int{1}) || len(re.Killed) != 0 {
		t.Errorf("rank %d later %v killed %v, want rank 2 later [1] killed []\n%s", re.Rank, re.Later, re.Killed, errOut)
	}
	if want := "launch: rank 2 failed: exit status 3 (rank 1 failed after it)"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if !strings.Contains(errOut, "[launch] summary: rank 2 failed first") {
		t.Errorf("no summary naming rank 2:\n%s", errOut)
	}
}

func TestTimeoutFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		err  string
	}{{"", 0, ""}, {"90s", 90 * time.Second, ""}, {"soon", 0, `PPGEN_TIMEOUT="soon": not a duration`}, {"0s", 0, "out of range"}} {
		t.Setenv(TimeoutVar, tc.v)
		got, err := TimeoutFromEnv()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("PPGEN_TIMEOUT=%q: err %v, want %q", tc.v, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("PPGEN_TIMEOUT=%q: %v, %v; want %v", tc.v, got, err, tc.want)
		}
	}
}

// TestCheckToken: tokens below 128 bits of entropy (length times the bits
// of one symbol of their alphabet) are refused with advice, without the
// token; the launcher's own tokens pass.
func TestCheckToken(t *testing.T) {
	made, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		token string
		ok    bool
	}{
		{made, true},
		{"0123456789abcdef0123456789abcdef", true},        // 32 hex digits: 128 bits (openssl rand -hex 16, ppgen template's od -tx1)
		{"0123456789abcdef0123456789abcde", false},        // 31: 124 bits
		{"0123456789ABCDEF0123456789abcdef", true},        // hex in either case
		{"q83vEjRWeJASNFZ4kBI0Vg", true},                  // 22 base64 characters: 132 bits (openssl rand -base64 16 without padding)
		{"q83vEjRWeJASNFZ4kBI0V", false},                  // 21: 126 bits
		{"12345678901234567890123456789012345678", false}, // 38 decimal digits: 126 bits
		{"summer2024", false},                             // the token recovered offline in issue 35
		{"correct horse battery staple", true},            // 28 printable ASCII characters: 184 bits
		{"secret", false},
	}
	for _, c := range cases {
		err := CheckToken(c.token)
		if (err == nil) != c.ok {
			t.Errorf("CheckToken(%q) = %v, want ok=%v", c.token, err, c.ok)
		}
		if err != nil {
			for _, want := range []string{"PPGEN_TOKEN", "too weak", "fewer than 128", "openssl rand -hex 16", "head -c16 /dev/urandom | xxd -p"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("CheckToken(%q) = %v, want it to contain %q", c.token, err, want)
				}
			}
			if strings.Contains(err.Error(), c.token) {
				t.Errorf("CheckToken(%q) shows the token: %v", c.token, err)
			}
		}
	}
}

// TestPlainFramesVar: PPGEN_PLAIN_FRAMES is the opt-out of frame
// authentication, 1/true or 0/false.
func TestPlainFramesVar(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
		err  string
	}{{"1", true, ""}, {"TRUE", true, ""}, {"0", false, ""}, {"", false, ""}, {"yes", false, `launch: PPGEN_PLAIN_FRAMES="yes": want 1 or true`}} {
		env := map[string]string{"RANK": "0", "WORLD_SIZE": "1", PlainFramesVar: c.v}
		e, err := FromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s=%q: err = %v, want %q", PlainFramesVar, c.v, err, c.err)
			}
			continue
		}
		if err != nil || e.PlainFrames != c.want {
			t.Errorf("%s=%q: PlainFrames %v, err %v; want %v", PlainFramesVar, c.v, e.PlainFrames, err, c.want)
		}
	}
}
