package train

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/checkpoint/nncheckpoint"
	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// Reference trains c's model without a pipeline: the reference a pipeline
// job is checked against (a trainer's -check). It builds one copy of the
// model's layers (the stages of one model copy, Layers), and runs each
// step's micro-batches of every replica (Config.Data(step, replica),
// replicas in order, micro-batches in order) forward and backward through
// them with the same loss scale (1/(M·DP)), then measures the global
// gradient norm, clips by it (Config.Clip), sets the learning rate of
// Config.LR and steps Config.Optimizer, as Run does.
//
// The gradients are summed as the pipeline sums them: within a replica
// micro-batch by micro-batch, a tie's two copies as stage A's plus stage
// B's (both copies then step alike, as after TIE_GRAD), and the replicas'
// sums in replica order (the member-order all-reduce of nn.DataParallel,
// the reduce-scatter of FSDP). So the losses of a job of one model copy
// equal it bit for bit, and so do its parameters while no step clips; the
// gradient norm's squares are summed per rank and then over the ranks
// where the reference sums them in one, an ulp apart, which a clipping
// step carries into the parameters. Dualpipe's two copies sum their
// halves of the micro-batches apart and then add them, which rounds
// apart by a few ulps. runtime/train's tests bound all of these by 1e-12
// relative, the bar of a trainer's -check in float64.
//
// Reference honours Steps and StopAfter; it does not evaluate, write
// metrics or checkpoints, resume, open a world, wrap stages or interpret.
// Its Result's Records hold each step's loss, learning rate and gradient
// norm; its Layers hold the trained layers (one copy), as Run names them.
func Reference(c Config) (*Result, error) {
	c, err := c.check()
	if err != nil {
		return nil, err
	}
	sp := c.Train.Spec
	m, err := newModel(c)
	if err != nil {
		return nil, err
	}
	opt := c.Optimizer()
	loss := c.Loss(1 / float64(sp.Micro*c.DP))
	res := &Result{Layers: m.layers}
	var tokens int64
	for step := range c.last() {
		var total []*tensor.Dense // the replicas' gradients summed so far, by parameter
		stepLoss := 0.0
		for d := range c.DP {
			src, err := c.Data(step, d)
			if err != nil {
				return nil, fmt.Errorf("train: reference: data of step %d, replica %d: %w", step, d, err)
			}
			l, err := m.replica(src, loss, sp.Micro)
			if err != nil {
				return nil, fmt.Errorf("train: reference: step %d, replica %d: %w", step+1, d, err)
			}
			stepLoss += l
			if err := m.sumTies(); err != nil {
				return nil, fmt.Errorf("train: reference: step %d, replica %d: %w", step+1, d, err)
			}
			if c.DP == 1 {
				break
			}
			for i, p := range m.params {
				if d == 0 {
					total = append(total, p.Grad.Clone().(*tensor.Dense))
				} else if err := add(total[i], p.Grad); err != nil {
					return nil, fmt.Errorf("train: reference: %w", err)
				}
			}
			nn.ZeroGrad(m.params)
		}
		for i, p := range m.params {
			if total != nil {
				p.Grad.Zero()
				if err := add(p.Grad, total[i]); err != nil {
					return nil, fmt.Errorf("train: reference: %w", err)
				}
			}
		}
		maxNorm := c.Clip
		if maxNorm == 0 {
			maxNorm = math.MaxFloat64 // measure only
		}
		norm, err := nn.ClipGradNorm(nil, m.counted, m.params, maxNorm)
		if err != nil && !(c.Clip == 0 && errors.Is(err, nn.ErrNonFiniteNorm)) {
			return nil, fmt.Errorf("train: reference: step %d: %w", step+1, err)
		}
		lr := c.LR.LR(step)
		opt.SetLR(lr)
		if err := opt.Step(m.params); err != nil {
			return nil, fmt.Errorf("train: reference: step %d: %w", step+1, err)
		}
		nn.ZeroGrad(m.params)
		tokens += c.TokensPerStep
		nan := math.NaN()
		res.Records = append(res.Records, metrics.Record{
			Step: int64(step + 1), Loss: stepLoss, LR: lr, GradNorm: norm, Tokens: tokens,
			EvalLoss: nan, TokensPerSec: nan, StepSeconds: nan, Bubble: nan,
		})
	}
	return res, nil
}

// model is Reference's model: the stages of one model copy.
type model struct {
	stages  []*nn.Sequential
	tower   nn.Layer            // Config.Tower's one replica, nil without
	params  []*nn.Param         // every parameter, in stage order
	counted []*nn.Param         // those counted in the gradient norm
	ties    [][2][]*nn.Param    // per tie: stage A's and stage B's tied parameters
	layers  map[int][]*nn.Param // by model layer
}

