package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/examples/internal/compare"
	"github.com/ppgen/ppgen/internal/long"
	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/train"
)

// small is a model and batch size that trains in a fraction of a second a
// step (the default run's blocks, so that zbv's 8 stages are filled).
func small() options {
	o := defaultOptions()
	o.sh = shape{Dim: 16, Heads: 2, Hidden: 64, Blocks: 8, SeqLen: 16, Batch: 1}
	o.steps, o.evalEvery, o.logEvery = 3, 2, 1
	return o
}

var validationLine = regexp.MustCompile(`(?m)^validation loss (\d+\.\d{4})$`)

// validationLosses returns the figures of out's `validation loss X` lines.
func validationLosses(t *testing.T, out string) []float64 {
	t.Helper()
	var ls []float64
	for _, m := range validationLine.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, v)
	}
	return ls
}

// TestCheckInProc: pipeline training equals sequential training (the tied
// table one parameter there) in losses, validation losses and parameters,
// for the tied zbv run (the tie on rank 0), an untied one and 1f1b tied
// (across ranks) and untied, in float64 and float32, and zbv with two
// data-parallel replicas (the reference on their global batch);
// one validation line before training and after each evaluation.
func TestCheckInProc(t *testing.T) {
	for _, c := range []struct {
		schedule, dtype string
		tie             bool
		dp              int
	}{
		{"zbv", "float64", true, 1},
		{"zbv", "float64", false, 1},
		{"zbv", "float32", true, 1},
		{"1f1b", "float64", false, 1},
		{"1f1b", "float64", true, 1}, // the tie across ranks 0 and 3
		{"zbv", "float64", true, 2},  // two replicas: 8 ranks
	} {
		t.Run(fmt.Sprintf("%s/%s/tie=%v/dp=%d", c.schedule, c.dtype, c.tie, c.dp), func(t *testing.T) {
			o := small()
			o.schedule, o.dtype, o.tie, o.check, o.dp = c.schedule, c.dtype, c.tie, true, c.dp
			var out bytes.Buffer
			if err := run(o, &out, nil); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "check: max abs difference") {
				t.Fatalf("no check line:\n%s", out.String())
			}
			// Before training, after step 2 (-eval-every 2) and at the end (3).
			if got := validationLosses(t, out.String()); len(got) != 3 {
				t.Errorf("%d validation lines, want 3:\n%s", len(got), out.String())
			}
		})
	}
}

// TestCheckCatchesDivergence: -check is not vacuous: a reference trained
// with another learning rate, another seed or without clipping fails it.
func TestCheckCatchesDivergence(t *testing.T) {
	o := small()
	o.clip = 0.05 // so that clipping acts
	for name, mod := range map[string]func(*options){
		"lr":   func(o *options) { o.lr *= 1.5 },
		"seed": func(o *options) { o.seed++ },
		"clip": func(o *options) { o.clip = 0 },
	} {
		res, sh := trainSmall(t, o)
		o2 := o
		mod(&o2)
		var out bytes.Buffer
		if err := check(o2, &out, sh, 8, res); err == nil {
			t.Errorf("%s: a different reference passed the check:\n%s", name, out.String())
		}
		if err := check(o, io.Discard, sh, 8, res); err != nil {
			t.Errorf("the same reference: %v", err)
		}
		sh.close()
	}
}

// trainSmall trains o in-process and returns the result and the shards.
func trainSmall(t *testing.T, o options) (*train.Result, *shards) {
	t.Helper()
	sc, err := lookup(o.schedule)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := openShards(o, mustDtype(t, o))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := jobConfig(o, sc, sh, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := train.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res, sh
}

// TestTiedCopiesStayOne: after training, the head's copy of the token
// table (layer Blocks+1's) has the embedding's bits, and an untied run
// ends elsewhere.
func TestTiedCopiesStayOne(t *testing.T) {
	o := small()
	res, sh := trainSmall(t, o)
	defer sh.close()
	tok := res.Layers[0][0]
	head := res.Layers[o.sh.Blocks+1]
	cp := head[len(head)-1]
	if tok == cp {
		t.Fatal("the head holds the embedding's own table, not a copy")
	}
	x, y := compare.Floats(tok.Value), compare.Floats(cp.Value)
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("entry %d: embedding %v, head copy %v", i, x[i], y[i])
		}
	}
	o.tie = false
	u, sh2 := trainSmall(t, o)
	defer sh2.close()
	if maxAbsDiff(u.Layers[0][0].Value, tok.Value) == 0 {
		t.Error("tied and untied training gave the same token table")
	}
}

