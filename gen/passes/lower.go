package passes

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

// Options configures Lower.
type Options struct {
	// Comm configures comm insertion.
	Comm CommOptions
	// NoData skips InsertData (for programs whose data comes from elsewhere).
	NoData bool
	// NoOptStep skips InsertOptStep (for trainers that step the optimizer
	// outside the generated code).
	NoOptStep bool
	// ForwardOnly lowers the forward-only program of the compute order
	// (ForwardOnly: evaluation and inference, no backward, no OPT_STEP).
	// It takes none of the options that work on backwards (split, overlap,
	// dxdw, W fill, swap, FSDP).
	ForwardOnly bool

	// Overlap pairs each backward that a forward follows into an
	// OVERLAP_B_F step (the Overlap pass; ir.Options.Overlap).
	Overlap bool
	// DxDwInOverlap runs the backward inside each overlap as I, with its W
	// right after the composite (the DxDwInOverlap pass;
	// ir.Options.DxDwInOverlap). Without Overlap, the compute order must
	// already hold overlaps (dualpipev's OVERLAP_F_B, say).
	DxDwInOverlap bool
	// Split replaces every full backward B by I then W (the Split pass;
	// ir.Options.Split).
	Split bool
	// FillW lets W steps float into bubbles (the FillW pass, under the
	// cost model of Comm), after the passes above.
	FillW bool
	// FSDP, when positive, adds UNSHARD, RESHARD and REDUCE_GRAD steps with
	// at most FSDP stages unsharded per rank at once (the FSDP pass).
	FSDP int
	// FSDPPrefetch, with FSDP, issues each UNSHARD up to FSDPPrefetch
	// compute steps ahead of the compute step that needs it, as far as the
	// window allows (FSDPOptions.Prefetch; 0: right before it).
	FSDPPrefetch int
	// OwnedData runs mpipe's owned-micro data loading (the OwnedData
	// pass) after the data and comm passes.
	OwnedData bool
	// MpipeOwners is OwnedData's ownership mode: OwnersMin ("" too) or
	// OwnersFull (ParseOwners).
	MpipeOwners string
	// ShipLabels ships the labels along the pipe with DATA_SEND/DATA_RECV
	// instead of loading them on the last stage's rank (the ShipLabels
	// pass, after the data and comm passes).
	ShipLabels bool
	// Swap, when positive, offloads the saved activations of every chunk
	// whose forward and backward have at least Swap compute steps between
	// them (the Swap pass; at least 2).
	Swap int
	// Batch merges each run of adjacent transfers of a rank into one
	// batch, BATCH_BEGIN .. BATCH_END, that the runtime issues as one
	// group (the Coalesce pass, after swap).
	Batch bool
	// Ties are the tied stage pairs (-tie A:B): the Tie pass places each
	// tie's gradient exchange (TIE_GRAD) before OPT_STEP.
	Ties []ir.Tie
	// ClipNorm places one ALL_REDUCE on every rank before OPT_STEP (the
	// Clip pass, after "opt"): the reduction of the global gradient norm
	// that clipping needs (-clip).
	ClipNorm bool
	// Marked, when not nil, gives -recompute model (and selective:S=model)
	// what the -model file marks for recompute in each of a program's
	// stages (of copies model copies): gen/model's Model.Marks of the split
	// gen records in Spec.Layers; gen/gencmd and gen/auto set it with
	// -model.
	Marked func(stages, copies int) ([]ir.Mark, error)
	// Set holds the values of the options the passes declare in their
	// own files (Declared: -recompute, ...), by Option.Name; "" or absent
	// is off. Pipeline runs the pass of each one set.
	Set map[string]string
}

// LowerInfo reports what lowering produced.
type LowerInfo struct {
	// Passes names the passes that ran, in order.
	Passes []string
	// Slots is the number of buffer slots per rank (AssignSlots).
	Slots []int
	// RecvDistance is the mean number of compute steps between a receive's
	// post and its consumer (see RecvDistance); RecvDistances is per rank.
	RecvDistance  float64
	RecvDistances []float64
}

// Pass is one lowering pass: a named function from program to program.
// A pass that runs after "comm" may modify its input's step lists in place:
// InsertComm always returns fresh lists, so the caller's program is never
// touched (sub-step slices are shared with it, and must be copied before
// writing).
type Pass struct {
	Name string
	Run  func(ir.Program) (ir.Program, error)
}