// newModel builds the stages of c's first model copy from the layer
// factory, named as Run names them.
func newModel(c Config) (*model, error) {
	sp := c.Train.Spec
	m := &model{layers: map[int][]*nn.Param{}}
	tiedParams := map[int][]*nn.Param{}
	for s := range sp.Stages / max(sp.Copies, 1) {
		var ls []nn.Layer
		var ps []*nn.Param
		for i := c.Layers[s][0]; i < c.Layers[s][1]; i++ {
			l, err := c.Layer(i)
			if err != nil {
				return nil, fmt.Errorf("train: reference: layer %d: %w", i, err)
			}
			if l == nil {
				return nil, fmt.Errorf("train: reference: the layer factory returned nil for layer %d", i)
			}
			lps := l.Params()
			for j, p := range lps {
				p.Name = nncheckpoint.NNName(j, p.Name)
			}
			m.layers[i] = lps
			if t, ok := l.(tiedLayer); ok {
				tiedParams[s] = append(tiedParams[s], t.TiedParams()...)
			}
			ls, ps = append(ls, l), append(ps, lps...)
		}
		names := make([]string, len(ps))
		for j, p := range ps {
			names[j] = p.Name
		}
		m.stages = append(m.stages, nn.NewSequential(ls...))
		for j, p := range ps {
			p.Name = names[j] // as in Run: NewSequential prefixed the position in the stage
		}
		m.params = append(m.params, ps...)
	}
	var skip []*nn.Param
	for _, t := range sp.Ties {
		a, b := tiedParams[t.A], tiedParams[t.B]
		if len(a) != len(b) {
			return nil, fmt.Errorf("train: reference: tie %d:%d: stage %d declares %d tied parameters, stage %d %d", t.A, t.B, t.A, len(a), t.B, len(b))
		}
		m.ties = append(m.ties, [2][]*nn.Param{a, b})
		skip = append(skip, b...)
	}
	if c.Tower != nil {
		t, err := c.Tower()
		if err != nil {
			return nil, fmt.Errorf("train: reference: the tower: %w", err)
		}
		if t == nil {
			return nil, errors.New("train: reference: Config.Tower returned nil")
		}
		m.tower = t
		m.params = append(m.params, t.Params()...) // after the stages', as Run adds them
	}
	m.counted = slices.DeleteFunc(slices.Clone(m.params), func(p *nn.Param) bool { return slices.Contains(skip, p) })
	return m, nil
}

// replica runs the micro micro-batches of src forward and backward,
// adding their gradients, and returns the sum of their losses.
func (m *model) replica(src pipe.DataSource, loss pipe.Loss, micro int) (float64, error) {
	sum := 0.0
	saved := make([]any, len(m.stages))
	for mb := range micro {
		x, err := src.Input(mb)
		if err != nil {
			return 0, fmt.Errorf("micro-batch %d: %w", mb, err)
		}
		var towerSaved any
		if m.tower != nil {
			if x, towerSaved, err = m.tower.Forward(x); err != nil {
				return 0, fmt.Errorf("micro-batch %d, the tower: %w", mb, err)
			}
		}
		for s, st := range m.stages {
			if x, saved[s], err = st.Forward(x); err != nil {
				return 0, fmt.Errorf("micro-batch %d, stage %d: %w", mb, s, err)
			}
		}
		y, err := src.Target(mb)
		if err != nil {
			return 0, fmt.Errorf("micro-batch %d: %w", mb, err)
		}
		l, dy, err := loss.Loss(x, y)
		if err != nil {
			return 0, fmt.Errorf("micro-batch %d: loss: %w", mb, err)
		}
		sum += l
		for s := len(m.stages) - 1; s >= 0; s-- {
			if dy, err = m.stages[s].Backward(saved[s], dy); err != nil {
				return 0, fmt.Errorf("micro-batch %d, stage %d: %w", mb, s, err)
			}
		}
		if m.tower != nil {
			if err := layerBackward(m.tower, towerSaved, dy); err != nil {
				return 0, fmt.Errorf("micro-batch %d, the tower: %w", mb, err)
			}
		}
	}
	return sum, nil
}

// sumTies sets both copies' gradients of every tied parameter to stage A's
// plus stage B's, as TIE_GRAD does.
func (m *model) sumTies() error {
	for _, t := range m.ties {
		for i, a := range t[0] {
			b := t[1][i]
			if err := add(a.Grad, b.Grad); err != nil {
				return fmt.Errorf("tied parameter %s: %w", a.Name, err)
			}
			b.Grad.Zero()
			if err := add(b.Grad, a.Grad); err != nil {
				return fmt.Errorf("tied parameter %s: %w", a.Name, err)
			}
		}
	}
	return nil
}

// add adds src to dst element by element, in their dtype (float64 or
// float32, both the same).
func add(dst, src *tensor.Dense) error {
	switch d := dst.Data().(type) {
	case []float64:
		v, ok := src.Data().([]float64)
		if !ok || len(v) != len(d) {
			return fmt.Errorf("adding gradients of %v %v to %v %v", src.Dtype(), src.Shape(), dst.Dtype(), dst.Shape())
		}
		for i := range d {
			d[i] += v[i]
		}
	case []float32:
		v, ok := src.Data().([]float32)
		if !ok || len(v) != len(d) {
			return fmt.Errorf("adding gradients of %v %v to %v %v", src.Dtype(), src.Shape(), dst.Dtype(), dst.Shape())
		}
		for i := range d {
			d[i] += v[i]
		}
	default:
		return fmt.Errorf("adding gradients of dtype %v: want float64 or float32", dst.Dtype())
	}
	return nil
}