// TestValidationLossFalls: a short run's validation loss starts near
// ln(vocab) and ends below the cross-entropy of the validation text under
// the training text's character frequencies (add-one smoothed), computed
// here from the counts: the best model that ignores context, so the model
// has learned from context. By default a narrow model on sequences of 48
// (3.62 against the bound 3.70); PPGEN_LONG=1 trains the wider one on
// batches of 2 sequences of 64 (3.64), four times the work.
func TestValidationLossFalls(t *testing.T) {
	o := small()
	o.sh = shape{Dim: 16, Heads: 2, Hidden: 64, Blocks: 8, SeqLen: 48, Batch: 1}
	if long.Enabled() {
		o.sh = shape{Dim: 32, Heads: 4, Hidden: 128, Blocks: 8, SeqLen: 64, Batch: 2}
	}
	o.steps, o.evalEvery, o.lr = 30, 30, 0.01
	var out bytes.Buffer
	if err := run(o, &out, nil); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	c, err := loadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	var n [256]float64
	for _, b := range c.train {
		n[b]++
	}
	bound := 0.0
	for _, b := range c.valid {
		bound -= math.Log((n[b] + 1) / float64(len(c.train)+vocab))
	}
	bound /= float64(len(c.valid))
	ls := validationLosses(t, out.String())
	if len(ls) != 2 {
		t.Fatalf("%d validation lines, want 2:\n%s", len(ls), out.String())
	}
	t.Logf("validation loss %.4f -> %.4f; context-free bound %.4f", ls[0], ls[1], bound)
	if math.Abs(ls[0]-math.Log(vocab)) > 0.5 || ls[1] >= bound {
		t.Errorf("validation loss %.4f -> %.4f; want it to start near ln %d = %.4f and end below %.4f, the context-free cross-entropy\n%s", ls[0], ls[1], vocab, math.Log(vocab), bound, out.String())
	}
}

// TestDataDeterministic: two loads sample the same text, the batches of a
// step depend only on the seed and the step, the validation windows on
// neither, and the token map is the documented one.
func TestDataDeterministic(t *testing.T) {
	for b, want := range map[byte]int{' ': 0, 'A': 33, '~': 94, '\n': 95, '\t': 96, 0: 97, '\r': 97, 0xc3: 97} {
		if got := token(b); got != want {
			t.Errorf("token(%q) = %d, want %d", b, got, want)
		}
	}
	c1, err := loadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	c2, err := loadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c1.train, c2.train) || !bytes.Equal(c1.valid, c2.valid) || len(c1.valid) == 0 || len(c1.train) < 10*len(c1.valid)/2 {
		t.Fatalf("two samplings differ or are degenerate: %d/%d and %d/%d bytes", len(c1.train), len(c1.valid), len(c2.train), len(c2.valid))
	}
	for _, v := range c1.train {
		if int(v) >= vocab {
			t.Fatalf("token %d outside the vocabulary of %d", v, vocab)
		}
	}
	o := small()
	batch := func(seed uint64, step int, eval bool) []float64 {
		o := o
		o.seed = seed
		shs, err := openShards(o, mustDtype(t, o))
		if err != nil {
			t.Fatal(err)
		}
		defer shs.close()
		sh, err := shs.sample(8, 1)
		if err != nil {
			t.Fatal(err)
		}
		read := sh.trainStep
		if eval {
			read = sh.evalRun
		}
		src, err := read(step, 0)
		if err != nil {
			t.Fatal(err)
		}
		var v []float64
		for m := range 8 {
			x, _ := src.Input(m)
			y, _ := src.Target(m)
			v = append(v, compare.Floats(x)...)
			v = append(v, compare.Floats(y)...)
		}
		return v
	}
	same := func(a, b []float64) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
	if !same(batch(1, 3, false), batch(1, 3, false)) {
		t.Error("step 3's batches differ between two draws")
	}
	if same(batch(1, 3, false), batch(1, 4, false)) || same(batch(1, 3, false), batch(2, 3, false)) {
		t.Error("the batches do not change with the step or the seed")
	}
	if !same(batch(1, 0, true), batch(2, 0, true)) || same(batch(1, 0, true), batch(1, 1, true)) {
		t.Error("validation windows depend on the seed, or runs 0 and 1 are the same")
	}
	// A target is its input shifted by one character.
	v := batch(1, 0, false)
	n := o.sh.Batch * o.sh.SeqLen
	x, y := v[:n], v[n:2*n]
	for j := 1; j < o.sh.SeqLen; j++ {
		if y[j-1] != x[j] {
			t.Fatalf("target %d is %v, the next input %v", j-1, y[j-1], x[j])
		}
	}
}

