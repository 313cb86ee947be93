package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/verify"
)

// The interchange formats of import and export.
//
// torch-csv is the CSV form torch.distributed.pipelining dumps and loads
// (PipelineScheduleMulti._dump_csv / _load_csv): one row per rank, one action
// per cell ("0F0", "4B3", "1I2", "2W2", "3SEND_F1", "4RECV_B0", "0UNSHARD",
// "0REDUCE_GRAD", "(0F7;7B3)OVERLAP_F_B"), an empty cell for an idle time step
// of the compute-only form. B is the full backward, I and W its halves.
//
// torch-csv-legacy is the same form with the names of PyTorch 2.4 to 2.6:
// "B" is a backward that is the input-gradient half when the same chunk also
// has a "W" and the full backward otherwise, and "BW" is a full backward.
const (
	formatTorchCSV       = "torch-csv"
	formatTorchCSVLegacy = "torch-csv-legacy"
)

func checkFormat(flagName, f string) error {
	switch f {
	case formatTorchCSV, formatTorchCSVLegacy:
		return nil
	case "":
		return usagef("missing -%s (torch-csv, or torch-csv-legacy for PyTorch 2.4 to 2.6 names)", flagName)
	}
	return usagef("-%s %q; want torch-csv or torch-csv-legacy", flagName, f)
}

// runImport reads a schedule in PyTorch's CSV form, verifies it and, with -o,
// emits its Go source.
func runImport(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	from := fs.String("from", "", "input format: torch-csv, or torch-csv-legacy (PyTorch 2.4 to 2.6: B = input grad when the chunk has a W, BW = full backward)")
	out := fs.String("o", "", "also write the Go source to this file (- for stdout)")
	pkg := fs.String("package", "", "package name of the Go source (default: $GOPACKAGE, else the output directory's name)")
	name := fs.String("name", "", "schedule name in the generated Spec (default: the file's base name)")
	table := fs.Bool("table", false, "also emit the program as data (pipe.Op table) for the interpreter")
	helper := fs.Int("helper", 0, "steps per helper function (0: the emitter's default)")
	maxAct := fs.Int("max-activations", 0, "fail when a rank holds more live activations (chunks) than this; 0: no limit")
	dropFSDP := fs.Bool("drop-fsdp", false, "drop the FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD) instead of running them through pipe.Sharded")
	files, err := parseFlagsAndArgs(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		return usagef("want one CSV file (or - for stdin) after the flags; got %d", len(files))
	}
	if err := checkFormat("from", *from); err != nil {
		return err
	}
	path := files[0]
	pr := newProgress(stderr, "ppgen import", 0)
	defer pr.Done()
	pr.Phase("reading %s", path)
	data, err := readFileOrStdin(path)
	if err != nil {
		return usagef("%v", err)
	}
	pr.Phase("verifying")
	opt := gen.Options{}
	opt.Verify.MaxActivations = *maxAct
	im, err := importTorch(path, data, *from, opt, *dropFSDP)
	if err != nil {
		return err
	}
	res, notes := im.res, im.notes
	pr.Done()

	// The report goes to stdout, or to stderr when the Go source does.
	report := stdout
	if *out == "-" {
		report = stderr
	}
	var src []byte
	if *out != "" {
		schedule := *name
		if schedule == "" {
			schedule = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
			if path == "-" {
				schedule = "imported"
			}
		}
		pkgName, err := packageName(*out, *pkg)
		if err != nil {
			return err
		}
		src, err = gen.Emit(res, emit.Options{
			Package:    pkgName,
			Invocation: invocation("import", fs) + " " + path,
			Schedule:   schedule,
			HelperSize: *helper,
			Table:      *table,
		})
		if err != nil {
			return err
		}
		if *out != "-" {
			if err := writeFileAtomic(*out, src); err != nil {
				return err
			}
		}
	}
	fsdp := ""
	if res.Report.PeakUnsharded != nil {
		fsdp = fmt.Sprintf("; peak unsharded stages per rank %v", res.Report.PeakUnsharded)
	}
	fmt.Fprintf(report, "ok: %s (%s, %s): %d ranks, %d stages (%s placement), %d micro-batches; deadlock-free under rendezvous; %d steps (%d transfers) for runtime/pipe; peak activations per rank %v; slots per rank %v%s\n",
		path, *from, im.form(), res.Program.Placement.Ranks(), res.Program.Stages(), placementName(res.Program.Placement), res.Program.Micro,
		res.Report.Steps, res.Report.Transfers, res.Report.PeakActivations, res.Info.Slots, fsdp)
	for _, n := range notes {
		fmt.Fprintf(report, "note: %s\n", n)
	}
	switch *out {
	case "":
	case "-":
		_, err = stdout.Write(src)
	default:
		fmt.Fprintf(stderr, "ppgen: wrote %s (%d ranks, %d steps)\n", *out, res.Program.Placement.Ranks(), res.Program.NumSteps())
	}
	return err
}

