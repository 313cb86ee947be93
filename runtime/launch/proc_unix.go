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
// killed, or of a shell reporting that a signal killed its command: exit
// status 128+N, N a signal that kills without the process asking (SIGKILL,
// a crash's SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT), as a rank started as
// `sh -c 'trainer ...'` reports its trainer's death.
func diedOfSignal(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok {
		return false
	}
	if ws.Signaled() {
		return true
	}
	switch syscall.Signal(ws.ExitStatus() - 128) {
	case syscall.SIGKILL, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT:
		return true
	}
	return false
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
