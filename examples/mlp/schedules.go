package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ppgen/ppgen/examples/mlp/tuned"
	"github.com/ppgen/ppgen/generated/dualpipe"
	"github.com/ppgen/ppgen/generated/dualpipev"
	"github.com/ppgen/ppgen/generated/fsdpswap"
	"github.com/ppgen/ppgen/generated/gpipe"
	"github.com/ppgen/ppgen/generated/interleaved"
	"github.com/ppgen/ppgen/generated/interleavedoverlap"
	"github.com/ppgen/ppgen/generated/interleavedsplit"
	"github.com/ppgen/ppgen/generated/mpipe"
	"github.com/ppgen/ppgen/generated/onef1btie"
	"github.com/ppgen/ppgen/generated/shiplabels"
	"github.com/ppgen/ppgen/generated/zbh1"
	"github.com/ppgen/ppgen/generated/zbv"
	"github.com/ppgen/ppgen/generated/zbvbatch"
	"github.com/ppgen/ppgen/generated/zbvtie"
	"github.com/ppgen/ppgen/runtime/pipe"
)

//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -table

// schedule is one generated schedule the trainer can run.
type schedule struct {
	Spec    pipe.Spec
	Ranks   []func(*pipe.Exec) error
	Program [][]pipe.Op // nil when generated without -table
}

// catalog: the example's own schedule (schedules_gen.go, which the
// generate directive above makes) and the committed catalog in generated/.
var catalog = map[string]schedule{
	"1f1b":        {Spec, Ranks[:], Program},
	"gpipe":       {gpipe.Spec, gpipe.Ranks[:], gpipe.Program},
	"interleaved": {interleaved.Spec, interleaved.Ranks[:], interleaved.Program},
	"zb-h1":       {zbh1.Spec, zbh1.Ranks[:], zbh1.Program},
	"zbv":         {zbv.Spec, zbv.Ranks[:], zbv.Program},
	// Overlap steps (OVERLAP_F_B, OVERLAP_B_F) and split backwards.
	"dualpipev":           {dualpipev.Spec, dualpipev.Ranks[:], dualpipev.Program},
	"interleaved-overlap": {interleavedoverlap.Spec, interleavedoverlap.Ranks[:], interleavedoverlap.Program},
	"interleaved-split":   {interleavedsplit.Spec, interleavedsplit.Ranks[:], interleavedsplit.Program},
	// Two model copies: OPT_STEP sums the copies' gradients.
	"dualpipe": {dualpipe.Spec, dualpipe.Ranks[:], dualpipe.Program},
	// Owned-micro data loading: ranks 1..3 load micro-batches 1..3 and
	// ship them to stage 0 (MPIPE_FWD_SEND/RECV).
	"mpipe": {mpipe.Spec, mpipe.Ranks[:], mpipe.Program},
	// Labels shipped along the pipe (DATA_SEND/DATA_RECV): only rank 0
	// gets a data source.
	"1f1b-ship-labels": {shiplabels.Spec, shiplabels.Ranks[:], shiplabels.Program},
	// FSDP and swap steps: the stages offload their saved activations to
	// the -swap-tier (runtime/swap); the FSDP steps pass, unless -dp N
	// shards the stages over N replicas (runtime/train's FSDP: nn.FSDPGroup).
	"1f1b-fsdp-swap": {fsdpswap.Spec, fsdpswap.Ranks[:], fsdpswap.Program},
	// Batched transfers (-batch): each run of adjacent transfers is one
	// x.BatchBegin() .. x.BatchEnd() group, issued through transport.Batch.
	"zbv-batch": {zbvbatch.Spec, zbvbatch.Ranks[:], zbvbatch.Program},
	// Tied weights (-tie): stages 0 and S-1 hold one copy each of a shared
	// layer (model.go), whose gradients TIE_GRAD sums before OPT_STEP:
	// across ranks 0 and 3 (1f1b), on rank 0 (zbv, whose V places both
	// ends there).
	"1f1b-tie": {onef1btie.Spec, onef1btie.Ranks[:], onef1btie.Program},
	"zbv-tie":  {zbvtie.Spec, zbvtie.Ranks[:], zbvtie.Program},
	// -schedule auto under the costs `ppgen tune` fitted to a measured
	// run of the uneven model (-wide 32; tuned/tuned.go): the faster
	// choice for it (BENCHMARKS.md "Measured costs").
	"tuned": {tuned.Spec, tuned.Ranks[:], tuned.Program},
}

func scheduleNames() []string {
	names := make([]string, 0, len(catalog))
	for n := range catalog {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func lookup(name string) (schedule, error) {
	s, ok := catalog[name]
	if !ok {
		return schedule{}, fmt.Errorf("-schedule %q is not compiled in; choose one of %s", name, strings.Join(scheduleNames(), ", "))
	}
	return s, nil
}
