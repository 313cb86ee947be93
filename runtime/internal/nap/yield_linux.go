package nap

import "syscall"

// osYield is sched_yield(2).
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