// Pipeline returns the passes Lower runs for opt, in order. It is the
// extension point of the lowering: the rewrites of the compute order go
// before "comm" ("overlap", then "dxdw", then "split", then "fillw": pairing
// comes first so that -split -overlap pairs full backwards and then splits
// them, which also splits the backward inside each overlap, as
// -dxdw-in-overlap does), data transfers along the pipe after it, FSDP
// (UNSHARD/RESHARD/REDUCE_GRAD), swap, coalescing, ties, OPT_STEP and the
// collectives of -clip before "slots", which
// stays last because it assigns buffers to every step the others add
// (docs/design.md §5 gives the order). A new pass declares its Option in its
// own file (option.go), which places it here by Option.Before; the passes
// above are the older ones, each one Pass entry guarded by its option.
func Pipeline(opt Options) []Pass {
	var ps []Pass
	if opt.ForwardOnly {
		ps = append(ps, Pass{Name: "forward-only", Run: func(p ir.Program) (ir.Program, error) {
			if err := checkForwardOnly(opt); err != nil {
				return ir.Program{}, err
			}
			return ForwardOnly(p)
		}})
	}
	if opt.Overlap {
		ps = append(ps, Pass{Name: "overlap", Run: Overlap})
	}
	if opt.DxDwInOverlap {
		ps = append(ps, Pass{Name: "dxdw", Run: func(p ir.Program) (ir.Program, error) {
			if err := CheckOptions(p, opt); err != nil {
				return ir.Program{}, err
			}
			return DxDwInOverlap(p)
		}})
	}
	if opt.Split {
		ps = append(ps, Pass{Name: "split", Run: Split})
	}
	if opt.FillW {
		ps = append(ps, Pass{Name: "fillw", Run: func(p ir.Program) (ir.Program, error) { return FillW(p, opt.Comm.cost()) }})
	}
	if opt.NoData {
		ps = append(ps, Pass{Name: "comm", Run: func(p ir.Program) (ir.Program, error) { return InsertComm(p, opt.Comm) }})
	} else {
		// InsertData then InsertComm, fused: the same result without
		// building the intermediate program (see insertDataComm). A pass
		// that must run between them splits this entry back into the two.
		ps = append(ps, Pass{Name: "data+comm", Run: func(p ir.Program) (ir.Program, error) { return insertDataCommFast(p, opt.Comm) }})
	}
	if opt.OwnedData {
		ps = append(ps, Pass{Name: "mpipe", Run: func(p ir.Program) (ir.Program, error) { return OwnedDataMode(p, opt.MpipeOwners) }})
	}
	if opt.ShipLabels {
		ps = append(ps, Pass{Name: "labels", Run: ShipLabels})
	}
	if opt.FSDP > 0 {
		ps = append(ps, Pass{Name: "fsdp", Run: func(p ir.Program) (ir.Program, error) {
			return FSDP(p, FSDPOptions{Window: opt.FSDP, Prefetch: opt.FSDPPrefetch})
		}})
	}
	if opt.Swap > 0 {
		ps = append(ps, Pass{Name: "swap", Run: func(p ir.Program) (ir.Program, error) { return Swap(p, opt.Swap) }})
	}
	if opt.Batch {
		ps = append(ps, Pass{Name: "coalesce", Run: Coalesce})
	}
	if len(opt.Ties) > 0 {
		ps = append(ps, Pass{Name: "tie", Run: func(p ir.Program) (ir.Program, error) { return Tie(p, opt.Ties) }})
	}
	if !opt.NoOptStep && !opt.ForwardOnly {
		// In place: it runs after "comm", whose output nobody else holds.
		ps = append(ps, Pass{Name: "opt", Run: func(p ir.Program) (ir.Program, error) { return insertOptStep(p, true), nil }})
	}
	if opt.ClipNorm {
		ps = append(ps, Pass{Name: "clip", Run: func(p ir.Program) (ir.Program, error) { return Clip(p), nil }})
	}
	ps = append(ps, Pass{Name: "slots", Run: func(p ir.Program) (ir.Program, error) {
		// In place: it runs after "comm", whose output nobody else holds.
		q, _, err := assignSlots(p, true)
		return q, err
	}})
	return withDeclared(ps, opt)
}

// Lower turns a compute-only program into a runnable one by running
// Pipeline(opt): by default InsertData, InsertComm, AssignSlots. The input is
// not modified. Errors carry the failing pass's name. It is RunPipeline,
// then Measure of the result.
func Lower(p ir.Program, opt Options) (ir.Program, LowerInfo, error) {
	q, names, err := RunPipeline(p, opt)
	if err != nil {
		return ir.Program{}, LowerInfo{Passes: names}, err
	}
	info := Measure(q)
	info.Passes = names
	return q, info, nil
}

// RunPipeline runs Pipeline(opt) on p (not modified) and returns the
// lowered program and the names of the passes that ran, in order; errors
// carry the failing pass's name. Lower adds Measure; gen measures beside
// its verify.
func RunPipeline(p ir.Program, opt Options) (ir.Program, []string, error) {
	var names []string
	if err := checkSet(opt.Set); err != nil {
		return ir.Program{}, names, fmt.Errorf("lowering: %w", err)
	}
	for _, pass := range Pipeline(opt) {
		q, err := pass.Run(p)
		if err != nil {
			return ir.Program{}, names, fmt.Errorf("lowering (pass %s): %w", pass.Name, err)
		}
		p = q
		names = append(names, pass.Name)
	}
	return p, names, nil
}

// Measure returns a lowered program's LowerInfo but for Passes: its slot
// counts and its receive distances, from one walk over its steps.
func Measure(p ir.Program) LowerInfo {
	info := LowerInfo{Slots: make([]int, len(p.Ranks)), RecvDistances: make([]float64, len(p.Ranks))}
	if sum, n := recvDistance(p, info.RecvDistances, info.Slots); n > 0 {
		info.RecvDistance = float64(sum) / float64(n)
	}
	return info
}

// SlotCounts returns, per rank, one more than the largest slot a step of the
// rank uses (0 for a rank without slots).
func SlotCounts(p ir.Program) []int {
	out := make([]int, len(p.Ranks))
	for r, steps := range p.Ranks {
		n := 0
		for i := range steps {
			st := &steps[i]
			n = max(n, st.Slot+1)
			for k := range st.Sub {
				n = max(n, st.Sub[k].Slot+1)
			}
		}
		out[r] = n
	}
	return out
}
