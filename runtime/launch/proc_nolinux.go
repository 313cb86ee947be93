//go:build unix && !linux

package launch

import "syscall"

// setParentDeath does nothing: only Linux has a parent-death signal. The
// ranks still get the launcher's SIGINT and SIGTERM.
func setParentDeath(a *syscall.SysProcAttr) {}
