//go:build unix && !linux && !freebsd

package launch

import "syscall"

// setParentDeath does nothing: only Linux and FreeBSD have a parent-death signal. The
// ranks still get the launcher's SIGINT and SIGTERM.
func setParentDeath(a *syscall.SysProcAttr) {}
