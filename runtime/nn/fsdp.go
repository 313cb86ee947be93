package nn

import (
	"errors"
	"fmt"
	"sync"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/collective"
)

// ParamStage is a pipeline stage with parameters: what FSDP and
// DataParallel wrap. *Sequential and *Swapping are ParamStages.
type ParamStage interface {
	Forward(x *tensor.Dense) (y *tensor.Dense, saved any, err error)
	BackwardInput(saved any, dy *tensor.Dense) (dx *tensor.Dense, err error)
	BackwardWeight(saved any, dy *tensor.Dense) error
	Params() []*Param
}

// MemStats is one rank's measured parameter memory, in bytes of elements
// (tensor headers and Go's allocator overhead left out).
type MemStats struct {
	// Resident: what the rank keeps between iterations. With FSDP the
	// shards (1/DP of each stage's parameters, padded), without it the
	// whole parameters.
	ParamBytes, GradBytes, OptimBytes int64
	// Gathered is the number of stages unsharded now (UNSHARD issued, no
	// RESHARD yet), PeakGathered the most at once so far: the figure the
	// verifier's FSDP peak (`ppgen verify`: "peak unsharded stages per
	// rank") bounds.
	Gathered, PeakGathered int
	// PeakGatheredBytes is the most bytes of gathered parameters and
	// not-yet-reduced whole gradients held at once.
	PeakGatheredBytes int64
}

// Resident is ParamBytes + GradBytes + OptimBytes.
func (m MemStats) Resident() int64 { return m.ParamBytes + m.GradBytes + m.OptimBytes }

// String is "resident R bytes (parameters P, gradients G, optimizer O)",
// followed by ", peak N stages gathered (B bytes)" when anything was
// gathered.
func (m MemStats) String() string {
	s := fmt.Sprintf("resident %d bytes (parameters %d, gradients %d, optimizer %d)", m.Resident(), m.ParamBytes, m.GradBytes, m.OptimBytes)
	if m.PeakGathered > 0 || m.PeakGatheredBytes > 0 {
		s += fmt.Sprintf(", peak %d stages gathered (%d bytes)", m.PeakGathered, m.PeakGatheredBytes)
	}
	return s
}

// FSDPGroup is one rank's fully sharded data parallelism: the stages it
// holds, each sharded over the rank's DP group (one collective.Comm), and
// their optimizer step. The collectives of all its stages run in the
// background in program order (collective.Async): every member of the DP
// group runs the same program, so they issue the same collectives in the
// same order.
//
// Each stage's parameters, flattened in Params order (L elements), are
// padded to n·k elements, k = ⌈L/n⌉ (collective.ChunkLen), n the group
// size; member d keeps elements [d·k, (d+1)·k): its shard, a Param of k
// elements (value and gradient) on which its optimizer steps, so the
// optimizer's state is sharded too. Padding elements have zero value and
// zero gradient, so SGD and Adam leave them zero.
type FSDPGroup struct {
	comm   *collective.Comm
	async  collective.Async
	stages []*FSDP

	mu            sync.Mutex
	gathered      int
	gatheredBytes int64
	mem           MemStats
}

// NewFSDPGroup returns the FSDP of one rank over comm, its DP group.
func NewFSDPGroup(comm *collective.Comm) (*FSDPGroup, error) {
	if comm == nil {
		return nil, errors.New("nn: NewFSDPGroup: nil *collective.Comm")
	}
	return &FSDPGroup{comm: comm}, nil
}

// FSDP is one stage sharded over its rank's DP group. It implements
// runtime/pipe's Stage and Sharded: Unshard starts the all-gather of the
// stage's parameters and returns; the stage's next Forward, BackwardInput or
// BackwardWeight waits for it (so a prefetched UNSHARD overlaps the compute
// steps between); Reshard frees the gathered parameters; ReduceGrad
// reduce-scatters the stage's gradients into the shard's. Gradients
// accumulate whole (in one buffer per stage, allocated at the first
// UNSHARD of an iteration) until ReduceGrad, across RESHARD and UNSHARD, as
// a schedule that reshards a stage between its backwards needs. It also
// implements pipe.Swapper and pipe.SwapWaiter by passing them to the inner
// stage (a Swapping), or handing the context back when the inner stage
// does not swap. Give runtime/pipe its AsStage, which also passes on a
// selective recompute's Select, Drop and Rebuild (pipe.Recomputable) when
// the inner stage has them.
//
// Every member must build the same initial parameters (the same seed):
// NewFSDP keeps this member's shard of them and frees the rest.
type FSDP struct {
	Stage ParamStage
	Name  string
	// Shard is this member's shard: Value and Grad of k elements.
	Shard *Param

	g      *FSDPGroup
	params []*Param
	shapes []tensor.Shape
	offs   []int
	dtype  tensor.Dtype
	length int // L
	k      int

	full     *tensor.Dense // gathered values (n·k), nil when sharded
	pending  *collective.Pending
	gradFull *tensor.Dense // whole gradients (n·k), nil after ReduceGrad
	reduced  bool          // ReduceGrad ran this iteration
}

