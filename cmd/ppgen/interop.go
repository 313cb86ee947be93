package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/torch"
)

// The interchange formats of import and export are the dialects of
// PyTorch's CSV form (gen/torch): torch-csv, the CSV form
// torch.distributed.pipelining dumps and loads, and torch-csv-legacy, the
// same form with the names of PyTorch 2.4 to 2.6.

// runImport reads a schedule in PyTorch's CSV form, verifies it and, with -o,
// emits its Go source.
func runImport(args []string, stdout, stderr io.Writer) error {
	req, err := gencmd.ParseImport(args, gencmd.EnvFromOS())
	if errors.Is(err, flag.ErrHelp) {
		return helpRequest{gencmd.ImportFlags(new(gencmd.Request))}
	}
	if err != nil {
		return err
	}
	if err := checkMaxActivations(req.MaxActivations); err != nil {
		return err
	}
	if req.Out == "" {
		set := importSetFlags(args)
		for _, name := range []string{"package", "name", "schedule-name", "table", "helper"} {
			if set[name] {
				return usagef("-%s shapes the Go source, which import writes only with -o; add -o FILE.go (or -o - for stdout), or drop -%s", name, name)
			}
		}
	}
	if err := checkOutput(req.Inputs(), namedFile{Name: "-o", Path: req.Out}, formatGo); err != nil {
		return err
	}
	pr := newProgress(stderr, "ppgen import", 0)
	defer pr.Done()
	pr.Phase("reading and verifying %s", req.File)
	im, src, err := req.Import()
	if err != nil {
		return err
	}
	pr.Done()
	if req.Out != "" && req.Out != "-" {
		if err := writeFileAtomic(req.Out, src); err != nil {
			return err
		}
	}
	// The report goes to stdout, or to stderr when the Go source does.
	report := stdout
	if req.Out == "-" {
		report = stderr
	}
	res := im.Result
	fsdp := ""
	if res.Report.PeakUnsharded != nil {
		fsdp = fmt.Sprintf("; peak unsharded stages per rank %v", res.Report.PeakUnsharded)
	}
	fmt.Fprintf(report, "ok: %s (%s, %s): %d ranks, %d stages (%s placement), %d micro-batches; deadlock-free under rendezvous; %d steps (%d transfers) for runtime/pipe; peak activations per rank %v; slots per rank %v%s\n",
		req.File, req.From, im.Form(), res.Program.Placement.Ranks(), res.Program.Stages(), placementName(res.Program.Placement), res.Program.Micro,
		res.Report.Steps, res.Report.Transfers, res.Report.PeakActivations, res.Info.Slots, fsdp)
	for _, n := range im.Notes {
		fmt.Fprintf(report, "note: %s\n", n)
	}
	switch req.Out {
	case "":
	case "-":
		_, err = stdout.Write(src)
	default:
		fmt.Fprintf(stderr, "ppgen: wrote %s (%d ranks, %d steps)\n", req.Out, res.Program.Placement.Ranks(), res.Program.NumSteps())
	}
	return err
}

// importSetFlags returns the flags set in args, import's arguments (flags
// before and after the file), which gencmd.ParseImport has accepted.
func importSetFlags(args []string) map[string]bool {
	fs := gencmd.ImportFlags(new(gencmd.Request))
	fs.SetOutput(io.Discard)
	set := map[string]bool{}
	for {
		if fs.Parse(args) != nil {
			return set
		}
		for k := range setFlags(fs) {
			set[k] = true
		}
		if args = fs.Args(); len(args) == 0 {
			return set
		}
		args = args[1:]
	}
}

// runExport writes a schedule in PyTorch's CSV form.
func runExport(args []string, stdout, stderr io.Writer) error {
	req, fs := newRequest("export", gencmd.Flags{In: true})
	to := fs.String("to", "", "output format: torch-csv, or torch-csv-legacy (PyTorch 2.4 to 2.6 names)")
	computeOnly := fs.Bool("compute-only", false, "write the compute actions only, for _load_csv(format=\"compute_only\"); PyTorch then adds its own transfers")
	noReduce := fs.Bool("no-reduce-grad", false, "do not add REDUCE_GRAD after each stage's last backward (for PyTorch releases without it)")
	out := fs.String("o", "-", "output file (- for stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	d, err := gencmd.ParseDialect("to", *to)
	if err != nil {
		return err
	}
	if err := checkOut(*out); err != nil {
		return err
	}
	if err := checkOutput(req.Inputs(), namedFile{Name: "-o", Path: *out}, formatCSV); err != nil {
		return err
	}
	pr := newProgress(stderr, "ppgen export", 0)
	defer pr.Done()
	res, err := lower(req, pr)
	if err != nil {
		return err
	}
	pr.Done()
	p := res.Program
	if *computeOnly {
		p = res.Compute
	}
	var b bytes.Buffer // nothing is written when torch.Write fails
	if err := torch.Write(&b, p, d, torch.WriteOptions{ReduceGrad: !*computeOnly && !*noReduce && d != torch.Legacy}); err != nil {
		return err
	}
	if err := writeOutput(*out, b.Bytes(), stdout, stderr, fmt.Sprintf(" (%d ranks)", res.Program.Placement.Ranks())); err != nil {
		return err
	}
	noteAuto(stderr, res, req.Mem)
	return nil
}

// placementName names a placement for messages.
func placementName(pl ir.Placement) string {
	if pl.Name != "" {
		return pl.Name
	}
	return "table"
}
