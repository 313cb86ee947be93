//go:build !unix

package launch

import (
	"os"
	"os/exec"
)

func setProcessGroup(c *exec.Cmd) {}

// signalGroup kills the rank (interrupting it where the OS supports it).
func signalGroup(c *exec.Cmd, kill bool) {
	if c == nil || c.Process == nil {
		return
	}
	if !kill && c.Process.Signal(os.Interrupt) == nil {
		return
	}
	_ = c.Process.Kill()
}
