package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/transport"
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
		{"zero world", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "0"}, Env{}, "SLURM_NTASKS=0: must be at least 1"},
		{"bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, Env{}, `MASTER_PORT="70000": not a port number`},
		{"no master", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, Env{}, "MASTER_ADDR is not set"},
		{"no port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, Env{}, "MASTER_PORT is not set"},
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
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("LAUNCH_HELPER")
	if mode == "" {
		t.Skip("helper process for Local tests")
	}
	os.Exit(helper(mode))
}

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
	case "ring":
		// A real multi-process job: TCP rendezvous from the environment,
		// then every rank sends its rank to the next one.
		cfg := env.TCPConfig("fp-ring")
		cfg.RendezvousTimeout = 20 * time.Second
		cfg.Timeout = 20 * time.Second
		tr, err := transport.DialTCP(context.Background(), cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		defer tr.Close()
		next, prev := (env.Rank+1)%env.World, (env.Rank+env.World-1)%env.World
		x := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{float64(env.Rank)}))
		if err := tr.Send(next, transport.Act, transport.Tag{}, x); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 5
		}
		_, got, err := tr.Recv(prev, transport.Act)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 6
		}
		fmt.Printf("got %v from rank %d\n", got.Float64s()[0], prev)
		return 0
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
	err := Local(ctx, n, []string{os.Args[0], "-test.run=^TestHelperProcess$"}, LocalOptions{
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
	for _, want := range []string{"[launch] rank 1 failed: exit status 3", "[launch] rank 0 killed", "[launch] rank 2 killed"} {
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