// Wrap shards stage (named name in errors, e.g. "stage 2") over the group.
func (g *FSDPGroup) Wrap(stage ParamStage, name string) (*FSDP, error) {
	where := "FSDPGroup.Wrap(" + name + ")"
	if stage == nil {
		return nil, fmt.Errorf("nn: %s: nil stage", where)
	}
	ps := stage.Params()
	if len(ps) == 0 {
		return nil, fmt.Errorf("nn: %s: the stage has no parameters to shard", where)
	}
	if err := checkParams(where, ps); err != nil {
		return nil, err
	}
	f := &FSDP{Stage: stage, Name: name, g: g, params: ps, dtype: ps[0].Value.Dtype()}
	for _, p := range ps {
		if p.Value.Dtype() != f.dtype {
			return nil, fmt.Errorf("nn: %s: parameter %q is %v, the first one %v; a stage shards one dtype", where, p.Name, p.Value.Dtype(), f.dtype)
		}
		n := p.Value.Shape().TotalSize()
		if n > collective.MaxElems-f.length {
			return nil, fmt.Errorf("nn: %s: over %d parameters", where, int64(collective.MaxElems))
		}
		f.shapes = append(f.shapes, p.Value.Shape().Clone())
		f.offs = append(f.offs, f.length)
		f.length += n
	}
	n, r := g.comm.Size(), g.comm.Rank()
	f.k = collective.ChunkLen(f.length, n)
	lo, hi := min(r*f.k, f.length), min((r+1)*f.k, f.length)
	flat := f.flatValues()
	f.Shard = &Param{Name: name + " shard", Value: newFlat(f.dtype, f.k), Grad: newFlat(f.dtype, f.k)}
	copyRange(f.Shard.Value, 0, flat, lo, hi-lo)
	for _, p := range ps {
		p.Value, p.Grad = nil, nil // freed: the stage is sharded
	}
	g.stages = append(g.stages, f)
	g.mu.Lock()
	g.mem.ParamBytes += f.shardBytes()
	g.mem.GradBytes += f.shardBytes()
	g.mu.Unlock()
	return f, nil
}

func (f *FSDP) esize() int64 {
	if f.dtype == tensor.Float32 {
		return 4
	}
	return 8
}

func (f *FSDP) shardBytes() int64 { return int64(f.k) * f.esize() }
func (f *FSDP) fullBytes() int64  { return int64(f.k) * int64(f.g.comm.Size()) * f.esize() }

// Len is the stage's parameter count L; ShardLen the shard's k.
func (f *FSDP) Len() int      { return f.length }
func (f *FSDP) ShardLen() int { return f.k }

// flatValues returns the parameters' values flattened (before sharding).
func (f *FSDP) flatValues() *tensor.Dense {
	flat := newFlat(f.dtype, f.length)
	for i, p := range f.params {
		copyRange(flat, f.offs[i], p.Value, 0, f.shapes[i].TotalSize())
	}
	return flat
}

func newFlat(dt tensor.Dtype, n int) *tensor.Dense {
	if dt == tensor.Float32 {
		return tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))
	}
	return tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float64, n)))
}

// copyRange copies n elements of src from so to dst at do (same dtype).
func copyRange(dst *tensor.Dense, do int, src *tensor.Dense, so, n int) {
	if dst.Dtype() == tensor.Float32 {
		copy(dst.Float32s()[do:do+n], src.Float32s()[so:so+n])
		return
	}
	copy(dst.Float64s()[do:do+n], src.Float64s()[so:so+n])
}

// views makes, over buf, one tensor per parameter, of its shape.
func (f *FSDP) views(buf *tensor.Dense) []*tensor.Dense {
	out := make([]*tensor.Dense, len(f.params))
	for i, sh := range f.shapes {
		a, b := f.offs[i], f.offs[i]+sh.TotalSize()
		if f.dtype == tensor.Float32 {
			out[i] = tensor.New(tensor.WithShape(sh...), tensor.WithBacking(buf.Float32s()[a:b:b]))
		} else {
			out[i] = tensor.New(tensor.WithShape(sh...), tensor.WithBacking(buf.Float64s()[a:b:b]))
		}
	}
	return out
}

