package value_test

import (
	"encoding/binary"
	"testing"

	"github.com/ppgen/ppgen/runtime/value"
)

// FuzzBuild: any dtype, shape and byte count either fails with an error
// before anything is sized, or builds a value (and its tensor) whose parts
// are exactly what was asked for. The shape is read from the input: one
// dimension per 4 bytes (int32, so negative ones occur), at most 20.
func FuzzBuild(f *testing.F) {
	f.Add(uint8(2), []byte{2, 0, 0, 0, 3, 0, 0, 0}, 48)
	f.Add(uint8(1), []byte{}, 4)
	f.Add(uint8(2), []byte{0, 0, 0, 0}, 0)
	f.Add(uint8(2), []byte{255, 255, 255, 127, 255, 255, 255, 127}, 8)
	f.Add(uint8(1), []byte{1, 0, 0, 128}, 4)
	f.Add(uint8(3), []byte{1, 0, 0, 0}, 1)
	f.Fuzz(func(t *testing.T, dt uint8, dims []byte, n int) {
		var shape []int
		for i := 0; i+4 <= len(dims) && len(shape) < 20; i += 4 {
			shape = append(shape, int(int32(binary.LittleEndian.Uint32(dims[i:]))))
		}
		size, err := value.Size(value.Dtype(dt), shape)
		if err != nil {
			return
		}
		if n < 0 || n > 1<<16 {
			n = size % (1 << 16)
		}
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		for _, m := range []value.Maker{value.Tensors{}, noView{}} {
			v, err := value.Build(m, value.Dtype(dt), shape, src)
			if n != size {
				if err == nil {
					t.Fatalf("Build(%v, %v) of %d bytes passed; want %d", dt, shape, n, size)
				}
				continue
			}
			if err != nil {
				t.Fatalf("Build(%v, %v, %d bytes): %v", dt, shape, n, err)
			}
			gdt, gshape, b, err := value.Parts(v)
			if err != nil || gdt != value.Dtype(dt) || len(gshape) != len(shape) || len(b) != n || string(b) != string(src) {
				t.Fatalf("Build(%v, %v) gave %v %v (%d bytes), %v", dt, shape, gdt, gshape, len(b), err)
			}
			if _, err := value.ToDense(v); err != nil {
				t.Fatalf("ToDense: %v", err)
			}
		}
	})
}

// noView is value.Tensors without its View: Build copies.
type noView struct{}

func (noView) Make(dt value.Dtype, shape []int) (value.Value, []byte, error) {
	return value.Tensors{}.Make(dt, shape)
}
