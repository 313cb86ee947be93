package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRC32Combine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	b := make([]byte, 5000)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	for _, cut := range []int{0, 1, 7, 64, 2500, 4999, 5000} {
		a, c := b[:cut], b[cut:]
		got := crc32Combine(crc32.Checksum(a, castagnoli), crc32.Checksum(c, castagnoli), int64(len(c)))
		if want := crc32.Checksum(b, castagnoli); got != want {
			t.Errorf("cut %d: combined %08x, want %08x", cut, got, want)
		}
	}
}

func TestCRCOverlapped(t *testing.T) {
	p := make([]byte, 3*crcChunk+12345)
	for i := range p {
		p[i] = byte(i * 7)
	}
	var out bytes.Buffer
	crc, err := crcOverlapped(crc32.Checksum([]byte("head"), castagnoli), p, func(b []byte) error { _, err := out.Write(b); return err })
	if err != nil {
		t.Fatal(err)
	}
	if want := crc32.Checksum(append([]byte("head"), p...), castagnoli); crc != want {
		t.Fatalf("crc %08x, want %08x", crc, want)
	}
	if !bytes.Equal(out.Bytes(), p) {
		t.Fatal("the pieces were not passed in order")
	}
	boom := errors.New("boom")
	if _, err := crcOverlapped(0, p, func([]byte) error { return boom }); err != boom {
		t.Fatalf("error %v, want boom", err)
	}
}

// BenchmarkCRC measures CRC-32C over a 256 KiB piece summed again and
// again (from the caches: crcChunk) and over 64 MiB (from memory).
func BenchmarkCRC(b *testing.B) {
	for _, n := range []int{crcChunk, 64 << 20} {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i)
			}
			b.SetBytes(int64(n))
			for range b.N {
				crc32.Checksum(p, castagnoli)
			}
		})
	}
}