func (f *FSDP) label() string {
	if f.Name == "" {
		return "FSDP stage"
	}
	return f.Name
}

// Unshard starts gathering the stage's parameters and returns.
func (f *FSDP) Unshard() error {
	if f.full != nil {
		return fmt.Errorf("nn: FSDP.Unshard: %s is unsharded already; RESHARD it first", f.label())
	}
	n, r := f.g.comm.Size(), f.g.comm.Rank()
	buf := newFlat(f.dtype, n*f.k)
	copyRange(buf, r*f.k, f.Shard.Value, 0, f.k)
	extra := f.fullBytes()
	if f.gradFull == nil {
		f.gradFull = newFlat(f.dtype, n*f.k)
		for i, gv := range f.views(f.gradFull) {
			f.params[i].Grad = gv
		}
		extra += f.fullBytes()
	}
	f.full = buf
	f.g.gather(+1, extra)
	comm := f.g.comm
	f.pending = f.g.async.Go(func() error {
		if err := comm.AllGatherInto(buf); err != nil {
			return err
		}
		for i, v := range f.views(buf) {
			f.params[i].Value = v
		}
		return nil
	})
	return nil
}

// gather counts a stage unsharded (d = +1, with bytes allocated) or
// resharded (d = -1, bytes freed).
func (g *FSDPGroup) gather(d int, bytes int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gathered += d
	g.gatheredBytes += bytes
	g.mem.Gathered = g.gathered
	g.mem.PeakGathered = max(g.mem.PeakGathered, g.gathered)
	g.mem.PeakGatheredBytes = max(g.mem.PeakGatheredBytes, g.gatheredBytes)
}

func (g *FSDPGroup) freed(bytes int64) {
	g.mu.Lock()
	g.gatheredBytes -= bytes
	g.mu.Unlock()
}

// ready waits for the stage's all-gather; it fails when the stage is sharded.
func (f *FSDP) ready(where string) error {
	if f.full == nil {
		return fmt.Errorf("nn: FSDP.%s: %s computes while its parameters are sharded: UNSHARD must come before (a schedule lowered with -fsdp, or DataParallel for a schedule without FSDP steps)", where, f.label())
	}
	if err := f.pending.Wait(); err != nil {
		return fmt.Errorf("nn: FSDP.%s: %s: the all-gather of its UNSHARD failed: %w", where, f.label(), err)
	}
	return nil
}

// Forward waits for the stage's parameters and runs the inner stage.
func (f *FSDP) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	if err := f.ready("Forward"); err != nil {
		return nil, nil, err
	}
	return f.Stage.Forward(x)
}

// BackwardInput waits for the stage's parameters and runs the inner stage.
func (f *FSDP) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	if err := f.ready("BackwardInput"); err != nil {
		return nil, err
	}
	return f.Stage.BackwardInput(saved, dy)
}

// BackwardWeight waits for the stage's parameters and runs the inner stage.
func (f *FSDP) BackwardWeight(saved any, dy *tensor.Dense) error {
	if err := f.ready("BackwardWeight"); err != nil {
		return err
	}
	return f.Stage.BackwardWeight(saved, dy)
}

// Backward runs BackwardInput and then BackwardWeight.
func (f *FSDP) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(f.BackwardInput, f.BackwardWeight, saved, dy)
}

// Reshard frees the gathered parameters (after their all-gather ended).
func (f *FSDP) Reshard() error {
	if f.full == nil {
		return fmt.Errorf("nn: FSDP.Reshard: %s is not unsharded: RESHARD needs an UNSHARD before it", f.label())
	}
	err := f.pending.Wait()
	for _, p := range f.params {
		p.Value = nil
	}
	f.full, f.pending = nil, nil
	f.g.gather(-1, -f.fullBytes())
	if err != nil {
		return fmt.Errorf("nn: FSDP.Reshard: %s: the all-gather of its UNSHARD failed: %w", f.label(), err)
	}
	return nil
}

// ReduceGrad reduce-scatters the stage's whole gradients over the group
// (summed in collective's fixed order), adds this member's chunk to the
// shard's gradient and frees the whole gradients.
func (f *FSDP) ReduceGrad() error {
	if f.gradFull == nil {
		return fmt.Errorf("nn: FSDP.ReduceGrad: %s has no gradients to reduce: no UNSHARD since its last REDUCE_GRAD", f.label())
	}
	if f.reduced {
		return fmt.Errorf("nn: FSDP.ReduceGrad: %s: a second REDUCE_GRAD in one iteration", f.label())
	}
	buf, comm := f.gradFull, f.g.comm
	if err := f.g.async.Go(func() error { return comm.ReduceScatterInto(buf) }).Wait(); err != nil {
		return fmt.Errorf("nn: FSDP.ReduceGrad: %s: %w", f.label(), err)
	}
	off := comm.Rank() * f.k
	if f.dtype == tensor.Float32 {
		addInto(f.Shard.Grad.Float32s(), buf.Float32s()[off:off+f.k])
	} else {
		addInto(f.Shard.Grad.Float64s(), buf.Float64s()[off:off+f.k])
	}
	for _, p := range f.params {
		p.Grad = nil
	}
	f.gradFull, f.reduced = nil, true
	f.g.freed(f.fullBytes())
	return nil
}

