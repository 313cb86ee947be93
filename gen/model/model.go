// Package model reads a model description, the per-layer costs and sizes
// a trainer measured or estimated, and turns it into the per-stage cost
// model (sim.Cost) of a partition of its layers into contiguous stages.
//
// The form is JSON (docs/model.md):
//
//	{"layers": [
//	  {"name": "embed", "F": 0.3, "I": 0, "W": 0.3, "act": 1, "params": 4},
//	  {"name": "block0", "F": 1, "I": 1, "W": 1, "act": 1, "params": 1},
//	  ...],
//	 "comm": 0.05, "bw": 100}
//
// Each layer gives its forward F and its backward as B (the full backward)
// or I and W (input and weight gradient; B = I + W), its output
// activation's size act and its parameter size params (any one unit of
// data for both); comm (a transfer's latency) and bw (the link's bandwidth,
// in that unit per time unit) are optional. A stage's F, I and W are the
// sums of its layers', its act the act of its last layer, its params the
// sum of its layers'. A layer may give the per-stage cost keys of step
// kinds (sim.KindKeys: R, the cost of recomputing it, RECOMPUTE under
// -recompute: its forward again), each defaulting to the layer's cost of
// the key's default kind (R: F), which a stage sums as F. A layer may say
// "recompute": true to be recomputed under -recompute model (Marks: any
// of a stage's layers; the stage's memory share is their act, their
// recompute cost their R).
package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// Limits of a model file.
const (
	MaxBytes  = 16 << 20        // the file
	MaxLayers = ir.MaxIndex + 1 // as many layers as a program may have stages
	MaxName   = 256             // bytes of a layer's name
)

// Layer is one layer's costs and sizes. I and W are resolved: a layer given
// B alone splits it evenly (I = W = B/2), B and W give I = B − W, B and I
// give W = B − I.
type Layer struct {
	Name   string
	F      float64
	I, W   float64
	Act    float64
	Params float64
	// Kinds holds the layer's costs of the step kinds with a cost key of
	// their own (sim.KindKeys), by key: R, the cost of recomputing the
	// layer (-recompute). A key not given is absent: its default kind's
	// cost (R: F).
	Kinds map[string]float64
	// Recompute marks the layer for selective recompute by name
	// ("recompute": true; -recompute model, Marks).
	Recompute bool
}

// Model is a read model description.
type Model struct {
	Layers []Layer
	Comm   float64 // the latency of one transfer
	BW     float64 // the link's bandwidth (0: infinite)
}

// layerJSON is a layer as written: the backward keys are optional.
type layerJSON struct {
	Name   string             `json:"name"`
	F      *float64           `json:"F"`
	B      *float64           `json:"B"`
	I      *float64           `json:"I"`
	W      *float64           `json:"W"`
	Act    *float64           `json:"act"`
	Params *float64           `json:"params"`
	Kinds  map[string]float64 `json:"-"` // sim.KindKeys given, by key (kindKeys)

	Recompute bool `json:"recompute"` // -recompute model (Marks)
}

type modelJSON struct {
	Layers []layerJSON
	Comm   float64
	BW     float64
}

