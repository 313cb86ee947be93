package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/data"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// The data: Go source text from the Go installation's own source tree
// ($GOROOT/src), which every machine with Go has. Nothing is downloaded.
//
// The .go files under src/ (testdata and dot directories skipped) are
// listed in path order (filepath.WalkDir's lexical order), and every
// stride-th of them, stride = files/corpusFiles, is read, its first
// maxFileBytes bytes, until corpusBytes are collected; the k-th file read
// goes to the validation text when k mod 10 == 9, else to the training
// text. The same Go installation gives the same text. Each byte
// is one token: printable ASCII (32..126) is 0..94, newline 95, tab 96,
// anything else 97.
const (
	vocab        = 98
	corpusFiles  = 400     // files to sample across the tree
	corpusBytes  = 4 << 20 // stop once this much text is read
	maxFileBytes = 16 << 10
	evalRuns     = 2 // forward-only runs per validation pass: 2 · M · Batch windows
)

// token maps a byte to its token.
func token(b byte) int {
	switch {
	case b >= 32 && b <= 126:
		return int(b) - 32
	case b == '\n':
		return 95
	case b == '\t':
		return 96
	}
	return 97
}

// corpus is the tokenized text, split in two.
type corpus struct {
	train, valid []byte // tokens, one per byte
	files        int    // files read
}

// goroot returns the Go installation's root: `go env GOROOT`, else the
// root this binary was built with.
func goroot() string {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		if r := strings.TrimSpace(string(out)); r != "" {
			return r
		}
	}
	// Deprecated, but the one fallback when no go command is on PATH.
	return runtime.GOROOT()
}

// loadCorpus samples the corpus from root/src (root "" finds GOROOT).
func loadCorpus(root string) (*corpus, error) {
	if root == "" {
		root = goroot()
	}
	src := filepath.Join(root, "src")
	if st, err := os.Stat(src); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("no Go source tree at %s (GOROOT %q): charlm trains on the Go sources; install Go with its src/ directory, or set -goroot", src, root)
	}
	var files []string
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && d.Type().IsRegular() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the Go sources under %s: %w", src, err)
	}
	if len(files) < 10 {
		return nil, fmt.Errorf("only %d .go files under %s: the Go source tree looks incomplete", len(files), src)
	}
	stride := max(1, len(files)/corpusFiles)
	c := &corpus{}
	var train, valid bytes.Buffer
	for i := 0; i < len(files) && train.Len()+valid.Len() < corpusBytes; i += stride {
		text, err := readHead(files[i], maxFileBytes)
		if err != nil {
			return nil, err
		}
		if c.files%10 == 9 {
			valid.Write(text)
		} else {
			train.Write(text)
		}
		c.files++
	}
	c.train, c.valid = tokens(train.Bytes()), tokens(valid.Bytes())
	return c, nil
}

// readHead returns the first n bytes of the file at path (all of it when
// shorter).
func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	k, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return buf[:k], nil
}

func tokens(text []byte) []byte {
	out := make([]byte, len(text))
	for i, b := range text {
		out[i] = byte(token(b))
	}
	return out
}

// shards is the job's data: the token shards `charlm prepare` writes
// (runtime/data), each step's windows drawn by a Sampler from (-seed,
// step) over the training shard, validation run k's from (0, k) over the
// validation shard: pure functions of the step, as runtime/train needs
// for a resumed job to read what an uninterrupted one reads.
type shards struct {
	dt           tensor.Dtype
	seqLen       int
	train, valid *data.Sampler
	files        []*data.Shard
}

// openShards opens dir's shards (prepare's), for micro micro-batches a
// step. An empty dir prepares them from the Go sources (-goroot) into a
// temporary directory first, which close removes.
func openShards(o options, dt tensor.Dtype, micro int) (*shards, error) {
	dir := o.data
	if dir == "" {
		tmp, err := os.MkdirTemp("", "charlm-data")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp) // the shards stay open
		if err := prepare([]string{"-out", tmp, "-goroot", o.goroot}, io.Discard); err != nil {
			return nil, err
		}
		dir = tmp
	}
	sh := &shards{dt: dt, seqLen: o.sh.SeqLen}
	for _, f := range []struct {
		name string
		seed uint64
		to   **data.Sampler
	}{{trainShard, o.seed, &sh.train}, {validShard, 0, &sh.valid}} {
		s, err := data.Open(filepath.Join(dir, f.name))
		if err != nil {
			sh.close()
			return nil, fmt.Errorf("-data: %w (charlm prepare -out DIR writes it)", err)
		}
		sh.files = append(sh.files, s)
		cfg := data.Config{Seed: f.seed, SeqLen: o.sh.SeqLen, Batch: o.sh.Batch, Micro: micro, Replicas: 1}
		if *f.to, err = data.NewSampler([]*data.Shard{s}, cfg); err != nil {
			sh.close()
			return nil, fmt.Errorf("-data %s: %w", f.name, err)
		}
	}
	return sh, nil
}

func (s *shards) close() {
	for _, f := range s.files {
		f.Close()
	}
}

// read returns the micro-batches of step step of sampler sm.
func (s *shards) read(sm *data.Sampler, step int64, replica int) (pipe.DataSource, error) {
	st, err := sm.Read(step, replica)
	if err != nil {
		return nil, err
	}
	src, err := data.NewSource(s.dt, s.seqLen)
	if err != nil {
		return nil, err
	}
	return src, src.Set(st)
}

func (s *shards) trainStep(step, replica int) (pipe.DataSource, error) {
	return s.read(s.train, int64(step), replica)
}

func (s *shards) evalRun(run, replica int) (pipe.DataSource, error) {
	return s.read(s.valid, int64(run), replica)
}
