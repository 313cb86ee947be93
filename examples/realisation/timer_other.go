//go:build !linux

package main

import "time"

// preciseSleep is time.Sleep where there is no timerfd.
func preciseSleep(d time.Duration) { time.Sleep(d) }

// defaultSpin is spinMargin's default: time.Sleep wakes up to ~1 ms late.
const defaultSpin = time.Millisecond
