package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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

func TestCRCPieces(t *testing.T) {
	head := crc32.Checksum([]byte("head"), castagnoli)
	for _, n := range []int{0, crcChunk, 5 * crcChunk} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		p := make([]byte, n)
		crc, err := crcPieces(head, p, false, func(b []byte, at int) error { copy(b, src[at:]); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if want := crc32.Checksum(append([]byte("head"), src...), castagnoli); crc != want {
			t.Errorf("%d bytes: crc %08x, want %08x", n, crc, want)
		}
		if !bytes.Equal(p, src) {
			t.Errorf("%d bytes: the pieces were not filled at their offsets", n)
		}
	}
	boom := errors.New("boom")
	if _, err := crcPieces(0, make([]byte, 4*crcChunk), true, func(_ []byte, at int) error {
		if at == 2*crcChunk {
			return boom
		}
		return nil
	}); err != boom {
		t.Fatalf("error %v, want boom", err)
	}
}

// TestFileReader: a fileReader's reads through its buffer and in pieces
// return the file's bytes in order with their CRC-32C, and a file shorter
// than a piece read from it is corrupt (truncated).
func TestFileReader(t *testing.T) {
	src := make([]byte, 3*crcChunk+ioBuffer/2+123)
	for i := range src {
		src[i] = byte(i * 13)
	}
	r := newFileReader(bytes.NewReader(src))
	head := make([]byte, 100)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, len(src)-200)
	crc, err := r.readChecksummed(crc32.Checksum(head, castagnoli), body)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Concat(head, body, tail); !bytes.Equal(got, src) {
		t.Fatal("the bytes read differ from the file's")
	}
	if want := crc32.Checksum(src[:len(src)-100], castagnoli); crc != want {
		t.Fatalf("crc %08x, want %08x", crc, want)
	}
	short := newFileReader(bytes.NewReader(src[:2*crcChunk]))
	if _, err := short.readChecksummed(0, make([]byte, 3*crcChunk)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading past the end: %v, want ErrCorrupt", err)
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

// TestFileWriter: a fileWriter's writes through its buffer and in pieces
// land in the file in order, with their CRC-32C.
func TestFileWriter(t *testing.T) {
	src := make([]byte, 3*crcChunk+ioBuffer/2+123)
	for i := range src {
		src[i] = byte(i * 13)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "shard"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := newFileWriter(f)
	head, body, tail := src[:100], src[100:len(src)-100], src[len(src)-100:]
	if _, err := w.Write(head); err != nil {
		t.Fatal(err)
	}
	crc, err := w.writeChecksummed(crc32.Checksum(head, castagnoli), body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(tail); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("the file differs from the bytes written")
	}
	if want := crc32.Checksum(src[:len(src)-100], castagnoli); crc != want {
		t.Fatalf("crc %08x, want %08x", crc, want)
	}
}
