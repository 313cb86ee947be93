package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
)

// TestEvalAndMetrics evaluates with the forward-only program every two
// steps and at the end, and writes the metrics: the JSON lines read back
// as the records Run returns, with the validation loss on the steps that
// evaluated, and a resumed job evaluates as the uninterrupted one.
func TestEvalAndMetrics(t *testing.T) {
	job := func(steps int, ckpt, resume string, out *bytes.Buffer) *train.Result {
		c := config(onef1b, 1, steps)
		c.Eval, c.EvalEvery, c.EvalRuns = &eval, 2, 2
		c.EvalData = func(run, replica int) (pipe.DataSource, error) { return data(8)(-1-run, replica) }
		c.CheckpointDir, c.Resume = ckpt, resume
		if out != nil {
			c.Metrics = out
		}
		var evals []int
		c.Hooks.AfterEval = func(rank, step int, loss float64) error {
			if rank == 0 {
				evals = append(evals, step)
			}
			return nil
		}
		res := run(t, c)
		want := []int{0, 2, 4, 5}
		if resume != "" {
			want = []int{4, 5}
		}
		if len(evals) != len(want) {
			t.Fatalf("AfterEval after steps %v, want %v", evals, want)
		}
		for i := range want {
			if evals[i] != want[i] {
				t.Fatalf("AfterEval after steps %v, want %v", evals, want)
			}
		}
		return res
	}
	var out bytes.Buffer
	dir := t.TempDir()
	whole := job(5, "", "", &out)
	recs, err := metrics.ReadAll(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 6 || len(whole.Records) != 6 {
		t.Fatalf("%d metrics lines and %d records, want 6 (step 0's evaluation and 5 steps)", len(recs), len(whole.Records))
	}
	for i, r := range recs {
		w := whole.Records[i]
		if r.Step != int64(i) || !eq(r.Loss, w.Loss) || !eq(r.EvalLoss, w.EvalLoss) || !eq(r.LR, w.LR) || r.Tokens != w.Tokens {
			t.Fatalf("line %d: %+v, record %+v", i, r, w)
		}
		if evaluated := i%2 == 0 || i == 5; evaluated == math.IsNaN(r.EvalLoss) {
			t.Fatalf("step %d: eval loss %v", i, r.EvalLoss)
		}
	}
	if !(recs[5].EvalLoss < recs[0].EvalLoss) {
		t.Fatalf("validation loss %v after training, %v before", recs[5].EvalLoss, recs[0].EvalLoss)
	}
	ck := filepath.Join(dir, "ck")
	c := config(onef1b, 1, 5)
	c.CheckpointDir, c.StopAfter = ck, 3
	run(t, c)
	resumed := job(5, "", ck, nil)
	for i, r := range resumed.Records {
		w := whole.Records[4+i]
		if r.Step != w.Step || !eq(r.Loss, w.Loss) || !eq(r.EvalLoss, w.EvalLoss) {
			t.Fatalf("resumed record %+v, uninterrupted %+v", r, w)
		}
	}
}

// eq is bit equality, NaN equal to NaN.
func eq(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// tiedLayer builds the model of a -tie 0:3 program: layer 0's and layer
// 7's weights are one parameter, a copy on each stage, starting from the
// same values.
func tiedLayer(i int) (nn.Layer, error) {
	l, err := layer(i)
	if err != nil || (i != 0 && i != layers-1) {
		return l, err
	}
	seq := l.(*nn.Sequential)
	lin := seq.Layers[0].(*nn.Linear)
	if i == layers-1 {
		first, err := layer(0)
		if err != nil {
			return nil, err
		}
		copy(lin.Weight.Value.Float64s(), first.(*nn.Sequential).Layers[0].(*nn.Linear).Weight.Value.Float64s())
	}
	return nn.Tie(seq, lin.Weight)
}

// TestTie trains a -tie 0:3 program: the two copies of the tied weight
// (layer 0's and layer 7's) end equal bit for bit, and a resumed job
// equals the uninterrupted one.
func TestTie(t *testing.T) {
	dir := t.TempDir()
	job := func(steps int, ckpt, resume string) *train.Result {
		c := config(tie, 1, 2*half)
		c.Layer = tiedLayer
		if steps < 2*half {
			c.StopAfter = steps
		}
		c.CheckpointDir, c.Resume = ckpt, resume
		return run(t, c)
	}
	full, first, second := filepath.Join(dir, "full"), filepath.Join(dir, "first"), filepath.Join(dir, "second")
	whole := job(2*half, full, "")
	job(half, first, "")
	resumed := job(2*half, second, first)
	same(t, "losses of the resumed steps", losses(resumed), losses(whole)[half:])
	same(t, "parameters", params(t, second), params(t, full))
	ck, err := checkpoint.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ck.Layers([]int{0, layers - 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var w0, w7 []float64
	for _, p := range ps {
		if p.Name == "0.weight" && p.Layer == 0 {
			w0 = p.Value.F64
		}
		if p.Name == "0.weight" && p.Layer == layers-1 {
			w7 = p.Value.F64
		}
	}
	same(t, "the tied copies", w7, w0)
	untied := losses(run(t, config(onef1b, 1, 2*half)))
	if d := maxDiff(t, "losses", untied, losses(whole)); d == 0 {
		t.Fatal("the tied model trains as the untied one")
	}
}

// TestRecompute: the loop trains 1f1b at P=4 recomputing every stage
// whole (-recompute full), half of each stage's layers (-recompute
// selective:0.5: the stages are nn.Sequentials, which Drop and Rebuild
// their first layer) and the layers a model marks (-recompute model with
// marked.json: the second layer of stages 0..2, not a prefix) to the
// losses and parameters of 1f1b without recompute, bit for bit
// (TestMPIRecompute does it over MPI).
func TestRecompute(t *testing.T) {
	dir := t.TempDir()
	job := func(p train.Program, name string) *train.Result {
		c := config(p, 1, 2*half)
		c.CheckpointDir = filepath.Join(dir, name)
		return run(t, c)
	}
	ref := job(onef1b, "none")
	for name, p := range map[string]train.Program{"full": recompute, "selective": selective, "marked": marked} {
		same(t, name+" losses", losses(job(p, name)), losses(ref))
		same(t, name+" parameters", params(t, filepath.Join(dir, name)), params(t, filepath.Join(dir, "none")))
	}
}

// TestRefusals checks the errors of configurations the loop does not run.
func TestRefusals(t *testing.T) {
	noLayers := onef1b
	noLayers.Spec.Layers = nil
	for _, tc := range []struct {
		name string
		edit func(*train.Config)
		want string
	}{
		{"fsdp of one replica", func(c *train.Config) { c.FSDP = true }, "FSDP shards the stages over the data-parallel replicas; DP 1"},
		{"fsdp with a tie", func(c *train.Config) { c.Train, c.FSDP, c.DP = tie, true, 2 }, "FSDP with ties or two model copies"},
		{"no layers", func(c *train.Config) { c.Train = noLayers }, "no layer split"},
		{"wrong layers", func(c *train.Config) { c.Layers = [][2]int{{0, 8}} }, "1 layer ranges for the 4 stages"},
		{"forward-only train", func(c *train.Config) { c.Train = eval }, "forward-only"},
		{"eval not forward-only", func(c *train.Config) { c.Eval = &onef1b; c.EvalData = c.Data }, "not forward-only"},
		{"eval of another placement", func(c *train.Config) { c.Train = zbv2; c.Eval = &eval; c.EvalData = c.Data }, "same placement"},
		{"no schedule", func(c *train.Config) { c.LR = nil }, "learning-rate schedule"},
		{"negative clip", func(c *train.Config) { c.Clip = -1 }, "Clip -1"},
		{"dp of one rank", func(c *train.Config) { c.DP = -1 }, "DP -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config(onef1b, 1, 1)
			tc.edit(&c)
			_, err := train.Run(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestResumeRefusesCorrupt resumes from a checkpoint whose shard has a
// flipped byte: refused, naming the file.
func TestResumeRefusesCorrupt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	c := config(onef1b, 1, 1)
	c.CheckpointDir = dir
	run(t, c)
	m, err := checkpoint.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, filepath.Join(dir, m.Shards[2].File))
	c = config(onef1b, 1, 2)
	c.Resume = dir
	_, err = train.Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), m.Shards[2].File) {
		t.Fatalf("resume from a corrupt shard: %v, want an error naming %s", err, m.Shards[2].File)
	}
}

// TestTimelineBubble measures the bubble of every step with a Timeline:
// a fraction in (0, 1) (1f1b at P=4, M=8 idles in its warmup and cooldown).
func TestTimelineBubble(t *testing.T) {
	c := config(onef1b, 1, 3)
	c.Timeline = &pipe.Timeline{}
	for _, r := range run(t, c).Records {
		if !(r.Bubble > 0 && r.Bubble < 1) {
			t.Fatalf("step %d: bubble %v, want a fraction", r.Step, r.Bubble)
		}
	}
	if len(c.Timeline.Events()) == 0 {
		t.Fatal("the timeline recorded nothing")
	}
	// The last step's host work: each rank's program, then the norm's
	// reduction, the optimizer's step and the loss, one after the other.
	want := []string{pipe.SpanProgram, pipe.SpanAllReduce, pipe.SpanOptStep, pipe.SpanLoss}
	byRank := map[int][]pipe.TimelineSpan{}
	for _, s := range c.Timeline.Spans() {
		byRank[s.Rank] = append(byRank[s.Rank], s)
	}
	if len(byRank) != 4 {
		t.Fatalf("spans of %d ranks, want 4: %v", len(byRank), c.Timeline.Spans())
	}
	for r, spans := range byRank {
		if len(spans) != len(want) {
			t.Fatalf("rank %d: %d spans, want %v", r, len(spans), want)
		}
		for i, s := range spans {
			if s.Name != want[i] || s.End.Before(s.Start) || i > 0 && s.Start.Before(spans[i-1].End) {
				t.Errorf("rank %d: span %d is %s from %v to %v; want %s after %s", r, i, s.Name, s.Start, s.End, want[i], spans[max(i-1, 0)].Name)
			}
		}
	}
	var b strings.Builder
	if err := c.Timeline.WriteTrace(&b, "1f1b", nil); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), `"cat":"host"`); n != 16 {
		t.Errorf("the trace holds %d host events, want 16 (4 a rank)", n)
	}
}

// TestTrainerState saves the trainer's own state in the checkpoint
// (SaveState) and gets it back on every rank of the resumed job
// (LoadState).
func TestTrainerState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	c := config(onef1b, 1, 4)
	c.CheckpointDir, c.StopAfter = dir, 2
	c.SaveState = func() (json.RawMessage, error) { return json.RawMessage(`{"rng":42}`), nil }
	run(t, c)
	c = config(onef1b, 1, 4)
	c.Resume = dir
	var mu sync.Mutex
	got := map[string]int{}
	c.LoadState = func(js json.RawMessage) error {
		var b bytes.Buffer
		if err := json.Compact(&b, js); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		got[b.String()]++
		return nil
	}
	run(t, c)
	if len(got) != 1 || got[`{"rng":42}`] != onef1b.Spec.Ranks {
		t.Fatalf("LoadState got %v, want {\"rng\":42} on each of %d ranks", got, onef1b.Spec.Ranks)
	}
}

// TestFailureStopsEveryRank: a data source that fails at step 2 on the
// first stage's rank, or a hook that fails, ends the job on every rank
// with an error that says so (no rank waits for the failed one).
func TestFailureStopsEveryRank(t *testing.T) {
	c := config(onef1b, 1, 4)
	ok := c.Data
	c.Data = func(step, replica int) (pipe.DataSource, error) {
		if step == 2 {
			return nil, errors.New("shard gone")
		}
		return ok(step, replica)
	}
	_, err := train.Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "data of step 2: shard gone") {
		t.Fatalf("error %v, want one naming the data of step 2", err)
	}
	c = config(onef1b, 1, 4)
	c.Hooks.AfterStep = func(rank int, r metrics.Record) error {
		if rank == 3 && r.Step == 2 {
			return errors.New("disk full")
		}
		return nil
	}
	_, err = train.Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "AfterStep hook after step 2: disk full") {
		t.Fatalf("error %v, want the hook's", err)
	}
}
