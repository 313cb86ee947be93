package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ppgen/ppgen/runtime/data"
)

// Shard names of `charlm prepare`: the training and the validation text
// of loadCorpus, one token per byte, as uint16 token shards of vocabulary
// vocab (docs/data.md).
const (
	trainShard = "train.tok"
	validShard = "valid.tok"
)

// prepare is `charlm prepare -out DIR [-goroot ROOT]`: it samples the
// corpus as training does and writes it to DIR as token shards.
func prepare(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("charlm prepare", flag.ContinueOnError)
	fs.SetOutput(out)
	dir := fs.String("out", "", "directory to write "+trainShard+" and "+validShard+" to (created if missing)")
	root := fs.String("goroot", "", "the Go installation whose src/ is the text (default: `go env GOROOT`)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: charlm prepare -out DIR [-goroot ROOT]")
	}
	c, err := loadCorpus(*root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		text []byte
	}{{trainShard, c.train}, {validShard, c.valid}} {
		path := filepath.Join(*dir, s.name)
		if err := writeTokens(path, s.text); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s: %d tokens (uint16, vocabulary %d)\n", path, len(s.text), vocab)
	}
	fmt.Fprintf(out, "from %d files of Go source\n", c.files)
	return nil
}

// writeTokens writes text's tokens (one per byte) to a shard at path.
func writeTokens(path string, text []byte) error {
	w, err := data.Create(path, data.Uint16, vocab)
	if err != nil {
		return err
	}
	buf := make([]uint32, 0, 1<<16)
	for len(text) > 0 {
		n := min(len(text), cap(buf))
		buf = buf[:n]
		for i, t := range text[:n] {
			buf[i] = uint32(t)
		}
		if err := w.Write(buf); err != nil {
			w.Abort()
			return err
		}
		text = text[n:]
	}
	return w.Close()
}
