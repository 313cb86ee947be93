//go:build !unix

package nap

import "time"

func sleep(d time.Duration) { time.Sleep(d) }
