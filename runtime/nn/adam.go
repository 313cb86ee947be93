package nn

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// Adam is the Adam optimizer in PyTorch's convention, with bias correction
// and a per-parameter step count t:
//
//	m ← Beta1·m + (1-Beta1)·g
//	v ← Beta2·v + (1-Beta2)·g²
//	p ← p - LR · (m/(1-Beta1^t)) / (sqrt(v/(1-Beta2^t)) + Eps)
//
// NewAdam sets the usual defaults. The moments are kept per *Param in the
// parameter's dtype. The update is computed in float64. Its State is, per
// parameter, the step count t and the buffers "exp_avg" (m) and
// "exp_avg_sq" (v), PyTorch's names.
type Adam struct {
	LR, Beta1, Beta2, Eps float64

	moments
}

// NewAdam returns Adam with learning rate lr, Beta1 0.9, Beta2 0.999 and
// Eps 1e-8.
func NewAdam(lr float64) *Adam { return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8} }

// AdamW is Adam with decoupled weight decay, PyTorch's torch.optim.AdamW
// (amsgrad off): each step first decays the parameter, then takes Adam's
// update on the gradient alone,
//
//	p ← p - LR·WeightDecay·p
//	m ← Beta1·m + (1-Beta1)·g
//	v ← Beta2·v + (1-Beta2)·g²
//	p ← p - LR · (m/(1-Beta1^t)) / (sqrt(v/(1-Beta2^t)) + Eps)
//
// t counting the parameter's steps from 1. NewAdamW sets PyTorch's defaults
// (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2). The decay
// applies to every parameter it is given: a trainer that exempts biases
// and norms (as many do) steps them with a second AdamW of WeightDecay 0.
// Moments, arithmetic and State are Adam's.
type AdamW struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64

	moments
}

// NewAdamW returns AdamW with PyTorch's defaults: LR 1e-3, Beta1 0.9, Beta2
// 0.999, Eps 1e-8 and WeightDecay 1e-2.
func NewAdamW() *AdamW {
	return &AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 1e-2}
}

// SetLR sets LR.
func (o *Adam) SetLR(lr float64) { o.LR = lr }

// SetLR sets LR.
func (o *AdamW) SetLR(lr float64) { o.LR = lr }

// Step applies one update to every parameter. It does not clear the
// gradients.
func (o *Adam) Step(params []*Param) error {
	return o.step("Adam.Step", params, adamHyper{o.LR, o.Beta1, o.Beta2, o.Eps, 0})
}

// Step applies one update to every parameter. It does not clear the
// gradients.
func (o *AdamW) Step(params []*Param) error {
	const where = "AdamW.Step"
	if err := finite(where, "WeightDecay", o.WeightDecay); err != nil {
		return err
	}
	if o.WeightDecay < 0 {
		return fmt.Errorf("nn: %s: WeightDecay %v is negative", where, o.WeightDecay)
	}
	return o.step(where, params, adamHyper{o.LR, o.Beta1, o.Beta2, o.Eps, o.WeightDecay})
}

// State returns the moments and step counts of params.
func (o *Adam) State(params []*Param) (OptimState, error) {
	return o.export("Adam.State", KindAdam, params)
}

// SetState restores the moments and step counts of params.
func (o *Adam) SetState(params []*Param, st OptimState) error {
	return o.restore("Adam.SetState", KindAdam, params, st)
}

// State returns the moments and step counts of params.
func (o *AdamW) State(params []*Param) (OptimState, error) {
	return o.export("AdamW.State", KindAdamW, params)
}

// SetState restores the moments and step counts of params.
func (o *AdamW) SetState(params []*Param, st OptimState) error {
	return o.restore("AdamW.SetState", KindAdamW, params, st)
}

// moments is the per-parameter state of Adam and AdamW.
type moments struct {
	state map[*Param]*adamState
}

type adamState struct {
	m, v *tensor.Dense
	t    int
}

type adamHyper struct{ lr, b1, b2, eps, wd float64 }

