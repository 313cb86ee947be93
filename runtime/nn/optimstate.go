package nn

import (
	"fmt"
	"slices"
	"sort"

	"gorgonia.org/tensor"
)

// OptimState is an optimizer's state for a list of parameters, as
// Optimizer.State exports it and Optimizer.SetState takes it back: what a
// checkpoint saves beside the parameters. It holds copies: changing it
// changes no optimizer.
//
// Params is keyed by the parameter's Name, so the names of the parameters
// given must be unique and not empty (State and SetState refuse others). A
// Sequential names its layers' parameters "i.name" ("0.weight", "2.bias"),
// unique within one stage; a trainer that saves several stages in one
// state prefixes them with PrefixNames (e.g. "layer 3/" by the model's
// layer index, which does not depend on the pipeline's split), so a state
// saved under one partition restores under another.
type OptimState struct {
	// Kind is the optimizer's: KindSGD, KindAdam or KindAdamW. SetState
	// refuses another kind's state.
	Kind string
	// Params holds one entry per parameter given to State, by name.
	Params map[string]ParamState
}

// ParamState is one parameter's optimizer state. A parameter the optimizer
// has not stepped yet (or, for SGD, has no velocity: Momentum 0) has Step 0
// and no Buffers.
type ParamState struct {
	// Step counts the parameter's updates (Adam's and AdamW's t, which
	// their bias correction reads); 0 for SGD.
	Step int
	// Buffers are the state tensors, in the parameter's shape and dtype,
	// by PyTorch's names: BufMomentum for SGD; BufExpAvg and BufExpAvgSq
	// for Adam and AdamW.
	Buffers map[string]*tensor.Dense
}

// The kinds of OptimState.
const (
	KindSGD   = "sgd"
	KindAdam  = "adam"
	KindAdamW = "adamw"
)

// The names of ParamState.Buffers (torch.optim's state keys).
const (
	BufMomentum = "momentum_buffer" // SGD's velocity v
	BufExpAvg   = "exp_avg"         // Adam's first moment m
	BufExpAvgSq = "exp_avg_sq"      // Adam's second moment v
)

// Names returns the parameter names of st, sorted.
func (st OptimState) Names() []string {
	out := make([]string, 0, len(st.Params))
	for n := range st.Params {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// PrefixNames prepends prefix to the Name of every parameter of params
// (once per parameter, in place): for example "layer 3/" before the names
// of layer 3's parameters, so that the names are unique across the layers
// of a model.
func PrefixNames(prefix string, params []*Param) {
	seen := make(map[*Param]bool, len(params))
	for _, p := range params {
		if p != nil && !seen[p] {
			p.Name = prefix + p.Name
			seen[p] = true
		}
	}
}

// checkNames checks that params are valid, distinct and uniquely named.
func checkNames(where string, params []*Param) error {
	if err := checkParams(where, params); err != nil {
		return err
	}
	names := make(map[string]int, len(params))
	for i, p := range params {
		if p.Name == "" {
			return fmt.Errorf("nn: %s: parameter %d has no name; the state is keyed by name (see PrefixNames)", where, i)
		}
		if j, ok := names[p.Name]; ok {
			return fmt.Errorf("nn: %s: parameters %d and %d are both named %q; the state is keyed by name (see PrefixNames)", where, j, i, p.Name)
		}
		names[p.Name] = i
	}
	return nil
}

// matchState checks that st is of kind and has exactly one entry per
// parameter of params.
func matchState(where, kind string, params []*Param, st OptimState) error {
	if err := checkNames(where, params); err != nil {
		return err
	}
	if st.Kind != kind {
		return fmt.Errorf("nn: %s: the state is of a %q optimizer, want %q", where, st.Kind, kind)
	}
	var missing, extra []string
	have := make(map[string]bool, len(params))
	for _, p := range params {
		have[p.Name] = true
		if _, ok := st.Params[p.Name]; !ok {
			missing = append(missing, p.Name)
		}
	}
	for n := range st.Params {
		if !have[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		return fmt.Errorf("nn: %s: the state lacks parameters %q and has parameters %q that were not given", where, missing, extra)
	}
	return nil
}

// stateBuffer returns a copy of buffer name of ps, checked against p.
func stateBuffer(where string, p *Param, ps ParamState, name string) (*tensor.Dense, error) {
	b := ps.Buffers[name]
	if b == nil {
		return nil, fmt.Errorf("nn: %s: parameter %q has no buffer %q (it has %v)", where, p.Name, name, bufferNames(ps))
	}
	if err := checkState(where, p, b); err != nil {
		return nil, fmt.Errorf("%w (buffer %q)", err, name)
	}
	if b.IsMaterializable() || b.IsMasked() {
		return nil, fmt.Errorf("nn: %s: buffer %q of parameter %q is a view, transposed or masked; want a plain tensor", where, name, p.Name)
	}
	if _, err := contiguous(where, "buffer "+name+" of "+p.Name, b); err != nil {
		return nil, err
	}
	return b.Clone().(*tensor.Dense), nil
}

func bufferNames(ps ParamState) []string {
	out := make([]string, 0, len(ps.Buffers))
	for n := range ps.Buffers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func tensorBytes(t *tensor.Dense) int64 {
	if t == nil {
		return 0
	}
	return int64(t.Shape().TotalSize()) * int64(t.Dtype().Size())
}

// SetLR sets LR.
func (o *SGD) SetLR(lr float64) { o.LR = lr }

// State returns the velocities of params.
func (o *SGD) State(params []*Param) (OptimState, error) {
	if err := checkNames("SGD.State", params); err != nil {
		return OptimState{}, err
	}
	out := OptimState{Kind: KindSGD, Params: make(map[string]ParamState, len(params))}
	for _, p := range params {
		ps := ParamState{}
		if v := o.vel[p]; v != nil {
			ps.Buffers = map[string]*tensor.Dense{BufMomentum: v.Clone().(*tensor.Dense)}
		}
		out.Params[p.Name] = ps
	}
	return out, nil
}

// SetState restores the velocities of params.
func (o *SGD) SetState(params []*Param, st OptimState) error {
	const where = "SGD.SetState"
	if err := matchState(where, KindSGD, params, st); err != nil {
		return err
	}
	next := make(map[*Param]*tensor.Dense, len(params))
	for _, p := range params {
		ps := st.Params[p.Name]
		if ps.Step != 0 {
			return fmt.Errorf("nn: %s: parameter %q has step count %d; SGD keeps none", where, p.Name, ps.Step)
		}
		if len(ps.Buffers) == 0 {
			continue
		}
		v, err := stateBuffer(where, p, ps, BufMomentum)
		if err != nil {
			return err
		}
		if len(ps.Buffers) != 1 {
			return fmt.Errorf("nn: %s: parameter %q has buffers %v; want %q alone", where, p.Name, bufferNames(ps), BufMomentum)
		}
		next[p] = v
	}
	if o.vel == nil {
		o.vel = make(map[*Param]*tensor.Dense)
	}
	for _, p := range params {
		delete(o.vel, p)
		if v := next[p]; v != nil {
			o.vel[p] = v
		}
	}
	return nil
}

// stateBytes is the bytes of the velocities of ps.
func (o *SGD) stateBytes(ps []*Param) int64 {
	var n int64
	for _, p := range ps {
		n += tensorBytes(o.vel[p])
	}
	return n
}
