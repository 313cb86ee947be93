//go:build linux || freebsd

package launch

import "syscall"

// setParentDeath makes the kernel SIGKILL the rank when its parent dies
// (Linux: prctl PR_SET_PDEATHSIG, which fires when the thread that started
// the rank exits; FreeBSD: procctl PROC_PDEATHSIG_CTL). Local starts the ranks from a
// goroutine locked to its thread until they are gone, so that thread exits
// only with the launcher. Go's fork code also checks, after setting it,
// that the parent is still alive, closing the race with a launcher killed
// during the fork.
func setParentDeath(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