// TestNoGoSource: a root without src/ is a clear error.
func TestNoGoSource(t *testing.T) {
	_, err := loadCorpus(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "no Go source tree") {
		t.Errorf("got %v, want an error saying there is no Go source tree", err)
	}
}

// TestFlagErrors: flag values the run cannot take are errors naming them.
func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		mod  func(*options)
		want string
	}{
		{func(o *options) { o.schedule = "gpipe" }, "not compiled in"},
		{func(o *options) { o.dtype = "int8" }, "-dtype"},
		{func(o *options) { o.sh.Blocks = 4 }, "-blocks 8"},
		{func(o *options) { o.sh.Dim = 30 }, "heads"},
		{func(o *options) { o.transport = "mpi" }, "-transport"},
		{func(o *options) { o.evalEvery = 0 }, "-eval-every"},
	} {
		o := defaultOptions()
		c.mod(&o)
		err := o.validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", err, c.want)
		}
	}
}

// TestSVG: the loss curve is well-formed XML, an <svg> with a polyline per
// curve holding a point per step and per evaluation, and axis labels.
func TestSVG(t *testing.T) {
	nan := math.NaN()
	var recs []metrics.Record
	for i, l := range []float64{nan, 4.6, 4.1, 3.5, 3.2} {
		ev := map[int]float64{0: 4.7, 2: 3.6, 4: 3.1}[i]
		if ev == 0 {
			ev = nan
		}
		recs = append(recs, metrics.Record{Step: int64(i), Loss: l, EvalLoss: ev})
	}
	var b bytes.Buffer
	if err := writeSVG(&b, recs); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	var root string
	var polylines []int
	texts := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = e.Name.Local
				if e.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q", e.Name.Space)
				}
			}
			if e.Name.Local == "polyline" {
				for _, a := range e.Attr {
					if a.Name.Local == "points" {
						polylines = append(polylines, len(strings.Fields(a.Value)))
					}
				}
			}
		case xml.CharData:
			texts += string(e) + "|"
		}
	}
	if root != "svg" || fmt.Sprint(polylines) != "[4 3]" {
		t.Errorf("root <%s>, polylines of %v points; want <svg> and [4 3]", root, polylines)
	}
	for _, want := range []string{"training step", "loss (nats per character)", "training loss", "validation loss"} {
		if !strings.Contains(texts, want) {
			t.Errorf("no text %q in %s", want, texts)
		}
	}
	if err := writeSVG(io.Discard, nil); err == nil {
		t.Error("an empty history drew a curve")
	}
}

// buildExample builds this command once per test binary run.
var buildExample = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "charlm-test")
	if err != nil {
		return "", err
	}
	exampleDir = dir // TestMain removes it
	bin := filepath.Join(dir, "charlm")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// TestTCPCheck: 4 OS processes on loopback (the command's own launcher)
// train exactly as sequential training; the rank holding the last stage
// prints the validation lines and writes the SVG.
func TestTCPCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example and starts OS processes")
	}
	bin, err := buildExample()
	if err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(t.TempDir(), "loss.svg")
	cmd := exec.Command(bin, "-transport", "tcp", "-check", "-steps", "2", "-eval-every", "1", "-dim", "16", "-seq", "16", "-batch", "1", "-svg", svg)
	cmd.Env = withoutRankEnv(os.Environ())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := strings.Count(string(out), "check: max abs difference"); got != 4 {
		t.Fatalf("%d ranks reported a check, want 4:\n%s", got, out)
	}
	if got := len(regexp.MustCompile(`(?m)^\[rank 0\] validation loss \d+\.\d{4}$`).FindAll(out, -1)); got != 3 {
		t.Errorf("%d validation lines from rank 0, want 3:\n%s", got, out)
	}
	if _, err := os.Stat(svg); err != nil {
		t.Errorf("no SVG: %v", err)
	}
}

func withoutRankEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k := strings.SplitN(kv, "=", 2)[0]
		switch k {
		case "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "PPGEN_TOKEN":
			continue
		}
		if strings.HasPrefix(k, "OMPI_COMM_WORLD_") || strings.HasPrefix(k, "PMI_") || strings.HasPrefix(k, "SLURM_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func mustDtype(tb testing.TB, o options) tensor.Dtype {
	tb.Helper()
	dt, err := o.dt()
	if err != nil {
		tb.Fatal(err)
	}
	return dt
}

