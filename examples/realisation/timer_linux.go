package main

import (
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// preciseSleep blocks the calling goroutine for d on a timerfd, which the Go
// netpoller waits for like any other file: the wake-up is the kernel's
// high-resolution timer (tens of µs late here), not the millisecond timeout
// of epoll_pwait that time.Sleep ends up in when a process's threads are
// idle (a 2 ms time.Sleep wakes ~250 µs late on this VM). The goroutine
// is parked meanwhile, so its P runs the comm goroutines and polls the
// network. timerfds come from a pool, one per concurrent sleeper; if one
// cannot be made, it falls back to time.Sleep.
func preciseSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t, ok := timerfds.Get().(*timerfd)
	if !ok || t == nil {
		if t = newTimerfd(); t == nil {
			time.Sleep(d)
			return
		}
	}
	if !t.sleep(d) {
		t.f.Close()
		time.Sleep(d)
		return
	}
	timerfds.Put(t)
}

var timerfds sync.Pool

type timerfd struct {
	f   *os.File
	buf [8]byte
}

type itimerspec struct{ interval, value syscall.Timespec }

func newTimerfd() *timerfd {
	const clockMonotonic = 1
	fd, _, errno := syscall.RawSyscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return nil
	}
	// A non-blocking descriptor: os.NewFile registers it with the netpoller.
	return &timerfd{f: os.NewFile(fd, "timerfd")}
}

// sleep arms the timer for d and waits for it to expire.
func (t *timerfd) sleep(d time.Duration) bool {
	spec := itimerspec{value: syscall.NsecToTimespec(int64(d))}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_TIMERFD_SETTIME, t.f.Fd(), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
		return false
	}
	_, err := t.f.Read(t.buf[:])
	return err == nil
}

// defaultSpin is spinMargin's default: a timerfd wakes ~90 µs late at the
// median here, but up to a few hundred µs when the machine is idle.
const defaultSpin = 500 * time.Microsecond