// imported is a schedule read from PyTorch's CSV form, verified, and
// prepared for runtime/pipe.
type imported struct {
	res   gen.Result // lowered and verified: what import emits
	comms bool       // the file holds transfers (PyTorch's lowered form)
	notes []string   // what preparing the program changed
}

func (im imported) form() string {
	if im.comms {
		return "with comms"
	}
	return "compute-only"
}

// importTorch parses data (the file path, in format) and verifies it as it
// is, so that a diagnosis names the file's own steps: a compute-only order is
// lowered by ppgen's passes and checked; a lowered one (with transfers) is
// checked as PyTorch would run it, under rendezvous semantics. FSDP actions
// (UNSHARD, RESHARD, REDUCE_GRAD) are kept where the file has them and
// verified with the rest (a stage computes only while unsharded, one
// REDUCE_GRAD after its last backward and before OPT_STEP): runtime/pipe runs
// them through pipe.Sharded. With dropFSDP, the FSDP actions verify may
// reject are dropped, and the program without them is lowered and verified
// again. A lowered program then gets what runtime/pipe needs and PyTorch
// does outside its action list (gen.AddImplicitSteps: a DATA_LOAD before each
// F of the first and the last stage and an OPT_STEP at the end), in
// gen.LowerProgram, as every command reading -in does. Parse errors are
// usage errors (exit 2); verify's errors keep their type, which run maps to
// the exit status (see exitCode); an FSDP action verify rejects gets a hint
// at -drop-fsdp.
func importTorch(path string, data []byte, format string, opt gen.Options, dropFSDP bool) (imported, error) {
	p, err := parseTorchCSV(data, format == formatTorchCSVLegacy)
	if err != nil {
		var pe *ir.ParseError
		if format == formatTorchCSV && errors.As(err, &pe) && legacyBW.MatchString(pe.Text) {
			return imported{}, usagef("%s: %v; BW is PyTorch 2.4 to 2.6's full backward: use -from torch-csv-legacy", path, err)
		}
		return imported{}, usagef("%s: %v", path, err)
	}
	im := imported{comms: p.HasComm()}
	res, err := gen.LowerProgram(p, opt)
	if err != nil && !(dropFSDP && isFSDPError(err)) {
		hint := ""
		if isFSDPError(err) {
			hint = "; to import the schedule without its FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD), pass -drop-fsdp"
		}
		return im, fmt.Errorf("%s (%s, %s): %w%s", path, format, im.form(), err, hint)
	}
	if dropFSDP {
		var n int
		if p, n = dropKinds(p, fsdpKinds...); n > 0 {
			im.notes = append(im.notes, fmt.Sprintf("dropped %d FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD) as -drop-fsdp asks", n))
		}
		if n > 0 || err != nil {
			if res, err = gen.LowerProgram(p, opt); err != nil {
				// Step numbers count the program without the FSDP actions.
				return im, fmt.Errorf("%s (%s, %s) without its FSDP actions: %w", path, format, im.form(), err)
			}
		}
	}
	if res.Implicit > 0 {
		im.notes = append(im.notes, fmt.Sprintf("added %d DATA_LOAD and OPT_STEP steps PyTorch leaves implicit", res.Implicit))
	}
	im.res = res
	return im, nil
}

// fsdpKinds are the FSDP actions of PyTorch's CSV form.
var fsdpKinds = []ir.Kind{ir.Unshard, ir.Reshard, ir.ReduceGrad}

// isFSDPError reports whether err is verify's rejection of an FSDP action:
// a stage computing sharded, UNSHARD and RESHARD out of order, a
// REDUCE_GRAD misplaced, repeated or missing.
func isFSDPError(err error) bool {
	var ve *verify.Error
	if !errors.As(err, &ve) {
		return false
	}
	if ve.Code == verify.FSDP {
		return true
	}
	for _, k := range fsdpKinds {
		if ve.Step.Kind == k {
			return true
		}
	}
	return false
}

