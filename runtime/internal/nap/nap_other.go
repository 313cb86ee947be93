//go:build !linux

package nap

import "time"

func sleep(d time.Duration) { time.Sleep(d) }
