package nn

import (
	"errors"
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/collective"
)

// DataParallel is plain data parallelism for one rank's parameters (a
// schedule without FSDP steps): every member of the DP group holds the
// whole parameters; at OPT_STEP the gradients, flattened into one buffer,
// are all-reduced (summed, in collective's fixed order) before the
// optimizer steps, so every member takes the same step. The loss scale must
// count the micro-batches of all members (1/(M·DP) for M per member), since
// the gradients are summed, not averaged. Every member must build the same
// initial parameters.
type DataParallel struct {
	comm   *collective.Comm
	params []*Param
	dtype  tensor.Dtype
	length int
	mem    MemStats
}

// NewDataParallel returns the data parallelism of params (one dtype) over
// comm.
func NewDataParallel(comm *collective.Comm, params []*Param) (*DataParallel, error) {
	const where = "NewDataParallel"
	if comm == nil {
		return nil, errors.New("nn: NewDataParallel: nil *collective.Comm")
	}
	if len(params) == 0 {
		return nil, errors.New("nn: NewDataParallel: no parameters")
	}
	if err := checkParams(where, params); err != nil {
		return nil, err
	}
	d := &DataParallel{comm: comm, params: params, dtype: params[0].Value.Dtype()}
	for _, p := range params {
		if p.Value.Dtype() != d.dtype {
			return nil, fmt.Errorf("nn: %s: parameter %q is %v, the first one %v; one dtype per DataParallel", where, p.Name, p.Value.Dtype(), d.dtype)
		}
		n := p.Value.Shape().TotalSize()
		if n > collective.MaxElems-d.length {
			return nil, fmt.Errorf("nn: %s: over %d parameters", where, int64(collective.MaxElems))
		}
		d.length += n
	}
	es := int64(d.dtype.Size())
	d.mem.ParamBytes, d.mem.GradBytes = int64(d.length)*es, int64(d.length)*es
	return d, nil
}

// AllReduceGrads replaces every gradient with its sum over the group.
func (d *DataParallel) AllReduceGrads() error {
	if err := checkParams("DataParallel.AllReduceGrads", d.params); err != nil {
		return err
	}
	flat := newFlat(d.dtype, d.length)
	off := 0
	for _, p := range d.params {
		n := p.Grad.Shape().TotalSize()
		copyRange(flat, off, p.Grad, 0, n)
		off += n
	}
	if err := d.comm.AllReduce(flat); err != nil {
		return fmt.Errorf("nn: DataParallel: all-reduce of %d gradients: %w", d.length, err)
	}
	off = 0
	for _, p := range d.params {
		n := p.Grad.Shape().TotalSize()
		copyRange(p.Grad, 0, flat, off, n)
		off += n
	}
	return nil
}

// OptStep returns runtime/pipe's OptStep hook: all-reduce the gradients,
// run before (in order: gradient clipping, ClipGradNorm, goes there), step
// opt, zero the gradients.
func (d *DataParallel) OptStep(opt Optimizer, before ...func() error) func() error {
	return func() error {
		if err := d.AllReduceGrads(); err != nil {
			return err
		}
		for _, f := range before {
			if err := f(); err != nil {
				return err
			}
		}
		if err := opt.Step(d.params); err != nil {
			return err
		}
		ZeroGrad(d.params)
		d.mem.OptimBytes = optimBytes(opt, d.params)
		return nil
	}
}

// Params returns the parameters, as given to NewDataParallel.
func (d *DataParallel) Params() []*Param { return append([]*Param(nil), d.params...) }

// Stats returns the measured memory: the whole parameters, gradients and
// optimizer state (nothing is gathered).
func (d *DataParallel) Stats() MemStats { return d.mem }
