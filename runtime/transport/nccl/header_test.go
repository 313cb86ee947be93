package nccl

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/transport"
)

func TestDecodeHeader(t *testing.T) {
	tag := transport.Tag{Stage: 3, Micro: 7}
	for _, c := range []struct {
		name  string
		v     []float64
		bytes int64
		err   string
	}{
		{"matrix", []float64{hdrMagic, 1, dtFloat32, 2, 3}, 24, ""},
		{"scalar", []float64{hdrMagic, 0, dtFloat64}, 8, ""},
		{"empty", []float64{hdrMagic, 2, dtFloat64, 4, 0, 5}, 0, ""},
		{"short", []float64{hdrMagic, 0}, 0, "header of 2 values"},
		{"magic", []float64{1, 0, dtFloat32}, 0, "header magic 1"},
		{"channel", []float64{hdrMagic, 3, dtFloat32}, 0, "header channel 3"},
		{"dtype", []float64{hdrMagic, 0, 9}, 0, "header dtype 9"},
		{"negative", []float64{hdrMagic, 0, dtFloat32, -1}, 0, "header dimension 0 is -1"},
		{"fraction", []float64{hdrMagic, 0, dtFloat32, 1.5}, 0, "header dimension 0 is 1.5"},
		{"nan", []float64{hdrMagic, 0, dtFloat32, math.NaN()}, 0, "header dimension 0 is NaN"},
		{"too large", []float64{hdrMagic, 0, dtFloat64, 1 << 20, 1 << 20}, 0, "over this rank's cap of 1073741824 bytes"},
		{"too many dims", append([]float64{hdrMagic, 0, dtFloat32}, make([]float64, 17)...), 0, "header of 20 values"},
		// 0×(2^30)^15: empty, but its other dimensions would size strides of
		// 2^450 bytes; the control connection once accepted it where TCP
		// refused it (issue 35): both now ask runtime/internal/wire.Shape.
		{"empty over the cap", append([]float64{hdrMagic, 0, dtFloat32, 0}, slices.Repeat([]float64{1 << 30}, 15)...), 0, "shape overflows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := decodeHeader(tag, c.v, 1<<30)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.bytes != c.bytes || h.tag != tag {
				t.Errorf("bytes %d tag %v, want %d %v", h.bytes, h.tag, c.bytes, tag)
			}
			if got := encodeHeader(h); !slices.Equal(got, c.v) {
				t.Errorf("re-encoded %v, want %v", got, c.v)
			}
		})
	}
}

// FuzzDecodeHeader: whatever a peer sends as a header, decoding neither
// panics nor accepts a payload over the cap, and what it accepts encodes
// back to the same values.
func FuzzDecodeHeader(f *testing.F) {
	enc := func(v ...float64) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
		}
		return b
	}
	f.Add(enc(hdrMagic, 1, dtFloat32, 2, 3))
	f.Add(enc(hdrMagic, 0, dtFloat64))
	f.Add(enc(hdrMagic, 2, dtFloat64, 0, 1e300))
	f.Add(enc(hdrMagic, 0, dtFloat32, 65536, 65536, 65536))
	const maxBytes = 1 << 20
	f.Fuzz(func(t *testing.T, b []byte) {
		v := make([]float64, len(b)/8)
		for i := range v {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		h, err := decodeHeader(transport.Tag{}, v, maxBytes)
		if err != nil {
			return
		}
		if h.bytes < 0 || h.bytes > maxBytes {
			t.Fatalf("accepted %d bytes, cap %d", h.bytes, maxBytes)
		}
		n := int64(4)
		if h.dt == dtFloat64 {
			n = 8
		}
		for _, d := range h.dims {
			n *= int64(d)
		}
		if n != h.bytes {
			t.Fatalf("bytes %d, shape %v says %d", h.bytes, h.dims, n)
		}
		if got := encodeHeader(h); !slices.Equal(got, v) {
			t.Fatalf("re-encoded %v, want %v", got, v)
		}
	})
}

// FuzzDecodeGroupID: whatever a peer sends as a group's id, decoding
// neither panics nor accepts a member outside the world, and what it
// accepts encodes back to the same values.
func FuzzDecodeGroupID(f *testing.F) {
	enc := func(v []float64) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
		}
		return b
	}
	var id uniqueID
	for i := range id.internal {
		id.internal[i] = uint8(i * 7)
	}
	f.Add(enc(encodeGroupID(id, []int{0, 1})))
	f.Add(enc(encodeGroupID(id, []int{3})))
	f.Add(enc(append(encodeGroupID(id, []int{2}), 1e300)))
	f.Add(enc(encodeGroupID(id, nil)))
	const world = 4
	f.Fuzz(func(t *testing.T, b []byte) {
		v := make([]float64, len(b)/8)
		for i := range v {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		id, ranks, err := decodeGroupID(v, world)
		if err != nil {
			return
		}
		if len(ranks) < 1 || len(ranks) > world {
			t.Fatalf("accepted %d members, world %d", len(ranks), world)
		}
		for _, r := range ranks {
			if r < 0 || r >= world {
				t.Fatalf("accepted member %d, world %d", r, world)
			}
		}
		if got := encodeGroupID(id, ranks); !slices.Equal(got, v) {
			t.Fatalf("re-encoded %v, want %v", got, v)
		}
	})
}
