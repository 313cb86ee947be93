package data

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeShard writes tokens to dir/name through a Writer and opens it.
func writeShard(t testing.TB, dir, name string, w Width, vocab uint32, tokens []uint32) *Shard {
	t.Helper()
	path := filepath.Join(dir, name)
	wr, err := Create(path, w, vocab)
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.Write(tokens); err != nil {
		t.Fatal(err)
	}
	if err := wr.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ramp(n int, mod uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i*7+3) % mod
	}
	return out
}

// TestRoundTrip: what a Writer writes (several Writes, across the 64 KiB
// buffer) a Shard reads back by any window, for both widths.
func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		w     Width
		vocab uint32
		mod   uint32
	}{{Uint16, 98, 98}, {Uint16, 0, 1 << 16}, {Uint32, 1 << 20, 1 << 20}, {Uint32, 0, 1<<32 - 1}} {
		t.Run(c.w.String(), func(t *testing.T) {
			dir := t.TempDir()
			toks := ramp(100_000, c.mod)
			path := filepath.Join(dir, "s.tok")
			wr, err := Create(path, c.w, c.vocab)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(toks); i += 30_000 {
				if err := wr.Write(toks[i:min(i+30_000, len(toks))]); err != nil {
					t.Fatal(err)
				}
			}
			if err := wr.Close(); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(HeaderSize + len(toks)*int(c.w)); st.Size() != want {
				t.Fatalf("size %d, want %d", st.Size(), want)
			}
			s, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Len() != int64(len(toks)) || s.Width() != c.w || s.Vocab() != c.vocab {
				t.Fatalf("Len %d Width %v Vocab %d", s.Len(), s.Width(), s.Vocab())
			}
			for _, win := range [][2]int{{0, 1}, {0, len(toks)}, {99_999, 1}, {12_345, 40_000}, {500, 0}, {len(toks), 0}} {
				dst := make([]uint32, win[1])
				if err := s.ReadAt(dst, int64(win[0])); err != nil {
					t.Fatal(err)
				}
				for i, v := range dst {
					if v != toks[win[0]+i] {
						t.Fatalf("window %v: token %d is %d, want %d", win, i, v, toks[win[0]+i])
					}
				}
			}
			for _, win := range [][2]int{{-1, 1}, {len(toks), 1}, {99_999, 2}} {
				if err := s.ReadAt(make([]uint32, win[1]), int64(win[0])); err == nil || !strings.Contains(err.Error(), "outside its 100000 tokens") {
					t.Errorf("window %v: %v", win, err)
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("the directory holds %d entries, want the shard alone", len(entries))
			}
		})
	}
}

// rawShard returns a shard's bytes with the given fields, the header's
// checksum computed (fixHeader) so that a later field's check is reached.
func rawShard(width uint16, vocab uint32, count uint64, tokens []byte) []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(tokens))
	copy(b, Magic)
	binary.LittleEndian.PutUint16(b[8:], Version)
	binary.LittleEndian.PutUint16(b[10:], width)
	binary.LittleEndian.PutUint32(b[12:], vocab)
	binary.LittleEndian.PutUint64(b[16:], count)
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(tokens, castagnoli))
	fixHeader(b)
	return append(b, tokens...)
}

func fixHeader(b []byte) {
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
}

