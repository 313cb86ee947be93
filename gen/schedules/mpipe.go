package schedules

import "github.com/ppgen/ppgen/gen/ir"

func init() {
	Register(Family{
		Name:           "mpipe",
		Summary:        "MPipe (hyper-parallel's transpose, data loading only): interleaved 1F1B whose first min(P, M) micro-batches are loaded by their owner ranks during warm-up and shipped to stage 0 (MPIPE_FWD_SEND/RECV)",
		Constraints:    "as interleaved: any ranks ≥ 1, virtual ≥ 1 and micro ≥ 1 (micro ≥ ranks gives every rank a micro-batch to own)",
		DefaultVirtual: 2,
		OwnedData:      true,
		Build:          buildMPipe,
	})
}

// buildMPipe returns the interleaved 1F1B order (see buildInterleaved):
// MPipe changes where micro-batches are loaded, not the compute order. Micro
// m < min(P, M) is owned by rank m (ir.Placement.Owner), which loads it while
// it waits for its first input and sends it to stage 0's rank; gen.Lower runs
// passes.OwnedData for it. With a DATA_LOAD cost (`-cost data=…`) that takes
// (min(P, M)-1) loads off rank 0's warm-up, the head of the pipeline.
func buildMPipe(cfg ir.Config) (ir.Program, error) {
	return buildInterleaved(cfg)
}
