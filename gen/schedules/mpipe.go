package schedules

import "github.com/ppgen/ppgen/gen/ir"

func init() {
	Register(Family{
		Name:           "mpipe",
		Summary:        "MPipe (hyper-parallel's transpose): interleaved 1F1B whose micro-batches are loaded, and preprocessed, by their owner ranks and shipped to stage 0 (MPIPE_FWD_SEND/RECV): the first min(P, M) (-mpipe-owners min) or all of them (full)",
		Constraints:    "as interleaved: any ranks ≥ 1, virtual ≥ 1 and micro ≥ 1 (-mpipe-owners full: micro ≥ ranks, so that every rank owns a micro-batch)",
		DefaultVirtual: 2,
		OwnedData:      true,
		Build:          buildMPipe,
	})
}

// buildMPipe returns the interleaved 1F1B order (see buildInterleaved):
// MPipe changes where micro-batches are loaded (and preprocessed), not the
// compute order. Micro m < min(P, M) (all of them under -mpipe-owners full)
// is owned by rank m mod P (ir.Placement.Owner), which loads it while it
// waits for its first input and sends it to stage 0's rank; gen.Lower runs
// passes.OwnedDataMode for it. With a DATA_LOAD cost (`-cost data=…`) that takes
// (min(P, M)-1) loads off rank 0's warm-up, the head of the pipeline.
func buildMPipe(cfg ir.Config) (ir.Program, error) {
	return buildInterleaved(cfg)
}