func (mo *moments) step(where string, params []*Param, h adamHyper) error {
	if err := finite(where, "LR", h.lr, "Beta1", h.b1, "Beta2", h.b2, "Eps", h.eps); err != nil {
		return err
	}
	if h.b1 < 0 || h.b1 >= 1 || h.b2 < 0 || h.b2 >= 1 {
		return fmt.Errorf("nn: %s: Beta1 %v and Beta2 %v must lie in [0, 1)", where, h.b1, h.b2)
	}
	if h.eps <= 0 {
		return fmt.Errorf("nn: %s: Eps %v must be positive (the constructors set 1e-8)", where, h.eps)
	}
	if err := checkParams(where, params); err != nil {
		return err
	}
	if mo.state == nil {
		mo.state = make(map[*Param]*adamState)
	}
	for _, p := range params {
		if st := mo.state[p]; st != nil {
			if err := checkState(where, p, st.m); err != nil {
				return err
			}
		}
	}
	for _, p := range params {
		st := mo.state[p]
		if st == nil {
			st = &adamState{m: zerosLike(p.Value), v: zerosLike(p.Value)}
			mo.state[p] = st
		}
		st.t++
		c1 := 1 - math.Pow(h.b1, float64(st.t))
		c2 := 1 - math.Pow(h.b2, float64(st.t))
		switch p.Value.Dtype() {
		case tensor.Float32:
			adamStep(data[float32](p.Value), data[float32](p.Grad), data[float32](st.m), data[float32](st.v), h, c1, c2)
		default:
			adamStep(data[float64](p.Value), data[float64](p.Grad), data[float64](st.m), data[float64](st.v), h, c1, c2)
		}
	}
	return nil
}

func zerosLike(t *tensor.Dense) *tensor.Dense {
	return tensor.New(tensor.WithShape(t.Shape().Clone()...), tensor.Of(t.Dtype()))
}

// adamStep is one update of Adam (h.wd == 0) or AdamW: the decay, when
// there is one, first and on the parameter before the update.
func adamStep[T float](p, g, m, v []T, h adamHyper, c1, c2 float64) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	b1, b2 := h.b1, h.b2
	decay := 1 - h.lr*h.wd
	for i := range p {
		pi := float64(p[i])
		if h.wd != 0 {
			pi *= decay
		}
		gi := float64(g[i])
		mi := b1*float64(m[i]) + (1-b1)*gi
		vi := b2*float64(v[i]) + (1-b2)*gi*gi
		m[i], v[i] = T(mi), T(vi)
		p[i] = T(pi - h.lr*(mi/c1)/(math.Sqrt(vi/c2)+h.eps))
	}
}

func (mo *moments) export(where, kind string, params []*Param) (OptimState, error) {
	if err := checkNames(where, params); err != nil {
		return OptimState{}, err
	}
	out := OptimState{Kind: kind, Params: make(map[string]ParamState, len(params))}
	for _, p := range params {
		ps := ParamState{}
		if st := mo.state[p]; st != nil {
			ps.Step = st.t
			ps.Buffers = map[string]*tensor.Dense{BufExpAvg: st.m.Clone().(*tensor.Dense), BufExpAvgSq: st.v.Clone().(*tensor.Dense)}
		}
		out.Params[p.Name] = ps
	}
	return out, nil
}

func (mo *moments) restore(where, kind string, params []*Param, st OptimState) error {
	if err := matchState(where, kind, params, st); err != nil {
		return err
	}
	next := make(map[*Param]*adamState, len(params))
	for _, p := range params {
		ps := st.Params[p.Name]
		if ps.Step == 0 && len(ps.Buffers) == 0 {
			continue // never stepped
		}
		if ps.Step <= 0 {
			return fmt.Errorf("nn: %s: parameter %q has moments but step count %d; want a positive one", where, p.Name, ps.Step)
		}
		m, err := stateBuffer(where, p, ps, BufExpAvg)
		if err != nil {
			return err
		}
		v, err := stateBuffer(where, p, ps, BufExpAvgSq)
		if err != nil {
			return err
		}
		if len(ps.Buffers) != 2 {
			return fmt.Errorf("nn: %s: parameter %q has buffers %v; want %q and %q", where, p.Name, bufferNames(ps), BufExpAvg, BufExpAvgSq)
		}
		next[p] = &adamState{m: m, v: v, t: ps.Step}
	}
	if mo.state == nil {
		mo.state = make(map[*Param]*adamState)
	}
	for _, p := range params {
		delete(mo.state, p)
		if s := next[p]; s != nil {
			mo.state[p] = s
		}
	}
	return nil
}

// stateBytes is the bytes of the moments of ps.
func (mo *moments) stateBytes(ps []*Param) int64 {
	var n int64
	for _, p := range ps {
		if st := mo.state[p]; st != nil {
			n += tensorBytes(st.m) + tensorBytes(st.v)
		}
	}
	return n
}