// TestResume: 4 steps, or 2 steps (-stop-after 2), a checkpoint and 2
// more resumed from it (-resume), print the same losses and write the same metrics for
// steps 3 and 4 (float64: bit for bit); resumed under 1f1b, the same
// printed losses.
func TestResume(t *testing.T) {
	dir := t.TempDir()
	job := func(stop int, ckpt, resume, metricsFile string, schedule ...string) string {
		o := small()
		if schedule != nil {
			o.schedule = schedule[0]
		}
		o.steps, o.stopAfter, o.evalEvery, o.logEvery, o.ckpt, o.resume, o.metrics = 4, stop, 2, 1, ckpt, resume, metricsFile
		o.config = map[string]string{}
		var out bytes.Buffer
		if err := run(o, &out, nil); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return out.String()
	}
	whole := job(0, "", "", filepath.Join(dir, "whole.jsonl"))
	job(2, filepath.Join(dir, "ck"), "", "")
	resumed := job(0, "", filepath.Join(dir, "ck"), filepath.Join(dir, "resumed.jsonl"))
	tail := func(s, from string) string { return s[strings.Index(s, from):] }
	if a, b := tail(whole, "step 3 loss"), tail(resumed, "step 3 loss"); a != b {
		t.Fatalf("resumed run printed\n%s\nthe uninterrupted one\n%s", b, a)
	}
	// Resumed under 1f1b (4 stages, its tie across ranks 0 and 3): the
	// same losses to the 4 decimals printed.
	if a, b := tail(whole, "step 3 loss"), tail(job(0, "", filepath.Join(dir, "ck"), "", "1f1b"), "step 3 loss"); a != b {
		t.Fatalf("resumed under 1f1b, the run printed\n%s\nthe uninterrupted zbv one\n%s", b, a)
	}
	read := func(name string) []metrics.Record {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		recs, err := metrics.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	w, r := read("whole.jsonl"), read("resumed.jsonl")
	if len(w) != 5 || len(r) != 2 {
		t.Fatalf("%d and %d metrics lines, want 5 (an evaluation and 4 steps) and 2", len(w), len(r))
	}
	for i, rec := range r {
		want := w[3+i]
		if rec.Step != want.Step || rec.Loss != want.Loss || rec.LR != want.LR || rec.GradNorm != want.GradNorm || rec.Tokens != want.Tokens || !(rec.EvalLoss == want.EvalLoss || math.IsNaN(rec.EvalLoss) && math.IsNaN(want.EvalLoss)) {
			t.Fatalf("resumed step %+v, uninterrupted %+v", rec, want)
		}
	}
}

// TestRealise: -realise on the small model prints a row per measured step
// and the per-rank breakdown, its ratios finite and positive, and the
// simulator's compute at the calls' means equal to the calls' measured
// sum on every rank (the same calls, charged as they ran).
func TestRealise(t *testing.T) {
	o := small()
	o.steps, o.realise = 3, true
	var out bytes.Buffer
	if err := realise(o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	m := regexp.MustCompile(`ratio ([0-9.]+) to the program alone at the medians, ([0-9.]+) with the host work, ([0-9.]+) on [0-9]+ shared cores, ([0-9.]+) at the means, ratio-eff ([0-9.]+) at each call`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no median line:\n%s", s)
	}
	for _, v := range m[1:] {
		if f, err := strconv.ParseFloat(v, 64); err != nil || !(f > 0) || math.IsInf(f, 0) {
			t.Errorf("ratio %q; want a positive number\n%s", v, s)
		}
	}
	rows := regexp.MustCompile(`(?m)^\s+([0-3])\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s`).FindAllStringSubmatch(s[strings.Index(s, "per rank"):], -1)
	if len(rows) != 4 {
		t.Fatalf("%d rank rows, want 4:\n%s", len(rows), s)
	}
	for _, r := range rows {
		got, _ := strconv.ParseFloat(r[3], 64)
		sim, _ := strconv.ParseFloat(r[4], 64)
		if math.Abs(got-sim) > 0.11 { // both rounded to 0.1 ms
			t.Errorf("rank %s: compute %s ms measured, %s simulated at the means; want equal\n%s", r[1], r[3], r[4], s)
		}
	}
	o.steps = 1
	if err := realise(o, io.Discard); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("-realise -steps 1: err = %v; want one asking for more steps", err)
	}
}
