// Package dtype names the element types the runtime carries, with the one
// numbering every user of a dtype code shares: the transports' frame and
// message headers (runtime/internal/wire), runtime/value's views, the
// multi-tensor codec of runtime/pipe and checkpoint shards
// (runtime/checkpoint). It imports nothing, so that standard-library-only
// packages (runtime/checkpoint, linked into the ppgen binary) can use it.
package dtype

import "strconv"

// Dtype is an element type; its value is the code written to the wire and
// to files.
type Dtype uint8

// The element types, by code. 0 is no type.
const (
	Float32 Dtype = 1
	Float64 Dtype = 2
)

// Size returns the size of one element in bytes, 0 for an unknown dtype.
func (d Dtype) Size() int {
	switch d {
	case Float32:
		return 4
	case Float64:
		return 8
	}
	return 0
}

// String is "float32", "float64", or "dtype(N)" for an unknown code.
func (d Dtype) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	}
	return "dtype(" + strconv.Itoa(int(d)) + ")"
}