// runExport writes a schedule in PyTorch's CSV form.
func runExport(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	var sf scheduleFlags
	sf.register(fs, true, true)
	to := fs.String("to", "", "output format: torch-csv, or torch-csv-legacy (PyTorch 2.4 to 2.6 names)")
	computeOnly := fs.Bool("compute-only", false, "write the compute actions only, for _load_csv(format=\"compute_only\"); PyTorch then adds its own transfers")
	noReduce := fs.Bool("no-reduce-grad", false, "do not add REDUCE_GRAD after each stage's last backward (for PyTorch releases without it)")
	out := fs.String("o", "-", "output file (- for stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkFormat("to", *to); err != nil {
		return err
	}
	if *out == "" {
		return usagef("-o needs a file name (or - for stdout)")
	}
	pr := newProgress(stderr, "ppgen export", 0)
	defer pr.Done()
	pr.Phase("lowering")
	res, err := lowerFromFlags(&sf, pr)
	if err != nil {
		return err
	}
	pr.Done()
	legacy := *to == formatTorchCSVLegacy
	b, err := torchCSV(res, *computeOnly, !*noReduce && !legacy, legacy)
	if err != nil {
		return err
	}
	if *out == "-" {
		_, err = stdout.Write(b)
		return err
	}
	if err := writeFileAtomic(*out, b); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "ppgen: wrote %s (%d ranks)\n", *out, res.Program.Placement.Ranks())
	return nil
}

// torchCSV renders a lowered result in PyTorch's CSV form: the compute
// order, or the lowered program without the steps PyTorch does on its own
// (DATA_LOAD, DATA_SEND, DATA_RECV: it feeds inputs and targets to the
// first and last stage itself; OPT_STEP: the trainer steps the optimizer),
// with REDUCE_GRAD after each stage's last backward when reduceGrad is set
// and the program has none (PyTorch scales and reduces gradients there, as
// its own lowering adds it). Steps PyTorch cannot express are an error, and
// so is a program with several model copies (dualpipe): the CSV cannot say
// that a micro-batch runs only its copy's stages.
func torchCSV(res gen.Result, computeOnly, reduceGrad, legacy bool) ([]byte, error) {
	p := res.Program
	if p.Copies > 1 {
		return nil, usagef("torch-csv cannot express %d model copies (PyTorch walks every micro-batch through all stages, and dualpipe's copies need a gradient all-reduce between ranks r and P-1-r); ppgen verify and ppgen sim work", p.Copies)
	}
	if computeOnly {
		p = res.Compute
	} else {
		p, _ = dropKinds(p, ir.DataLoad, ir.DataSend, ir.DataRecv, ir.OptStep)
		if reduceGrad {
			p = addReduceGrad(p)
		}
	}
	for r, steps := range p.Ranks {
		for i, st := range steps {
			if err := torchExpressible(st, legacy); err != nil {
				return nil, usagef("rank %d step %d %s: %v", r, i, st, err)
			}
		}
	}
	if legacy {
		return legacyNames(ir.FormatCSV(p)), nil
	}
	return ir.FormatCSV(p), nil
}

// torchExpressible reports whether PyTorch's action parser reads st.
func torchExpressible(st ir.Step, legacy bool) error {
	switch st.Kind {
	case ir.Forward, ir.Backward, ir.BackwardInput, ir.BackwardWeight,
		ir.SendF, ir.RecvF, ir.SendB, ir.RecvB, ir.Unshard, ir.Reshard:
		return nil
	case ir.ReduceGrad, ir.OverlapFB:
		if legacy {
			return fmt.Errorf("PyTorch 2.4 to 2.6 have no %s; export with -to torch-csv", st.Kind)
		}
		return nil
	case ir.OverlapBF:
		return errors.New("PyTorch has no OVERLAP_B_F (only OVERLAP_F_B, forward first); schedule without -overlap to export")
	case ir.MpipeSend, ir.MpipeRecv:
		return fmt.Errorf("PyTorch's pipelining has no %s action (mpipe's owned-micro loading); export the compute order with -compute-only", st.Kind)
	}
	return fmt.Errorf("PyTorch's pipelining has no %s action", st.Kind)
}

// legacyBW matches a full backward in PyTorch 2.4 to 2.6 names ("3BW1").
var legacyBW = regexp.MustCompile(`^(\s*\d+)BW(\d+)`)

// legacyI matches an input-gradient backward in current names ("3I1"),
// which PyTorch 2.4 to 2.6 spell B.
var legacyI = regexp.MustCompile(`^\d+I\d+$`)

// legacyRe matches the backward actions of a CSV in ppgen's names.
var legacyRe = regexp.MustCompile(`^(\d+)([BI])(\d+)$`)

// legacyNames rewrites a CSV from the current names to those of PyTorch 2.4
// to 2.6: I becomes B (the chunk has a W, so B reads as its input half) and a
// full backward B stays B (no W: B reads as the full backward).
func legacyNames(csv []byte) []byte {
	lines := strings.Split(string(csv), "\n")
	for i, line := range lines {
		cells := strings.Split(line, ",")
		for j, c := range cells {
			cells[j] = legacyRe.ReplaceAllString(c, "${1}B${3}")
		}
		lines[i] = strings.Join(cells, ",")
	}
	return []byte(strings.Join(lines, "\n"))
}

