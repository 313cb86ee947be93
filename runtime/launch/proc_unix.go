//go:build unix

package launch

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// forwardedSignals are the signals Local forwards to the ranks.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// setProcessGroup puts the rank in its own process group so that killing it
// also kills what it started (go run's child, a shell's children), and on
// Linux gives it a parent-death signal (see setParentDeath).
func setProcessGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeath(c.SysProcAttr)
}

// diedOfSignal reports whether err is the exit of a process a signal
// killed.
func diedOfSignal(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// signalGroup sends sig to the rank's process group, or to the rank alone
// if that fails.
func signalGroup(c *exec.Cmd, sig os.Signal) {
	if c == nil || c.Process == nil {
		return
	}
	if s, ok := sig.(syscall.Signal); ok {
		if err := syscall.Kill(-c.Process.Pid, s); err == nil {
			return
		}
	}
	_ = c.Process.Signal(sig)
}
