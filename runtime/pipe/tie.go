package pipe

import (
	"fmt"
	"slices"
	"strings"

	"gorgonia.org/tensor"
)

// Tie names two stages that hold one copy each of a shared parameter
// (`ppgen gen -tie A:B`; Spec.Ties): an embedding on the first stage tied to
// the LM head on the last. Generated code writes A < B.
type Tie struct{ A, B int }

// Tied is implemented by a stage that holds one copy of a parameter tied to another stage's
// (the spec's -tie). TiedGrads returns the gradients of its tied parameters, in a fixed order
// that both stages of a tie agree on; at the exchange the runtime replaces each with the sum
// of the two copies' gradients (both ranks get the same bits), before OptStep.
type Tied interface{ TiedGrads() []*tensor.Dense }

// checkTies validates Spec.Ties (Validate): stages in range, two different
// ones per tie, each stage in one tie at most, one model copy.
func checkTies(s Spec) error {
	seen := make(map[int]bool, 2*len(s.Ties))
	for _, t := range s.Ties {
		switch {
		case t.A < 0 || t.A >= s.Stages || t.B < 0 || t.B >= s.Stages:
			return fmt.Errorf("tie %d:%d names a stage outside [0, %d)", t.A, t.B, s.Stages)
		case t.A == t.B:
			return fmt.Errorf("tie %d:%d ties a stage to itself", t.A, t.B)
		case seen[t.A] || seen[t.B]:
			return fmt.Errorf("tie %d:%d names a stage of an earlier tie; a stage takes part in one tie", t.A, t.B)
		case s.Copies > 1:
			return fmt.Errorf("tie %d:%d with Copies = %d: ties take one pipeline", t.A, t.B, s.Copies)
		}
		seen[t.A], seen[t.B] = true, true
	}
	return nil
}

// tieOf returns the tie stage s takes part in.
func (s Spec) tieOf(stage int) (Tie, bool) {
	for _, t := range s.Ties {
		if t.A == stage || t.B == stage {
			return t, true
		}
	}
	return Tie{}, false
}

// requireTied checks, in New, that every stage of this rank that takes part
// in a tie implements Tied (stages are as the Config gave them).
func requireTied(sp Spec, r int, stages []Stage) error {
	for _, t := range sp.Ties {
		for _, s := range []int{t.A, t.B} {
			if sp.RankOf[s] != r {
				continue
			}
			if _, ok := stages[s].(Tied); !ok {
				return fmt.Errorf("pipe: rank %d: stage %d is a %T, which does not implement pipe.Tied (TiedGrads() []*tensor.Dense): Spec.Ties ties it to stage %d, whose gradients TIE_GRAD sums with its own; return the tied parameters' gradients from TiedGrads (runtime/nn: nn.Tie wraps a stage with its tied parameters)", r, s, stages[s], t.A+t.B-s)
			}
		}
	}
	return nil
}

// TieGrad runs TIE_GRAD of stage: it sums the gradients of the tie's two
// copies (Tied.TiedGrads of stage and of the stage tied to it), stage A's
// plus stage B's element by element, into both, so both ranks hold the same
// bits and take the same optimizer step. When the other stage lives on
// another rank (peer), it first waits for this rank's posted transfers, then
// sends its gradients to the peer and receives the peer's (the lower rank
// sends first, so a transport whose sends wait for their receive does not
// hang); ppgen's verifier models that as a rendezvous after both streams
// drained (docs/design.md §6). When both stages are on this rank, the step
// names the tie's first stage and the sum is local. A tie is summed once per
// iteration, before OptStep.
//
//go:noinline
func (x *Exec) TieGrad(stage int) {
	k := OpTieGrad
	if x.failedNow() || !x.ownStage(k, stage) {
		return
	}
	if x.batch != nil {
		x.stepFail(k, stage, -1, -1, fmt.Errorf("inside BATCH_BEGIN .. BATCH_END, which holds only transfers (BATCH_END first)"))
		return
	}
	t, ok := x.spec.tieOf(stage)
	if !ok {
		x.stepFail(k, stage, -1, -1, fmt.Errorf("stage %d is in no tie (Spec.Ties = %v); generate with -tie A:B", stage, x.spec.Ties))
		return
	}
	a, b := min(t.A, t.B), max(t.A, t.B)
	other := a + b - stage
	peer := x.spec.RankOf[other]
	if peer == x.rank && stage != a {
		x.stepFail(k, stage, -1, -1, fmt.Errorf("both stages of tie %d:%d are on this rank: TIE_GRAD %d sums them", a, b, a))
		return
	}
	if x.tied[stage] || x.tied[other] && peer == x.rank {
		x.stepFail(k, stage, -1, -1, fmt.Errorf("tie %d:%d is summed already this iteration", a, b))
		return
	}
	mine := x.raw[stage].(Tied).TiedGrads()
	for i, g := range mine {
		if g == nil {
			x.stepFail(k, stage, -1, -1, fmt.Errorf("tie %d:%d: stage %d's tied gradient %d is nil", a, b, stage, i))
			return
		}
	}
	var err error
	if peer == x.rank { // stage is a
		theirs := x.raw[other].(Tied).TiedGrads()
		if err = tieSum(mine, mine, theirs, a, b); err == nil {
			for i := range theirs {
				if err = copyInto(theirs[i], mine[i]); err != nil {
					break
				}
			}
		}
		x.tied[other] = true
	} else {
		x.inflight.Wait()
		if x.failedNow() {
			return
		}
		var theirs []*tensor.Dense
		if theirs, err = x.exchangeTied(stage, other, peer, mine); err == nil {
			if stage == a {
				err = tieSum(mine, mine, theirs, a, b)
			} else {
				err = tieSum(mine, theirs, mine, a, b)
			}
			if x.rec != nil {
				for _, g := range theirs {
					x.rec.Recycle(g) // summed: the receive buffers go back
				}
			}
		}
	}
	if err != nil {
		if peer == x.rank {
			peer = -1
		}
		x.stepFail(k, stage, -1, peer, fmt.Errorf("tie %d:%d: %w", a, b, err))
		return
	}
	x.tied[stage] = true
}

