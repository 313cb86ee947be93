package main

// The mpi case: the ranks as the processes mpirun started, over the MPI
// transport (a binary built with -tags mpi):
//
//	go build -tags mpi -o realisation ./examples/realisation
//	mpirun -np 4 ./realisation -transport mpi -schedule zbv [-mpi-sync]
//
// One schedule per mpirun (MPI starts once per process). It measures as
// tcp-procs does (measureRank): rank 0 sets each iteration's start, the
// others report their finish, and rank 0 prints the row. Besides the two
// catalog schedules it takes zbv and zbv-batch, the same order with its
// adjacent transfers batched (-batch), to show what batching does on a
// rendezvous engine.

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ppgen/ppgen/generated/zbv"
	"github.com/ppgen/ppgen/generated/zbvbatch"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
)

// mpiCatalog is catalog() and the schedules only the mpi case measures.
func mpiCatalog() []schedule {
	return append(catalog(),
		schedule{"zbv", zbv.Spec, zbv.Ranks[:], zbv.Program},
		schedule{"zbv-batch", zbvbatch.Spec, zbvbatch.Ranks[:], zbvbatch.Program},
	)
}

// mpiMain measures one schedule over MPI; rank 0 writes the row to out.
func mpiMain(out io.Writer, sched string, iters int, sync bool) error {
	if !mpi.Built {
		return fmt.Errorf("-transport mpi: %w", mpi.ErrNotBuilt)
	}
	var sc schedule
	names := ""
	for _, c := range mpiCatalog() {
		names += " " + c.name
		if c.name == sched {
			sc = c
		}
	}
	if sc.name == "" {
		return fmt.Errorf("-transport mpi measures one schedule per mpirun: give -schedule, one of%s", names)
	}
	if iters < 1 {
		return fmt.Errorf("-iters %d; want at least 1", iters)
	}
	tr, err := mpi.New(mpi.Config{Sync: sync, Timeout: 30 * time.Second, Fingerprint: sc.spec.Fingerprint, Schedule: sc.spec.Describe()})
	if err != nil {
		return err
	}
	defer tr.Close()
	if tr.World() != sc.spec.Ranks {
		return fmt.Errorf("mpirun started %d processes but %s has %d ranks: run mpirun -np %d", tr.World(), sc.name, sc.spec.Ranks, sc.spec.Ranks)
	}
	res, err := measureRank(sc, iters, tr)
	if err != nil || tr.Rank() != 0 {
		return err
	}
	name := "mpi"
	if sync {
		name = "mpi-sync"
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	mean, med := res.ms.mean(), res.ms.median()
	fmt.Fprintf(tw, rowFormat, sc.name, name, res.simMS, mean, med,
		mean/res.simMS, med/res.simMS, res.overMean, res.overMax, res.commMS*1e3, res.effSimMS, mean/res.effSimMS)
	return tw.Flush()
}