// TestRefusals: every malformed shard is refused, by Open with ErrFormat
// and an error naming the file and the offending value.
func TestRefusals(t *testing.T) {
	good := rawShard(2, 10, 3, []byte{1, 0, 2, 0, 9, 0})
	edit := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	for _, c := range []struct {
		name  string
		bytes []byte
		want  string
	}{
		{"empty", nil, "0 bytes, shorter than the 32-byte header"},
		{"short header", good[:20], "20 bytes, shorter than the 32-byte header"},
		{"bad magic", edit(func(b []byte) { b[0] = 'X'; fixHeader(b) }), `magic "XPGENTOK"`},
		{"version", edit(func(b []byte) { b[8] = 2; fixHeader(b) }), "format version 2"},
		{"width 3", edit(func(b []byte) { b[10] = 3; fixHeader(b) }), "token width 3 bytes"},
		{"width 8", edit(func(b []byte) { b[10] = 8; fixHeader(b) }), "token width 8 bytes"},
		{"header checksum", edit(func(b []byte) { b[16] = 4 }), "header checksum"},
		{"vocab too wide", edit(func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 1<<16+1); fixHeader(b) }), "vocabulary 65537 does not fit uint16"},
		{"count overflow", edit(func(b []byte) { binary.LittleEndian.PutUint64(b[16:], 1<<63); fixHeader(b) }), "token count 9223372036854775808 overflows"},
		{"count overflow uint32", rawShard(4, 0, 1<<62, nil), "token count 4611686018427387904 overflows"},
		{"count too large", edit(func(b []byte) { b[16] = 4; fixHeader(b) }), "file size 38 bytes, the header's 4 uint16 tokens need 40"},
		{"truncated", good[:len(good)-1], "file size 37 bytes, the header's 3 uint16 tokens need 38"},
		{"trailing byte", append(append([]byte(nil), good...), 0), "file size 39 bytes"},
		{"checksum mismatch", edit(func(b []byte) { b[HeaderSize] = 3 }), "tokens' checksum"},
		{"token out of vocabulary", rawShard(2, 9, 3, []byte{1, 0, 2, 0, 9, 0}), "token 9 at 2 is not below the vocabulary 9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.tok")
			if err := os.WriteFile(path, c.bytes, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path)
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v; want ErrFormat naming %s and %q", err, path, c.want)
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.tok")); err == nil || !strings.Contains(err.Error(), "missing.tok") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

// TestLazy: OpenLazy accepts a shard whose body is corrupt, Verify then
// refuses it, and a window's read still refuses a token out of the
// vocabulary.
func TestLazy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lazy.tok")
	b := rawShard(2, 10, 3, []byte{1, 0, 2, 0, 9, 0})
	b[HeaderSize+2] = 12 // token 1 becomes 12: out of the vocabulary, checksum off
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := OpenLazy(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dst := make([]uint32, 1)
	if err := s.ReadAt(dst, 0); err != nil || dst[0] != 1 {
		t.Fatalf("token 0: %v, %v", dst, err)
	}
	if err := s.ReadAt(make([]uint32, 2), 1); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "token 12 at 1") {
		t.Errorf("window over token 1: %v", err)
	}
	if err := s.Verify(); !errors.Is(err, ErrFormat) {
		t.Errorf("Verify: %v", err)
	}
}

// TestWriterRefusals: bad arguments and tokens are refused, and a refused
// or aborted shard leaves the previous file as it was and no temporary
// file.
func TestWriterRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.tok")
	writeShard(t, dir, "s.tok", Uint16, 0, []uint32{1, 2, 3})
	before, _ := os.ReadFile(path)
	if _, err := Create(path, 3, 0); err == nil || !strings.Contains(err.Error(), "token width 3") {
		t.Errorf("width 3: %v", err)
	}
	if _, err := Create(path, Uint16, 1<<16+1); err == nil || !strings.Contains(err.Error(), "vocabulary 65537") {
		t.Errorf("vocab: %v", err)
	}
	for _, c := range []struct {
		w     Width
		vocab uint32
		toks  []uint32
		want  string
	}{
		{Uint16, 0, []uint32{5, 1 << 16}, "token 65536 at 1 does not fit"},
		{Uint32, 10, []uint32{9, 10}, "token 10 at 1 does not fit"},
	} {
		wr, err := Create(path, c.w, c.vocab)
		if err != nil {
			t.Fatal(err)
		}
		if err := wr.Write(c.toks); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: Write: %v", c.toks, err)
		}
		if err := wr.Close(); err == nil {
			t.Errorf("%v: Close published a refused shard", c.toks)
		}
	}
	wr, err := Create(path, Uint16, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.Write([]uint32{7, 7, 7, 7}); err != nil {
		t.Fatal(err)
	}
	wr.Abort()
	if err := wr.Close(); err == nil {
		t.Error("Close after Abort succeeded")
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(before) {
		t.Error("a refused or aborted shard changed the published one")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want the shard alone", len(entries))
	}
}