// exchangeTied sends stage's tied gradients mine to peer, which holds the
// other stage of the tie, and returns the other's (swapListed).
func (x *Exec) exchangeTied(stage, other, peer int, mine []*tensor.Dense) ([]*tensor.Dense, error) {
	return x.swapListed(stage, other, peer, mine, "tied gradients", "both copies of a tie return the same list from TiedGrads")
}

// swapListed is swapGrads for lists that must agree (a tie's two copies,
// dualpipe's two model copies of a stage): the two ranks first swap a
// description of their lists (count, dtypes, shapes: tieMeta), so that
// lists that differ fail both ranks at once, naming both stages (what the
// lists are, and the fix), instead of leaving one waiting for a tensor the
// other never sends.
func (x *Exec) swapListed(stage, other, peer int, mine []*tensor.Dense, what, fix string) ([]*tensor.Dense, error) {
	meta, err := x.swapGrads(stage, other, peer, []*tensor.Dense{tieMeta(mine)})
	if err != nil {
		return nil, err
	}
	theirs := meta[0]
	if theirs.Dtype() != tensor.Float64 || !slices.Equal(theirs.Float64s(), tieMeta(mine).Float64s()) {
		a, b := stage, other
		da, db := describeMeta(tieMeta(mine)), describeMeta(theirs)
		if a > b {
			a, b, da, db = b, a, db, da
		}
		return nil, fmt.Errorf("stage %d's %s are %s and stage %d's %s; %s", a, what, da, b, db, fix)
	}
	return x.swapGrads(stage, other, peer, mine)
}

// tieMeta describes a list of tied gradients as a float64 vector: the
// count, then per tensor its dtype (0 float64, 1 float32, 2 other), its
// number of dimensions and the dimensions.
func tieMeta(gs []*tensor.Dense) *tensor.Dense {
	v := []float64{float64(len(gs))}
	for _, g := range gs {
		dt := 2.0
		switch g.Dtype() {
		case tensor.Float64:
			dt = 0
		case tensor.Float32:
			dt = 1
		}
		sh := g.Shape()
		v = append(v, dt, float64(len(sh)))
		for _, d := range sh {
			v = append(v, float64(d))
		}
	}
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))
}

// describeMeta words a tieMeta vector ("2: float64 [4 3], float32 [3]"),
// or says it is malformed (a peer's is not trusted).
func describeMeta(t *tensor.Dense) string {
	if t.Dtype() != tensor.Float64 || t.Dims() != 1 {
		return "(an undecodable description)"
	}
	v := t.Float64s()
	// Negated comparisons: a NaN fails them all.
	if len(v) == 0 || !(v[0] >= 0 && v[0] <= float64(len(v))) {
		return "(an undecodable description)"
	}
	n := int(v[0])
	parts := make([]string, 0, n)
	i := 1
	for range n {
		if i+2 > len(v) || !(v[i+1] >= 0 && v[i+1] <= float64(len(v)-i-2)) {
			return "(an undecodable description)"
		}
		name := "another dtype"
		switch v[i] {
		case 0:
			name = "float64"
		case 1:
			name = "float32"
		}
		nd := int(v[i+1])
		parts = append(parts, fmt.Sprintf("%s %v", name, v[i+2:i+2+nd]))
		i += 2 + nd
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

// tieSum sets dst[i] to ga[i] + gb[i], element by element: ga are the
// tied gradients of stage a, gb those of stage b (the tie's order), dst one
// of the two. Count, shape and dtype mismatches name both stages.
func tieSum(dst, ga, gb []*tensor.Dense, a, b int) error {
	if len(ga) != len(gb) {
		return fmt.Errorf("stage %d has %d tied gradients and stage %d has %d; both copies of a tie return the same list from TiedGrads", a, len(ga), b, len(gb))
	}
	for i := range dst {
		f, s := ga[i], gb[i]
		if f == nil || s == nil {
			return fmt.Errorf("tied gradient %d of stage %d or %d is nil", i, a, b)
		}
		if !f.Shape().Eq(s.Shape()) || f.Dtype() != s.Dtype() {
			return fmt.Errorf("tied gradient %d is %v %v on stage %d and %v %v on stage %d; both copies hold one parameter, of one shape and dtype", i, f.Dtype(), f.Shape(), a, s.Dtype(), s.Shape(), b)
		}
		switch d := dst[i].Data().(type) {
		case []float64:
			fa, sa := f.Data().([]float64), s.Data().([]float64)
			for k := range d {
				d[k] = fa[k] + sa[k]
			}
		case []float32:
			fa, sa := f.Data().([]float32), s.Data().([]float32)
			for k := range d {
				d[k] = fa[k] + sa[k]
			}
		default:
			return fmt.Errorf("tied gradient %d of stages %d and %d has dtype %v; want float32 or float64", i, a, b, f.Dtype())
		}
	}
	return nil
}

// untied returns the first tied stage of this rank whose TIE_GRAD has not
// run this iteration, for OptStep, or -1.
func (x *Exec) untied() int {
	for _, t := range x.spec.Ties {
		for _, s := range []int{t.A, t.B} {
			if x.stages[s] != nil && !x.tied[s] {
				return s
			}
		}
	}
	return -1
}
