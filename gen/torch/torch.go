// Package torch reads and writes schedules in the CSV form of PyTorch's
// torch.distributed.pipelining (PipelineScheduleMulti._dump_csv and
// _load_csv), and imports one: parse, verify as given, add what runtime/pipe
// needs and PyTorch leaves implicit, lower.
//
// The form is one row per rank, one action per cell ("0F0", "4B3", "1I2",
// "2W2", "3SEND_F1", "4RECV_B0", "0UNSHARD", "0REDUCE_GRAD",
// "(0F7;7B3)OVERLAP_F_B"), an empty cell for an idle time step of the
// compute-only form. It comes in two dialects (Dialect): the current names,
// where B is the full backward and I and W its halves, and those of PyTorch
// 2.4 to 2.6, where "B" is the input-gradient half when the same chunk also
// has a "W" (the full backward otherwise) and "BW" is a full backward.
//
//	Read(r, d)          parse a file into an ir.Program
//	Write(w, p, d, o)   write a program for a PyTorch runtime
//	Import(name, r, o)  Read, then verify and lower it (gen.LowerProgram)
//
// Nothing here writes a file: `ppgen import` and `ppgen export` (cmd/ppgen)
// do, and gen/gencmd regenerates what `ppgen import -o` wrote.
package torch

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/verify"
)

// Dialect is one of the names PyTorch releases give the actions.
type Dialect int

const (
	// Current is "torch-csv": the names of PyTorch 2.7 and later (B the
	// full backward, I and W its halves).
	Current Dialect = iota
	// Legacy is "torch-csv-legacy": the names of PyTorch 2.4 to 2.6 (BW
	// the full backward, B the input-gradient half of a chunk with a W).
	Legacy
)

// String returns the dialect's name on ppgen's command line.
func (d Dialect) String() string {
	if d == Legacy {
		return "torch-csv-legacy"
	}
	return "torch-csv"
}

// ParseDialect reads a dialect's name ("torch-csv", "torch-csv-legacy").
func ParseDialect(name string) (Dialect, error) {
	switch name {
	case "torch-csv":
		return Current, nil
	case "torch-csv-legacy":
		return Legacy, nil
	}
	return 0, fmt.Errorf("%q; want torch-csv or torch-csv-legacy", name)
}

// legacyBW matches a full backward in PyTorch 2.4 to 2.6 names ("3BW1").
var legacyBW = regexp.MustCompile(`^(\s*\d+)BW(\d+)`)

// legacyI matches an input-gradient backward in current names ("3I1"),
// which PyTorch 2.4 to 2.6 spell B.
var legacyI = regexp.MustCompile(`^\d+I\d+$`)

// legacyRe matches the backward actions of a CSV in ppgen's names.
var legacyRe = regexp.MustCompile(`^(\d+)([BI])(\d+)$`)

