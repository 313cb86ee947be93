//go:build !unix

package launch

import (
	"os"
	"os/exec"
)

// forwardedSignals are the signals Local forwards to the ranks.
var forwardedSignals = []os.Signal{os.Interrupt}

func setProcessGroup(c *exec.Cmd) {}

// diedOfSignal is false where processes do not die of signals: the ranks'
// failures are ordered by time alone.
func diedOfSignal(error) bool { return false }

// signalGroup kills the rank, or sends it sig where the OS supports it.
func signalGroup(c *exec.Cmd, sig os.Signal) {
	if c == nil || c.Process == nil {
		return
	}
	if sig != os.Kill && c.Process.Signal(sig) == nil {
		return
	}
	_ = c.Process.Kill()
}
