package swap

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

func sampleHeader() header {
	return header{order: nativeOrder, tier: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, id: 7, tag: "stage 1 forward #3",
		metas:   []meta{{dt: tensor.Float32, shape: tensor.Shape{2, 3}, n: 6}, {dt: tensor.Float64, shape: tensor.Shape{0, 5}, n: 0}},
		payload: 24}
}

// TestHeaderRoundTrip: a header decodes to what was encoded, and every
// single flipped byte is refused.
func TestHeaderRoundTrip(t *testing.T) {
	h := sampleHeader()
	b, err := encodeHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameChunk(got, h); err != nil || got.payload != 24 {
		t.Fatalf("decoded %+v: %v", got, err)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 1
		if _, err := decodeHeader(c); err == nil {
			t.Errorf("byte %d flipped: decoded", i)
		}
	}
}

// reseal fixes a header's checksum after a test changed its bytes, so
// that the decoder's other checks are reached.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crcTable))
	return b
}

// TestHeaderBounds: counts that would make the decoder allocate much, or
// overflow, are refused before any allocation.
func TestHeaderBounds(t *testing.T) {
	good, err := encodeHeader(sampleHeader())
	if err != nil {
		t.Fatal(err)
	}
	tagEnd := prefixLen + 8 + 8 + 2 + len("stage 1 forward #3")
	cases := []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"tensor count huge", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[tagEnd:], 1<<31)
			return reseal(b)
		}, "2147483648 tensors"},
		{"tensor count past the bytes", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[tagEnd:], 1000)
			return reseal(b)
		}, "1000 tensors in"},
		{"tag length huge", func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[prefixLen+16:], 60000)
			return reseal(b)
		}, "tag of 60000 bytes"},
		{"dimension overflows", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[tagEnd+4+2:], 1<<62)
			return reseal(b)
		}, "dimension 0 is 4611686018427387904"},
		{"shape overflows", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[tagEnd+4+2:], 1<<40)
			binary.LittleEndian.PutUint64(b[tagEnd+4+2+8:], 1<<40)
			return reseal(b)
		}, "overflows"},
		{"rank zero", func(b []byte) []byte { b[tagEnd+4+1] = 0; return reseal(b) }, "0 dimensions"},
		{"dtype unknown", func(b []byte) []byte { b[tagEnd+4] = 9; return reseal(b) }, "dtype code 9"},
		{"payload mismatch", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[len(b)-12:], 25)
			return reseal(b)
		}, "payload of 25 bytes, the tensors hold 24"},
		{"byte order", func(b []byte) []byte { b[10] = 3; return reseal(b) }, "byte order 3"},
		{"version", func(b []byte) []byte { b[8] = 2; return reseal(b) }, "version 2"},
		{"header length", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], maxHeaderLen+1); return reseal(b) }, "out of range"},
		{"too short", func(b []byte) []byte { return b[:10] }, "too short"},
	}
	for _, c := range cases {
		_, err := decodeHeader(c.edit(bytes.Clone(good)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// FuzzDecodeHeader: any bytes either fail to decode or decode to a header
// within the bounds that encodes back to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	good, err := encodeHeader(sampleHeader())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:prefixLen])
	f.Add([]byte(fileMagic))
	// A count and a shape chosen to overflow: sealed so the checksum passes.
	big := bytes.Clone(good)
	tagEnd := prefixLen + 8 + 8 + 2 + len("stage 1 forward #3")
	binary.LittleEndian.PutUint64(big[tagEnd+4+2:], 1<<40)
	binary.LittleEndian.PutUint64(big[tagEnd+4+2+8:], 1<<40)
	f.Add(reseal(big))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The checksum would stop almost every mutation at the door; seal
		// half the inputs so the fuzzer explores the fields behind it.
		for _, in := range [][]byte{b, resealed(b)} {
			h, err := decodeHeader(in)
			if err != nil {
				continue
			}
			if len(h.metas) > maxTensors || len(h.tag) > maxTag || h.payload < 0 {
				t.Fatalf("decoded out of bounds: %d tensors, tag %d bytes, payload %d", len(h.metas), len(h.tag), h.payload)
			}
			var total int64
			for _, m := range h.metas {
				if len(m.shape) < 1 || len(m.shape) > maxRank || m.n != m.shape.TotalSize() {
					t.Fatalf("meta %+v", m)
				}
				total += m.bytes()
			}
			if total != h.payload {
				t.Fatalf("payload %d, tensors %d", h.payload, total)
			}
			again, err := encodeHeader(h)
			if err != nil || !bytes.Equal(again, in) {
				t.Fatalf("re-encoded %x (%v), want %x", again, err, in)
			}
		}
	})
}

// resealed returns b with its header length and checksum made consistent,
// or b itself if it is too short to have them.
func resealed(b []byte) []byte {
	if len(b) < prefixLen+4 {
		return b
	}
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint32(c[12:], uint32(len(c)))
	return reseal(c)
}