// Read parses a schedule in dialect d, as it is read and within gen/ir's
// limits (so a file of any size is refused early). Its errors are
// *ir.ParseError, or say which legacy name the current dialect lacks.
func Read(r io.Reader, d Dialect) (ir.Program, error) {
	if d != Legacy {
		return ir.ParseCSV(r)
	}
	p, err := ir.ReadCSV(r, ir.CSVOptions{Cell: func(c string) (string, error) {
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

// WriteOptions say what Write adds.
type WriteOptions struct {
	// ReduceGrad adds REDUCE_GRAD after each stage's last backward when the
	// program has none, as PyTorch's own lowering does (it scales and
	// reduces gradients there). The legacy dialect has no REDUCE_GRAD.
	ReduceGrad bool
}

// Write writes p in dialect d for a PyTorch runtime: without the steps
// PyTorch does on its own (DATA_LOAD, DATA_SEND, DATA_RECV: it feeds inputs
// and targets to the first and last stage itself; OPT_STEP: the trainer
// steps the optimizer; BATCH_BEGIN, BATCH_END: it posts every transfer
// asynchronously). Pass a lowered program for _load_csv's format
// "compute_comms", a compute order for "compute_only". Steps PyTorch cannot
// express are an error, and so is a program with several model copies
// (dualpipe): the CSV cannot say that a micro-batch runs only its copy's
// stages.
func Write(w io.Writer, p ir.Program, d Dialect, o WriteOptions) error {
	if p.Copies > 1 {
		return fmt.Errorf("torch-csv cannot express %d model copies (PyTorch walks every micro-batch through all stages, and dualpipe's copies need a gradient all-reduce between ranks r and P-1-r); ppgen verify and ppgen sim work", p.Copies)
	}
	if p.ForwardOnly() {
		return errors.New("torch-csv cannot express a forward-only program: PyTorch's _validate_schedule wants a backward for every forward each stage runs; export the training schedule (without -forward-only)")
	}
	// BATCH_BEGIN/BATCH_END (-batch) go too: PyTorch's runtime posts each
	// transfer asynchronously and waits for a receive at its consumer. A
	// program that is safe only with its batches is refused: the CSV would
	// not say what made it safe.
	if q, n := DropKinds(p, ir.BatchBegin, ir.BatchEnd); n > 0 {
		if _, err := verify.Check(q, verify.Options{}); err != nil {
			return fmt.Errorf("torch-csv cannot express this program's %d batch steps (BATCH_BEGIN/BATCH_END, -batch), and without them it is not safe: %v; reorder its transfers so that it verifies without -batch, then export", n, err)
		}
	}
	p, _ = DropKinds(p, ir.DataLoad, ir.DataSend, ir.DataRecv, ir.OptStep, ir.BatchBegin, ir.BatchEnd)
	if o.ReduceGrad {
		p = addReduceGrad(p)
	}
	for r, steps := range p.Ranks {
		for i, st := range steps {
			if err := expressible(st, d); err != nil {
				return fmt.Errorf("rank %d step %d %s: %v", r, i, st, err)
			}
		}
	}
	b := ir.FormatCSV(p)
	if d == Legacy {
		b = legacyNames(b)
	}
	_, err := w.Write(b)
	return err
}

// expressible reports whether PyTorch's action parser reads st.
func expressible(st ir.Step, d Dialect) error {
	switch st.Kind {
	case ir.Forward, ir.Backward, ir.BackwardInput, ir.BackwardWeight,
		ir.SendF, ir.RecvF, ir.SendB, ir.RecvB, ir.Unshard, ir.Reshard:
		return nil
	case ir.ReduceGrad, ir.OverlapFB:
		if d == Legacy {
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

// DropKinds returns p without the steps of the given kinds, and how many
// it dropped.
func DropKinds(p ir.Program, kinds ...ir.Kind) (ir.Program, int) {
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

// ImportOptions configure Import.
type ImportOptions struct {
	Dialect Dialect
	// Lower is what gen.LowerProgram lowers and verifies by (the verify
	// limits, say).
	Lower gen.Options
	// DropFSDP drops the FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD)
	// when verify rejects them, or when stages are not sharded.
	DropFSDP bool
}

// Imported is a schedule read from PyTorch's CSV form, verified, and
// prepared for runtime/pipe.
type Imported struct {
	Result gen.Result // lowered and verified: what `ppgen import` emits
	Comms  bool       // the file holds transfers (PyTorch's lowered form)
	Notes  []string   // what preparing the program changed
}

// Form names the form of the file: "with comms" or "compute-only".
func (im Imported) Form() string {
	if im.Comms {
		return "with comms"
	}
	return "compute-only"
}

// fsdpKinds are the FSDP actions of PyTorch's CSV form.
var fsdpKinds = []ir.Kind{ir.Unshard, ir.Reshard, ir.ReduceGrad}

// Import reads a schedule (name names r in messages) and verifies it as it
// is, so that a diagnosis names the file's own steps: a compute-only order
// is lowered by ppgen's passes and checked; a lowered one (with transfers)
// is checked as PyTorch would run it, under rendezvous semantics. FSDP
// actions are kept where the file has them and verified with the rest (a
// stage computes only while unsharded, one REDUCE_GRAD after its last
// backward and before OPT_STEP): runtime/pipe runs them through
// pipe.Sharded. With o.DropFSDP, the FSDP actions are dropped, and the
// program without them is lowered and verified again. A lowered program
// then gets what runtime/pipe needs and PyTorch does outside its action list
// (gen.AddImplicitSteps), in gen.LowerProgram, as every command reading -in
// does. Verify's errors keep their type (*verify.Error,
// *verify.DeadlockError); a rejected FSDP action gets a hint at -drop-fsdp.
func Import(name string, r io.Reader, o ImportOptions) (Imported, error) {
	p, err := Read(r, o.Dialect)
	if err != nil {
		var pe *ir.ParseError
		if o.Dialect == Current && errors.As(err, &pe) && legacyBW.MatchString(pe.Text) {
			return Imported{}, fmt.Errorf("%s: %w; BW is PyTorch 2.4 to 2.6's full backward: use -from torch-csv-legacy", name, err)
		}
		return Imported{}, fmt.Errorf("%s: %w", name, err)
	}
	im := Imported{Comms: p.HasComm()}
	res, err := gen.LowerProgram(p, o.Lower)
	if err != nil && !(o.DropFSDP && isFSDPError(err)) {
		hint := ""
		if isFSDPError(err) {
			hint = "; to import the schedule without its FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD), pass -drop-fsdp"
		}
		return im, fmt.Errorf("%s (%s, %s): %w%s", name, o.Dialect, im.Form(), err, hint)
	}
	if o.DropFSDP {
		var n int
		if p, n = DropKinds(p, fsdpKinds...); n > 0 {
			im.Notes = append(im.Notes, fmt.Sprintf("dropped %d FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD) as -drop-fsdp asks", n))
		}
		if n > 0 || err != nil {
			if res, err = gen.LowerProgram(p, o.Lower); err != nil {
				// Step numbers count the program without the FSDP actions.
				return im, fmt.Errorf("%s (%s, %s) without its FSDP actions: %w", name, o.Dialect, im.Form(), err)
			}
		}
	}
	if res.Implicit > 0 {
		im.Notes = append(im.Notes, fmt.Sprintf("added %d DATA_LOAD and OPT_STEP steps PyTorch leaves implicit", res.Implicit))
	}
	im.Result = res
	return im, nil
}

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
