package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ppgen/ppgen/gen/gencmd"
)

// runPartition is `ppgen partition`: flags, gencmd's PartitionLayers (gen/partition's Compare), the
// table.
func runPartition(args []string, stdout, stderr io.Writer) error {
	req, fs := newRequest("partition", gencmd.Flags{Cost: "the keys -model does not give (comm, bw, data, opt, ...; see `ppgen sim -h`)"})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// The -partition of the shared schedule flags chooses the split that
	// sim, trace and report simulate; partition searches it regardless.
	var err error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "partition" {
			err = usagef("-partition %q: ppgen partition always searches the split (and prints the even split beside it); drop -partition, which chooses the split sim, trace and report run", f.Value.String())
		}
	})
	if err != nil {
		return err
	}
	pr := newProgress(stderr, "ppgen partition", 0)
	pr.Phase("splitting the layers of %s", req.Model)
	rep, err := req.PartitionLayers()
	pr.Done()
	if err != nil {
		return err
	}
	copies := ""
	if rep.Copies > 1 {
		copies = fmt.Sprintf(", each of its %d model copies", rep.Copies)
	}
	fmt.Fprintf(stdout, "%s P=%d V=%d M=%d: %d layers of %s in %d stages%s\n", rep.Schedule, rep.Ranks, rep.Virtual, rep.Micro, rep.LayerCount, req.Model, len(rep.Stages), copies)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STAGE\tRANK\tLAYERS\tF\tI\tW\tACT\tPARAMS\t")
	for _, s := range rep.Stages {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t\n", s.Stage, s.Rank, s.Layers, s.F, s.I, s.W, s.Act, s.Params)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	gain := 0.0
	if rep.EvenMakespan > 0 {
		gain = 100 * (1 - rep.Makespan/rep.EvenMakespan)
	}
	fmt.Fprintf(stdout, "makespan %.4g, even split %.4g (%.1f%% faster); lower bound %.4g (even %.4g)\n", rep.Makespan, rep.EvenMakespan, gain, rep.LowerBound, rep.EvenBound)
	fmt.Fprintf(stdout, "peak memory per rank %.4g, even split %.4g (activations plus parameters, the model's units)\n", rep.Mem, rep.EvenMem)
	if _, err := fmt.Fprintf(stdout, "bounds %v (even %v)\n", rep.Bounds, rep.EvenBounds); err != nil {
		return err
	}
	if rep.RecomputeChosen {
		_, err = fmt.Fprintln(stdout, recomputeChoice(rep.Recompute, req.Mem))
	}
	return err
}
