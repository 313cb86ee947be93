//go:build unix

package launch

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the rank in its own process group so that killing it
// also kills what it started (go run's child, a shell's children).
func setProcessGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends SIGKILL (kill) or SIGINT to the rank's process group.
func signalGroup(c *exec.Cmd, kill bool) {
	if c == nil || c.Process == nil {
		return
	}
	sig := syscall.SIGINT
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(-c.Process.Pid, sig); err != nil {
		_ = c.Process.Signal(sig)
	}
}