// decode reads the JSON object one key at a time and the layers one at a
// time, so that it stops at the MaxLayers+1-th layer instead of allocating
// them all first; unknown keys are refused (a misspelt one would be 0).
func decode(data []byte) (modelJSON, error) {
	const want = `want {"layers": [{"name": ..., "F": ..., "I": ..., "W": ..., "act": ..., "params": ...}, ...], "comm": ..., "bw": ...}`
	var m modelJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	delim := func(d json.Delim) error {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w (%s)", err, want)
		}
		if tok != d {
			return fmt.Errorf("found %v where %q belongs (%s)", tok, d, want)
		}
		return nil
	}
	if err := delim('{'); err != nil {
		return m, err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return m, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return m, fmt.Errorf("key %q given twice; give each key once", key)
		}
		switch seen[key] = true; key {
		case "layers":
			if err := delim('['); err != nil {
				return m, err
			}
			for dec.More() {
				if len(m.Layers) == MaxLayers {
					return m, fmt.Errorf("more than %d layers", MaxLayers)
				}
				var l layerJSON
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return m, fmt.Errorf("layer %d: %w", len(m.Layers), err)
				}
				if k, ok := repeatedKey(raw); ok {
					return m, fmt.Errorf("layer %d: key %q given twice (keys match whatever their case); give each key once", len(m.Layers), clip(k))
				}
				kinds, rest, err := kindKeys(raw)
				if err != nil {
					return m, fmt.Errorf("layer %d: %w", len(m.Layers), err)
				}
				one := json.NewDecoder(bytes.NewReader(rest))
				one.DisallowUnknownFields()
				if err := one.Decode(&l); err != nil {
					return m, fmt.Errorf("layer %d: %w", len(m.Layers), err)
				}
				l.Kinds = kinds
				m.Layers = append(m.Layers, l)
			}
			if err := delim(']'); err != nil {
				return m, err
			}
		case "comm", "bw":
			var v float64
			if err := dec.Decode(&v); err != nil {
				return m, fmt.Errorf("%s: %w", key, err)
			}
			if key == "comm" {
				m.Comm = v
			} else {
				m.BW = v
			}
		default:
			return m, fmt.Errorf("unknown key %q; the keys are layers, comm and bw", clip(fmt.Sprint(tok)))
		}
	}
	if err := delim('}'); err != nil {
		return m, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return m, errors.New("text after the model's JSON object")
	}
	return m, nil
}

// repeatedKey returns a key that a layer's JSON object gives twice,
// compared as encoding/json matches them to the fields (whatever their
// case): it would keep the last and drop the first without a word. It
// looks no further than the layer's fields: past them some key is unknown,
// which the layer's decoder refuses.
func repeatedKey(raw []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false // not an object: the decoder says why
	}
	seen := map[string]bool{}
	for dec.More() && len(seen) <= layerKeys {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		k, _ := tok.(string)
		if seen[strings.ToLower(k)] {
			return k, true
		}
		seen[strings.ToLower(k)] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// layerKeys is the number of keys a layer may give (layerJSON's fields
// and sim.KindKeys).
var layerKeys = 7 + len(sim.KindKeys())

// kindKeys takes the values of the sim.KindKeys out of a layer's JSON
// object (matching keys whatever their case, as the decoder does): the
// values by canonical key (nil when none is given) and the object
// without them. Text that is not an object is returned as it is, for the
// layer's decoder to refuse.
func kindKeys(raw []byte) (map[string]float64, []byte, error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return nil, raw, nil
	}
	var kinds map[string]float64
	for name, v := range obj {
		for _, kk := range sim.KindKeys() {
			if !strings.EqualFold(name, kk.Key) {
				continue
			}
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", kk.Key, err)
			}
			if kinds == nil {
				kinds = map[string]float64{}
			}
			kinds[kk.Key] = f
			delete(obj, name)
		}
	}
	if kinds == nil {
		return nil, raw, nil
	}
	rest, err := json.Marshal(obj)
	return kinds, rest, err
}

