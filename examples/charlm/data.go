package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
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

// fits checks that the corpus holds windows of sh for micro micro-batches:
// a training window, and evalRuns·micro·Batch distinct validation windows.
func (c *corpus) fits(sh shape, micro int) error {
	n := evalRuns * micro * sh.Batch
	if len(c.train) < sh.SeqLen+2 || len(c.valid)-sh.SeqLen-1 < n {
		return fmt.Errorf("the sampled Go sources (%d training, %d validation bytes) are too short for %d validation windows of %d tokens; use a smaller -seq or -batch", len(c.train), len(c.valid), n, sh.SeqLen+1)
	}
	return nil
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

// unigramEntropy is the entropy, in nats, of the token frequencies of t:
// the loss of the best model that ignores context.
func unigramEntropy(t []byte) float64 {
	var n [vocab]float64
	for _, v := range t {
		n[v]++
	}
	h := 0.0
	for _, c := range n {
		if c > 0 {
			p := c / float64(len(t))
			h -= p * math.Log(p)
		}
	}
	return h
}

// batches is the DataSource of one program run: micro-batch m holds Batch
// windows of SeqLen+1 tokens, its input the first SeqLen of each ([rows, 1]
// token ids) and its target the next token at each position.
type batches struct {
	dt     tensor.Dtype
	sh     shape
	inputs []*tensor.Dense
	target []*tensor.Dense
}

func newBatches(dt tensor.Dtype, sh shape, micro int) *batches {
	return &batches{dt: dt, sh: sh, inputs: make([]*tensor.Dense, micro), target: make([]*tensor.Dense, micro)}
}

// fill sets micro-batch m's windows to those starting at starts in text.
func (b *batches) fill(m int, text []byte, starts []int) {
	rows := len(starts) * b.sh.SeqLen
	x, y := make([]float64, rows), make([]float64, rows)
	for i, s := range starts {
		for j := range b.sh.SeqLen {
			x[i*b.sh.SeqLen+j] = float64(text[s+j])
			y[i*b.sh.SeqLen+j] = float64(text[s+j+1])
		}
	}
	b.inputs[m], b.target[m] = column(b.dt, x), column(b.dt, y)
}

// setTrainStep draws training step step's windows: uniform starts from a
// generator seeded by (seed, step), the same on every rank and in the
// sequential reference.
func (b *batches) setTrainStep(c *corpus, seed uint64, step int) {
	rng := nn.NewRand(seed*1_000_003 + uint64(step) + 1)
	span := len(c.train) - b.sh.SeqLen - 1
	for m := range b.inputs {
		starts := make([]int, b.sh.Batch)
		for i := range starts {
			starts[i] = rng.IntN(span)
		}
		b.fill(m, c.train, starts)
	}
}

// setEvalRun sets validation run run's windows: the validation text's
// evalRuns·M·Batch windows spaced evenly from its start, whatever the
// seed.
func (b *batches) setEvalRun(c *corpus, run int) {
	n := evalRuns * len(b.inputs) * b.sh.Batch
	gap := (len(c.valid) - b.sh.SeqLen - 1) / n
	for m := range b.inputs {
		starts := make([]int, b.sh.Batch)
		for i := range starts {
			starts[i] = ((run*len(b.inputs)+m)*b.sh.Batch + i) * gap
		}
		b.fill(m, c.valid, starts)
	}
}

func (b *batches) Input(m int) (*tensor.Dense, error)  { return b.inputs[m], nil }
func (b *batches) Target(m int) (*tensor.Dense, error) { return b.target[m], nil }

// column returns v as a [len(v), 1] tensor of dtype dt.
func column(dt tensor.Dtype, v []float64) *tensor.Dense {
	if dt == tensor.Float32 {
		w := make([]float32, len(v))
		for i, x := range v {
			w[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(len(v), 1), tensor.WithBacking(w))
	}
	return tensor.New(tensor.WithShape(len(v), 1), tensor.WithBacking(v))
}