// parseTorchCSV parses PyTorch's CSV form. With legacy, "BW" is read as the
// full backward and "B" as the input-gradient half of a chunk that also has
// a "W" (PyTorch 2.4 to 2.6).
func parseTorchCSV(data []byte, legacy bool) (ir.Program, error) {
	if !legacy {
		return ir.ParseCSV(bytes.NewReader(data))
	}
	p, err := ir.ReadCSV(bytes.NewReader(data), ir.CSVOptions{Cell: func(c string) (string, error) {
		if legacyI.MatchString(c) {
			return c, errors.New("PyTorch 2.4 to 2.6 have no I: there B is the input-gradient half of a chunk with a W (read current names with -from torch-csv)")
		}
		return legacyBW.ReplaceAllString(c, "${1}B${2}"), nil
	}})
	if err != nil {
		return p, err
	}
	type chunk struct{ s, m int }
	hasW := map[chunk]bool{}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			for _, c := range append(st.Computes(), st) {
				if c.Kind == ir.BackwardWeight {
					hasW[chunk{c.Stage, c.Micro}] = true
				}
			}
		}
	}
	for r, steps := range p.Ranks {
		for i, st := range steps {
			if st.Kind == ir.Backward && hasW[chunk{st.Stage, st.Micro}] {
				p.Ranks[r][i].Kind = ir.BackwardInput
			}
		}
	}
	return p, nil
}

// dropKinds returns p without the steps of the given kinds, and how many
// it dropped.
func dropKinds(p ir.Program, kinds ...ir.Kind) (ir.Program, int) {
	q := ir.NewProgram(p.Placement, p.Micro)
	q.Copies = p.Copies
	n := 0
	for r, steps := range p.Ranks {
		q.Ranks[r] = make([]ir.Step, 0, len(steps))
		for _, st := range steps {
			drop := false
			for _, k := range kinds {
				drop = drop || st.Kind == k
			}
			if drop {
				n++
				continue
			}
			q.Ranks[r] = append(q.Ranks[r], st)
		}
	}
	return q, n
}

// addReduceGrad inserts sREDUCE_GRAD after the step holding the last
// backward of stage s (its M-th B or W) and the transfers that directly
// follow it, as PyTorch's own lowering does (it adds REDUCE_GRAD before its
// transfers, which then go right after their compute action), unless the
// program already reduces stage s.
func addReduceGrad(p ir.Program) ir.Program {
	has := map[int]bool{}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind == ir.ReduceGrad {
				has[st.Stage] = true
			}
		}
	}
	q := ir.NewProgram(p.Placement, p.Micro)
	q.Copies = p.Copies
	for r, steps := range p.Ranks {
		count := map[int]int{}
		var pending []int // stages whose REDUCE_GRAD waits for the transfers to pass
		flush := func() {
			for _, s := range pending {
				q.Ranks[r] = append(q.Ranks[r], ir.StageOnly(ir.ReduceGrad, s))
			}
			pending = pending[:0]
		}
		for _, st := range steps {
			if !st.Kind.IsComm() {
				flush()
			}
			q.Ranks[r] = append(q.Ranks[r], st)
			subs := []ir.Step{st}
			if st.Kind.IsOverlap() {
				subs = st.Sub
			}
			for _, c := range subs {
				if c.Kind != ir.Backward && c.Kind != ir.BackwardWeight {
					continue
				}
				count[c.Stage]++
				if count[c.Stage] == p.Micro && !has[c.Stage] {
					pending = append(pending, c.Stage)
				}
			}
		}
		flush()
	}
	return q
}

// placementName names a placement for messages.
func placementName(pl ir.Placement) string {
	if pl.Name != "" {
		return pl.Name
	}
	return "table"
}

// maxImportBytes bounds the file import reads: far more than any schedule
// within gen/ir's limits (ir.MaxSteps steps of at most a few dozen bytes).
const maxImportBytes = 256 << 20

// readFileOrStdin reads path, or standard input for "-", refusing more than
// maxImportBytes.
func readFileOrStdin(path string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxImportBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxImportBytes {
		return nil, fmt.Errorf("%s is over %d MiB, more than any schedule within ppgen's limits (%d steps)", path, maxImportBytes>>20, ir.MaxSteps)
	}
	return data, nil
}

// packageName picks the Go package of an output file the way gen does:
// -package, else $GOPACKAGE, else the output directory's name.
func packageName(out, pkg string) (string, error) {
	if pkg != "" {
		return pkg, nil
	}
	if p := os.Getenv("GOPACKAGE"); p != "" {
		return p, nil
	}
	dir := "."
	if out != "-" {
		dir = filepath.Dir(out)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return strings.NewReplacer("-", "", ".", "").Replace(filepath.Base(abs)), nil
}

// parseFlagsAndArgs parses flags that may come before and after positional
// arguments ("import -from torch-csv FILE -o out.go") and returns the
// positional ones.
func parseFlagsAndArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(fs, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
