//go:build !linux

package nap

import "runtime"

func osYield() { runtime.Gosched() }
