//go:build linux

package launch_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
)

// TestProgressTimeoutBlamesStoppedRank: over MPI there are no heartbeats,
// so a rank stopped by a signal (SIGSTOP) is seen only through the
// progress timeouts of the ranks waiting on it, and of those waiting on
// them; the first to time out relayed its blame of the rank it waited on
// (issue 35: the wrong rank in 2 of 7 MPI trials). A timeout now blames a
// stopped rank of the same job on this host, whichever rank it waited on,
// and its abort news relays that blame; a stopped process of another job
// changes nothing.
func TestProgressTimeoutBlamesStoppedRank(t *testing.T) {
	job := fmt.Sprintf("ppgen-test-%d", os.Getpid())
	c := exec.Command("sleep", "30")
	c.Env = append(os.Environ(), "OMPI_MCA_ess_base_jobid="+job, "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=4")
	if err := c.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	if err := c.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/stat")
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process did not stop")
		}
	}
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	for _, tc := range []struct {
		name  string
		job   string
		blame int
	}{
		{"same job", job, 2},
		{"another job", job + "-other", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OMPI_MCA_ess_base_jobid", tc.job)
			// Rank 0 waited on rank 1 (alive, itself waiting on rank 2).
			err := transport.NewProgressError(0, "recv", 1, abi.ActChannel, 2*time.Second, "PPGEN_TIMEOUT", nil, "")
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Peer != tc.blame {
				t.Fatalf("%v blames %+v, want rank %d", err, pe, tc.blame)
			}
			if news := transport.AbortNews(0, err); news.Peer != tc.blame {
				t.Errorf("abort news %v, want rank %d blamed", news, tc.blame)
			}
			if stopped := strings.Contains(err.Error(), "rank 2 is stopped by a signal"); stopped != (tc.blame == 2) {
				t.Errorf("message: %v", err)
			}
			t.Log(err, "\n", pe)
		})
	}
}
