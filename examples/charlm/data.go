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
// (runtime/data). sample draws each step's windows from them with a
// Sampler, training step k's from (-seed, k) over the training shard,
// validation run k's from (0, k) over the validation shard: pure functions
// of the step, as runtime/train needs for a resumed job to read what an
// uninterrupted one reads.
type shards struct {
	dt           tensor.Dtype
	seed         uint64
	seqLen       int
	batch        int
	train, valid *data.Shard
}

// openShards opens dir's shards (prepare's). An empty dir prepares them
// from the Go sources (-goroot) into a temporary directory first, removed
// once they are open.
func openShards(o options, dt tensor.Dtype) (*shards, error) {
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
	sh := &shards{dt: dt, seed: o.seed, seqLen: o.sh.SeqLen, batch: o.sh.Batch}
	var err error
	if sh.train, err = data.Open(filepath.Join(dir, trainShard)); err != nil {
		return nil, fmt.Errorf("-data: %w (charlm prepare -out DIR writes it)", err)
	}
	if sh.valid, err = data.Open(filepath.Join(dir, validShard)); err != nil {
		sh.train.Close()
		return nil, fmt.Errorf("-data: %w (charlm prepare -out DIR writes it)", err)
	}
	return sh, nil
}

func (s *shards) close() {
	s.train.Close()
	s.valid.Close()
}

// sampled is the shards' windows for a job of replicas replicas of micro
// micro-batches each. With the same global batch (replicas·micro), the
// windows are the same, in the same global order (data.Sampler): the
// sequential reference samples the job's global batch as one replica.
type sampled struct {
	*shards
	train, valid *data.Sampler
}

func (s *shards) sample(micro, replicas int) (*sampled, error) {
	sp := &sampled{shards: s}
	for _, f := range []struct {
		shard *data.Shard
		seed  uint64
		to    **data.Sampler
	}{{s.train, s.seed, &sp.train}, {s.valid, 0, &sp.valid}} {
		cfg := data.Config{Seed: f.seed, SeqLen: s.seqLen, Batch: s.batch, Micro: micro, Replicas: replicas}
		var err error
		if *f.to, err = data.NewSampler([]*data.Shard{f.shard}, cfg); err != nil {
			return nil, fmt.Errorf("-data: %w", err)
		}
	}
	return sp, nil
}

// read returns replica's micro-batches of step step of sampler sm.
func (s *sampled) read(sm *data.Sampler, step int64, replica int) (pipe.DataSource, error) {
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

func (s *sampled) trainStep(step, replica int) (pipe.DataSource, error) {
	return s.read(s.train, int64(step), replica)
}

func (s *sampled) evalRun(run, replica int) (pipe.DataSource, error) {
	return s.read(s.valid, int64(run), replica)
}