func addInto[T float](dst, src []T) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// Offload passes SWAP_LAUNCH_OFFLOAD to the inner stage when it swaps.
func (f *FSDP) Offload(saved any) (any, error) {
	if sw, ok := f.Stage.(interface{ Offload(any) (any, error) }); ok {
		return sw.Offload(saved)
	}
	return saved, nil
}

// Load passes SWAP_LAUNCH_LOAD to the inner stage when it swaps.
func (f *FSDP) Load(handle any) (any, error) {
	if sw, ok := f.Stage.(interface{ Load(any) (any, error) }); ok {
		return sw.Load(handle)
	}
	return handle, nil
}

// WaitOffload passes SWAP_WAIT_OFFLOAD to the inner stage when it waits.
func (f *FSDP) WaitOffload(handle any) error {
	if sw, ok := f.Stage.(interface{ WaitOffload(any) error }); ok {
		return sw.WaitOffload(handle)
	}
	return nil
}

// Params returns the shards of the group's stages, in Wrap order: what the
// optimizer steps on.
func (g *FSDPGroup) Params() []*Param {
	out := make([]*Param, len(g.stages))
	for i, f := range g.stages {
		out[i] = f.Shard
	}
	return out
}

// OptStep returns runtime/pipe's OptStep hook: it reduces the gradients of
// any stage that no REDUCE_GRAD reduced this iteration (a schedule without
// REDUCE_GRAD steps), runs before (in order: gradient clipping,
// ClipGradNorm on the shards, goes there), steps opt on the shards and
// zeroes their gradients.
func (g *FSDPGroup) OptStep(opt Optimizer, before ...func() error) func() error {
	return func() error {
		if err := g.async.Wait(); err != nil {
			return fmt.Errorf("nn: FSDP OPT_STEP: a collective failed: %w", err)
		}
		for _, f := range g.stages {
			if !f.reduced && f.gradFull != nil {
				if err := f.ReduceGrad(); err != nil {
					return err
				}
			}
		}
		for _, f := range before {
			if err := f(); err != nil {
				return err
			}
		}
		ps := g.Params()
		if err := opt.Step(ps); err != nil {
			return err
		}
		ZeroGrad(ps)
		for _, f := range g.stages {
			f.reduced = false
		}
		g.mu.Lock()
		g.mem.OptimBytes = optimBytes(opt, ps)
		g.mu.Unlock()
		return nil
	}
}

// Stats returns the group's measured memory.
func (g *FSDPGroup) Stats() MemStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mem
}

// Gather returns the stage's whole parameters, gathered from the group
// (every member must call it, in the same order): for checks and
// checkpoints. The stage stays sharded.
func (f *FSDP) Gather() ([]*tensor.Dense, error) {
	if err := f.g.async.Wait(); err != nil {
		return nil, err
	}
	n, r := f.g.comm.Size(), f.g.comm.Rank()
	buf := newFlat(f.dtype, n*f.k)
	copyRange(buf, r*f.k, f.Shard.Value, 0, f.k)
	if err := f.g.comm.AllGatherInto(buf); err != nil {
		return nil, fmt.Errorf("nn: FSDP.Gather: %s: %w", f.label(), err)
	}
	return f.views(buf), nil
}

// WholeMem is the memory of parameters held whole (not sharded): their
// values, their gradients (one buffer each, whether or not allocated yet)
// and opt's state for them (as optimBytes counts it).
func WholeMem(ps []*Param, opt Optimizer) MemStats {
	var m MemStats
	for _, p := range ps {
		b := int64(p.Value.DataSize()) * int64(p.Value.Dtype().Size())
		m.ParamBytes += b
		m.GradBytes += b
	}
	m.OptimBytes = optimBytes(opt, ps)
	return m
}

// optimBytes is the bytes of opt's state for ps (SGD's velocities, Adam's
// and AdamW's moments); 0 for other optimizers.
func optimBytes(opt Optimizer, ps []*Param) int64 {
	if o, ok := opt.(interface{ stateBytes([]*Param) int64 }); ok {
		return o.stateBytes(ps)
	}
	return 0
}
