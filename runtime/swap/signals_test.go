//go:build unix

package swap_test

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// TestSignalRemovesDir: a process holding a file tier (a chunk offloaded)
// that a terminating signal ends (the launcher's or mpirun's SIGTERM,
// Ctrl-C's SIGINT, SIGHUP) leaves no directory behind, and still dies of
// that signal.
func TestSignalRemovesDir(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			if signal.Ignored(sig) {
				t.Skipf("%v is ignored in this process (nohup), and so in the child: a tier leaves it ignored", sig)
			}
			parent := t.TempDir()
			dir, c, _ := swapChildCmd(t, parent)
			if !isDir(dir) {
				t.Fatalf("%s: no directory", dir)
			}
			start := time.Now()
			if err := c.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			c.Wait()
			ws, _ := c.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != sig {
				t.Errorf("the process ended with %v, want killed by %v", c.ProcessState, sig)
			}
			if isDir(dir) {
				t.Errorf("%s is still there after %v", dir, sig)
			}
			if es, _ := os.ReadDir(parent); len(es) != 0 {
				t.Errorf("left under the parent: %v", es)
			}
			t.Logf("%v: exited in %v", sig, time.Since(start))
		})
	}
}

// TestIgnoredHangupStaysIgnored: in a process that ignores SIGHUP (started
// by nohup), a file tier does not catch it: the process lives on with its
// directory, as the user asked, instead of ending on a hangup.
func TestIgnoredHangupStaysIgnored(t *testing.T) {
	parent := t.TempDir()
	dir, c, kill := swapChildCmd(t, parent, "SWAP_HELPER_IGNORE_HUP=1")
	if err := c.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := c.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process ended on an ignored SIGHUP: %v", err)
	}
	if !isDir(dir) {
		t.Errorf("%s was removed on an ignored SIGHUP", dir)
	}
	kill()
}
