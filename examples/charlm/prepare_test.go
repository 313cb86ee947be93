package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/data"
)

// tinyGoroot writes a Go tree of n small source files under a temporary
// root, enough for loadCorpus.
func tinyGoroot(t *testing.T, n int) string {
	root := t.TempDir()
	for i := range n {
		dir := filepath.Join(root, "src", fmt.Sprintf("pkg%02d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		text := fmt.Sprintf("package pkg%02d\n\n// F%d\tdoubles x: ü.\nfunc F%d(x int) int { return 2 * x }\n", i, i, i)
		if err := os.WriteFile(filepath.Join(dir, "f.go"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestPrepare: `charlm prepare` writes the corpus loadCorpus samples as
// two shards, read back token for token.
func TestPrepare(t *testing.T) {
	root, out := tinyGoroot(t, 12), filepath.Join(t.TempDir(), "shards")
	var log bytes.Buffer
	if err := prepare([]string{"-out", out, "-goroot", root}, &log); err != nil {
		t.Fatal(err)
	}
	c, err := loadCorpus(root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "from 12 files of Go source") {
		t.Errorf("output:\n%s", log.String())
	}
	for name, want := range map[string][]byte{trainShard: c.train, validShard: c.valid} {
		s, err := data.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s.Len() != int64(len(want)) || s.Vocab() != vocab || s.Width() != data.Uint16 || len(want) == 0 {
			t.Fatalf("%s: %d tokens of %v, vocabulary %d; want %d", name, s.Len(), s.Width(), s.Vocab(), len(want))
		}
		got := make([]uint32, s.Len())
		if err := s.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != uint32(want[i]) {
				t.Fatalf("%s: token %d is %d, want %d", name, i, v, want[i])
			}
		}
	}
	for _, args := range [][]string{nil, {"-out", out, "extra"}, {"-out", out, "-goroot", t.TempDir()}} {
		if err := prepare(args, &log); err == nil {
			t.Errorf("prepare %q succeeded", args)
		}
	}
}
