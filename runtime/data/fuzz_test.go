package data

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpen: Open and OpenLazy never panic on any bytes, and a shard they
// accept reads every window inside it without error (Open) or with a
// clean error (OpenLazy: a token out of the vocabulary). The seed corpus
// is testdata/fuzz/FuzzOpen plus the shards below.
func FuzzOpen(f *testing.F) {
	f.Add(rawShard(2, 10, 3, []byte{1, 0, 2, 0, 9, 0}))
	f.Add(rawShard(4, 0, 2, []byte{1, 2, 3, 4, 5, 6, 7, 8}))
	f.Add(rawShard(2, 0, 1<<62, nil))
	f.Add([]byte(Magic))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "fuzz.tok")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if s, err := OpenLazy(path); err == nil {
			n := min(s.Len(), 1<<16)
			s.ReadAt(make([]uint32, n), 0)
			s.Verify()
			s.Close()
		}
		s, err := Open(path)
		if err != nil {
			return
		}
		defer s.Close()
		if int64(len(b)) != HeaderSize+s.Len()*int64(s.Width()) {
			t.Fatalf("accepted %d bytes for %d %s tokens", len(b), s.Len(), s.Width())
		}
		for off := int64(0); off < s.Len(); off += 3 {
			if err := s.ReadAt(make([]uint32, min(5, s.Len()-off)), off); err != nil {
				t.Fatalf("window at %d of a verified shard: %v", off, err)
			}
		}
	})
}