// Read reads a model description: at most MaxBytes, at most MaxLayers
// layers, every value finite in [0, sim.MaxCost] (bw 0 or at least
// sim.MinBW). Errors name the layer (by index and name) and the key.
func Read(r io.Reader) (Model, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return Model{}, fmt.Errorf("model: %w", err)
	}
	if len(data) > MaxBytes {
		return Model{}, fmt.Errorf("model: the file is over %d MiB; a model description is a few KiB", MaxBytes>>20)
	}
	m, err := decode(data)
	if err != nil {
		return Model{}, fmt.Errorf("model: %w", err)
	}
	if len(m.Layers) == 0 {
		return Model{}, errors.New(`model: no layers; want {"layers": [{"F": 1, "B": 2, "act": 1, "params": 1}, ...]}`)
	}
	if err := check("comm", m.Comm); err != nil {
		return Model{}, fmt.Errorf("model: %w", err)
	}
	if m.BW != 0 && (m.BW < sim.MinBW || m.BW > sim.MaxCost || math.IsNaN(m.BW)) {
		return Model{}, fmt.Errorf("model: bw = %g; want 0 (infinite bandwidth) or within [%g, %g]", m.BW, sim.MinBW, float64(sim.MaxCost))
	}
	out := Model{Comm: m.Comm, BW: m.BW, Layers: make([]Layer, len(m.Layers))}
	for i, lj := range m.Layers {
		l, err := resolve(lj)
		if err != nil {
			name := ""
			if lj.Name != "" {
				name = fmt.Sprintf(" (%q)", clip(lj.Name))
			}
			return Model{}, fmt.Errorf("model: layer %d%s: %w", i, name, err)
		}
		out.Layers[i] = l
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// check checks one value of the model.
func check(key string, v float64) error {
	if !(v >= 0 && v <= sim.MaxCost) { // NaN fails both
		return fmt.Errorf("%s = %g; want a finite value in [0, %g]", key, v, float64(sim.MaxCost))
	}
	return nil
}

// resolve checks a layer and resolves its backward into I and W.
func resolve(lj layerJSON) (Layer, error) {
	if len(lj.Name) > MaxName {
		return Layer{}, fmt.Errorf("name of %d bytes; at most %d", len(lj.Name), MaxName)
	}
	l := Layer{Name: lj.Name, Recompute: lj.Recompute}
	for _, f := range []struct {
		key string
		v   *float64
		dst *float64
	}{{"F", lj.F, &l.F}, {"act", lj.Act, &l.Act}, {"params", lj.Params, &l.Params}} {
		if f.v == nil {
			return Layer{}, fmt.Errorf("%s is missing (every layer gives F, act and params, and B or I and W)", f.key)
		}
		if err := check(f.key, *f.v); err != nil {
			return Layer{}, err
		}
		*f.dst = *f.v
	}
	for _, f := range []struct {
		key string
		v   *float64
	}{{"B", lj.B}, {"I", lj.I}, {"W", lj.W}} {
		if f.v != nil {
			if err := check(f.key, *f.v); err != nil {
				return Layer{}, err
			}
		}
	}
	for _, kk := range sim.KindKeys() { // in their order, for the first error
		if v, ok := lj.Kinds[kk.Key]; ok {
			if err := check(kk.Key, v); err != nil {
				return Layer{}, err
			}
		}
	}
	l.Kinds = lj.Kinds
	switch b, i, w := lj.B, lj.I, lj.W; {
	case b != nil && i != nil && w != nil:
		if math.Abs(*i+*w-*b) > 1e-9*math.Max(1, *b) {
			return Layer{}, fmt.Errorf("B = %g but I + W = %g; give B, or I and W", *b, *i+*w)
		}
		l.I, l.W = *i, *w
	case i != nil && w != nil:
		l.I, l.W = *i, *w
	case b != nil && w != nil:
		l.I, l.W = *b-*w, *w
	case b != nil && i != nil:
		l.I, l.W = *i, *b-*i
	case b != nil:
		l.I, l.W = *b/2, *b/2
	default:
		return Layer{}, errors.New("no backward: give B (the full backward), or I and W (its input- and weight-gradient halves)")
	}
	if l.I < 0 || l.W < 0 {
		return Layer{}, fmt.Errorf("B = %g is less than its part I = %g or W = %g", l.I+l.W, l.I, l.W)
	}
	return l, nil
}

// Partition is a split of a model's layers into contiguous stages: stage s
// holds layers Bounds[s] to Bounds[s+1]-1.
type Partition struct {
	Bounds []int
}

// Stages is the number of stages.
func (p Partition) Stages() int { return len(p.Bounds) - 1 }

// Even splits n layers into stages contiguous stages by count, the first
// n mod stages stages one layer longer (what a trainer does without a
// partitioner).
func Even(n, stages int) (Partition, error) {
	if stages < 1 || stages > n {
		return Partition{}, fmt.Errorf("model: %d layers cannot fill %d stages: every stage holds at least one layer; use fewer ranks or virtual stages, or describe the model in more layers", n, stages)
	}
	cnt := make([]int, stages)
	q, r := n/stages, n%stages
	for s := range stages {
		cnt[s] = q
		if s < r {
			cnt[s]++
		}
	}
	return FromCounts(cnt), nil
}

// Counts returns the number of layers of each stage.
func (p Partition) Counts() []int {
	cnt := make([]int, max(0, p.Stages()))
	for s := range cnt {
		cnt[s] = p.Bounds[s+1] - p.Bounds[s]
	}
	return cnt
}

// FromCounts is the split whose stage s holds cnt[s] layers, in order.
func FromCounts(cnt []int) Partition {
	b := make([]int, len(cnt)+1)
	for s, n := range cnt {
		b[s+1] = b[s] + n
	}
	return Partition{Bounds: b}
}

// Check verifies that p partitions n layers into contiguous, non-empty
// stages.
func (p Partition) Check(n int) error {
	if len(p.Bounds) < 2 || p.Bounds[0] != 0 || p.Bounds[len(p.Bounds)-1] != n {
		return fmt.Errorf("model: partition %v does not cover layers 0..%d", p.Bounds, n-1)
	}
	for s := 1; s < len(p.Bounds); s++ {
		if p.Bounds[s] <= p.Bounds[s-1] {
			return fmt.Errorf("model: partition %v: stage %d is empty", p.Bounds, s-1)
		}
	}
	return nil
}

// Cost returns the per-stage cost model of m split by p, with m's comm and
// bw: F, I, W and B (I + W) summed over each stage's layers, act the size
// of its last layer's output, and each key of sim.KindKeys (each layer's,
// or its default kind's cost: R's is F) summed when a layer gives it. The
// other keys
// (data, opt, ...) are sim.DefaultCost's (0). Without bw the sizes are
// left out: at infinite bandwidth they take no time.
func (m Model) Cost(p Partition) (sim.Cost, error) {
	if err := p.Check(len(m.Layers)); err != nil {
		return sim.Cost{}, err
	}
	S := p.Stages()
	c := sim.DefaultCost()
	c.F, c.B, c.I, c.W = make([]float64, S), make([]float64, S), make([]float64, S), make([]float64, S)
	c.Act = make([]float64, S)
	for s := range S {
		for _, l := range m.Layers[p.Bounds[s]:p.Bounds[s+1]] {
			c.F[s] += l.F
			c.I[s] += l.I
			c.W[s] += l.W
		}
		c.B[s] = c.I[s] + c.W[s]
		c.Act[s] = m.Layers[p.Bounds[s+1]-1].Act
	}
	for _, kk := range sim.KindKeys() {
		if !slices.ContainsFunc(m.Layers, func(l Layer) bool { _, ok := l.Kinds[kk.Key]; return ok }) {
			continue
		}
		list := make([]float64, S)
		for s := range S {
			for _, l := range m.Layers[p.Bounds[s]:p.Bounds[s+1]] {
				list[s] += l.kindCost(kk)
			}
		}
		*kk.List(&c) = list
	}
	c.Comm, c.BW = m.Comm, m.BW
	// The parameters cost time only in FSDP's collectives, over a DP group
	// the model does not know: they are left out.
	c.Param = nil
	if m.BW == 0 {
		c.Act = nil // sizes take no time at infinite bandwidth (sim refuses them then)
	}
	return c.Resolve(S)
}

// Marks returns, per stage of a program of copies model copies whose
// every copy splits the layers by p (stage s running the layers of stage
// s mod p.Stages()), what -recompute model recomputes of it: the layers
// the model marks "recompute": true, anywhere in the stage, with their
// share of the stage's activations, by bytes (the marked layers' act over
// the stage's; by count, k/n, when the stage's layers give no act), and
// their share of its R (each layer's R, default its F; by count when the
// stage's R is 0). A stage with no marked layer gets the zero Mark, one
// whose every layer is marked recomputes whole (Share and Cost 1, no
// Layers). An error says when no layer is marked, and names a stage whose
// marked layers hold no activations while others do (recomputing them
// would free nothing).
func (m Model) Marks(p Partition, copies int) ([]ir.Mark, error) {
	if err := p.Check(len(m.Layers)); err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(m.Layers, func(l Layer) bool { return l.Recompute }) {
		return nil, errors.New(`model: no layer is marked "recompute": true; mark the layers to recompute, or give -recompute full or selective:F`)
	}
	if copies < 1 {
		return nil, fmt.Errorf("model: %d model copies; want 1 or more", copies)
	}
	one := make([]ir.Mark, p.Stages())
	for s := range one {
		layers := m.Layers[p.Bounds[s]:p.Bounds[s+1]]
		var mk ir.Mark
		var act, markedAct, r, markedR float64
		for i, l := range layers {
			lr := l.kindCost(recomputeKey)
			act, r = act+l.Act, r+lr
			if l.Recompute {
				mk.Layers = append(mk.Layers, i)
				markedAct, markedR = markedAct+l.Act, markedR+lr
			}
		}
		k, n := len(mk.Layers), len(layers)
		switch {
		case k == 0:
			continue
		case k == n:
			one[s] = ir.Mark{Share: 1, Cost: 1}
			continue
		}
		mk.Share, mk.Cost = float64(k)/float64(n), float64(k)/float64(n)
		if act > 0 {
			mk.Share = markedAct / act
		}
		if r > 0 {
			mk.Cost = markedR / r
		}
		if mk.Share == 0 {
			return nil, fmt.Errorf("model: stage %d (layers %d..%d) marks layers %v \"recompute\": true, which hold no activations (act 0) while its other layers hold %g: recomputing them frees nothing; unmark them, or give them their act", s, p.Bounds[s], p.Bounds[s+1]-1, shift(mk.Layers, p.Bounds[s]), act)
		}
		one[s] = mk
	}
	out := make([]ir.Mark, 0, len(one)*copies)
	for range copies {
		out = append(out, one...)
	}
	return out, nil
}

// EvenMarks is Marks for a program of stages stages running copies model
// copies, split as gen records it in Spec.Layers without -partition auto:
// the layers evenly (Even) over one copy's stages/copies stages. It is
// passes.Options.Marked under -model.
func (m Model) EvenMarks(stages, copies int) ([]ir.Mark, error) {
	if copies < 1 || stages%copies != 0 {
		return nil, fmt.Errorf("model: %d stages do not form %d model copies", stages, copies)
	}
	part, err := Even(len(m.Layers), stages/copies)
	if err != nil {
		return nil, err
	}
	return m.Marks(part, copies)
}

// MarksOf returns Marks for the split part as passes.Options.Marked takes
// it: for a program of stages stages running copies copies, which must be
// part's stages per copy.
func (m Model) MarksOf(part Partition) func(stages, copies int) ([]ir.Mark, error) {
	return func(stages, copies int) ([]ir.Mark, error) {
		if copies < 1 || stages != part.Stages()*copies {
			return nil, fmt.Errorf("model: the split %v has %d stages per copy; the program has %d stages of %d copies", part.Bounds, part.Stages(), stages, copies)
		}
		return m.Marks(part, copies)
	}
}

// shift returns the layers of a stage as the model's indices: each plus
// first.
func shift(layers []int, first int) []int {
	out := make([]int, len(layers))
	for i, l := range layers {
		out[i] = l + first
	}
	return out
}

// recomputeKey is the cost key of RECOMPUTE (R).
var recomputeKey = func() sim.KindKey {
	for _, kk := range sim.KindKeys() {
		if kk.Kind == abi.Recompute {
			return kk
		}
	}
	panic("model: sim has no cost key for RECOMPUTE")
}()

// kindCost is the layer's cost of the kind kk prices: its own (Kinds),
// else its cost of kk's default kind.
func (l Layer) kindCost(kk sim.KindKey) float64 {
	if v, ok := l.Kinds[kk.Key]; ok {
		return v
	}
	return l.cost(kk.Default)
}

// cost is the layer's cost of a compute kind: F, B (I + W), I or W; 0 for
// other kinds.
func (l Layer) cost(k abi.Kind) float64 {
	switch k {
	case abi.Forward:
		return l.F
	case abi.Backward:
		return l.I + l.W
	case abi.BackwardInput:
		return l.I
	case abi.BackwardWeight:
		return l.W
	}
	return 0
}
