//go:build !unix

package launch

import "os/exec"

// LauncherVar names the launcher's pipe on Unix; elsewhere ranks are not
// given one.
const LauncherVar = "PPGEN_LAUNCHER"

type watchPipe struct{}

func newWatchPipe() (*watchPipe, error) { return nil, nil }
func (p *watchPipe) give(*exec.Cmd)     {}
func (p *watchPipe) closeRead()         {}
func (p *watchPipe) close()             {}

// WatchLauncher does nothing where there are no inherited pipes to watch:
// it reports false.
func WatchLauncher() bool { return false }
