package train

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// ownedSource is the data a rank's train program reads: only the inputs of
// the micro-batches it loads (pipe.Spec.Inputs: under mpipe, the ones it
// owns; else all of them on the first stage's rank), so that a rank reads
// nothing another rank loads, and the tokens of those inputs
// (Config.CountTokens), which the loop all-reduces into the step's count.
type ownedSource struct {
	cur    *source
	rank   int
	loads  []bool // by micro-batch: this rank loads its input
	count  func(*tensor.Dense) int64
	tokens int64 // this step's, so far
}

func newOwnedSource(cur *source, sp pipe.Spec, rank int, count func(*tensor.Dense) int64) *ownedSource {
	o := &ownedSource{cur: cur, rank: rank, loads: make([]bool, sp.Micro), count: count}
	for _, m := range sp.Inputs(rank) {
		o.loads[m] = true
	}
	return o
}

func (o *ownedSource) Input(m int) (*tensor.Dense, error) {
	if uint(m) >= uint(len(o.loads)) || !o.loads[m] {
		return nil, fmt.Errorf("rank %d loads the input of micro-batch %d, which is not one of its own (pipe.Spec.Inputs)", o.rank, m)
	}
	x, err := o.cur.Input(m)
	if err == nil && o.count != nil {
		o.tokens += o.count(x)
	}
	return x, err
}

func (o *ownedSource) Target(m int) (*tensor.Dense, error) { return o.cur.Target(m) }

// stepTokens returns the tokens every rank's train program loaded this
// step (Config.CountTokens), summed over the world, and starts the next
// step's count.
func (r *rank) stepTokens() (int64, error) {
	n := int64(0)
	if r.owned != nil {
		n, r.owned.tokens = r.owned.tokens, 0
	}
	if r.wcomm == nil {
		return n, nil
	}
	t := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{float64(n)}))
	if err := r.wcomm.AllReduce(t); err != nil {
		return 0, fmt.Errorf("all-reduce of the token count: %w", err)
	}
	return int64(t.Float64s()[0]), nil
}
