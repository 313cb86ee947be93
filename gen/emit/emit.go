// Package emit turns a lowered ir.Program (data loads, transfers and slots in
// place) into Go source that runs it on runtime/pipe: one exported RankN
// function per rank made of straight-line calls with constant arguments,
// split into helpers of a bounded size so `go build` stays fast, plus a Ranks
// table, a Spec and a Fingerprint; Options.Prefix starts each of these
// names, so that several programs (train and eval) share one package. The
// file shape and the call of each step kind are fixed by docs/internals.md.
// Emit is pure and deterministic: the same program and options give the
// same bytes.
//
// The file's header (guard, Fingerprint, Spec, Ranks) is built with
// github.com/dave/jennifer, which also gofmts it; the rank functions are
// written as text already in gofmt's form.
//
// The file's first line is Header, the invocation that made it under it
// (Invocation, SplitArgs); Recorded reads them back, for the tools that
// regenerate or check the file (gen/gencmd, gen/vet, ppgen check).
package emit

import (
	"bytes"
	"fmt"
	"go/format"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dave/jennifer/jen"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
)

// PipePath is the import path of the runtime package generated code calls.
const PipePath = "github.com/ppgen/ppgen/runtime/pipe"

// DefaultHelperSize is the number of calls per helper function when
// Options.HelperSize is 0. Helpers of 50 to 400 calls build about equally
// fast (BENCHMARKS.md); 100 uses the least compiler memory, and one function
// of thousands of calls costs several times more per call.
const DefaultHelperSize = 100

// Options control the generated file.
type Options struct {
	// Package is the package name of the generated file.
	Package string
	// Invocation is the command line recorded under the header, e.g.
	// "ppgen gen -schedule 1f1b -ranks 4 -micro 8". Each of its lines
	// becomes one comment line; empty records none.
	Invocation string
	// Schedule is the schedule name recorded in Spec.Schedule.
	Schedule string
	// Slots is the number of buffer slots of each rank. When nil it is
	// computed as one more than the largest slot a rank's steps use.
	Slots []int
	// HelperSize is the number of calls per helper function; 0 means
	// DefaultHelperSize.
	HelperSize int
	// NoFuse emits one call per step: by default the adjacent steps of one
	// chunk listed by Fusions (a forward and the send of its output, a
	// receive and the compute that consumes it, ...) are one call.
	NoFuse bool
	// Table also emits `var Program = [][]pipe.Op{pipe.DecodeOps(...), ...}`, the steps as data
	// for pipe.Interpret.
	Table bool
	// Layers, when set, is Spec.Layers: each stage's range of the model
	// description's layers (first, end).
	Layers [][2]int
	// Prefix, when set, starts every identifier the file declares, so that
	// several programs (a train and an eval program) share one package:
	// PrefixFingerprint, PrefixSpec, PrefixRanks, PrefixRank0..,
	// PrefixProgram, and the helpers prefixRank0Part0.. (the prefix's
	// first letter lower-cased). It must be an exported Go identifier
	// (CheckPrefix); empty leaves the names as they are.
	Prefix string
}

// CheckPrefix checks an Options.Prefix: empty, or an exported Go
// identifier (Eval), so that the prefixed Spec and Ranks are exported and
// the helpers stay unexported.
func CheckPrefix(prefix string) error {
	if prefix == "" || (token.IsIdentifier(prefix) && token.IsExported(prefix)) {
		return nil
	}
	fix := "such as Eval"
	if token.IsIdentifier(prefix) {
		r, size := utf8.DecodeRuneInString(prefix)
		if up := string(unicode.ToUpper(r)) + prefix[size:]; token.IsExported(up) {
			fix = "such as " + up
		}
	}
	return fmt.Errorf("%q does not start an exported Go identifier (its names would be %sSpec, %sRanks, ...); give an upper-case identifier %s", prefix, prefix, prefix, fix)
}

// names are the identifiers a generated file declares, with its prefix.
type names struct{ prefix string }

func (n names) of(name string) string { return n.prefix + name }

// rank is the name of rank r's function, PrefixRankN.
func (n names) rank(r int) string { return n.prefix + "Rank" + strconv.Itoa(r) }

// helper is the start of the names of rank r's helpers, prefixRankNPart
// (unexported: the prefix's first letter lower-cased).
func (n names) helper(r int) string {
	s := n.prefix + "Rank" + strconv.Itoa(r) + "Part"
	c, size := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(c)) + s[size:]
}

// op is one step resolved to its runtime call.
type op struct {
	method                        string // the pipe.Exec method: the kind's (abi.Kind.Method) or a fused pair's
	kind                          ir.Kind
	stage, micro, peer, slot, src int
	sub                           []op // an overlap's sub-steps, in order
}

// Emit returns the Go source of the lowered program p. It fails, naming the
// rank and step, on a step kind the runtime has no call for and on a step
// whose fields do not fit the program (stage, micro, peer or slot out of
// range, a slot missing). p must be verified (gen/verify): Emit takes the
// data flow between steps (the src slots) as given. A program with two model
// copies (ir.Program.Copies = 2, dualpipe) gets Spec.Copies = 2, which makes
// the runtime sum the copies' gradients at OPT_STEP; more copies are refused.
func Emit(p ir.Program, opt Options) ([]byte, error) {
	if p.Copies > 2 {
		return nil, fmt.Errorf("emit: the program has %d model copies; the runtime sums the gradients of at most 2 (dualpipe)", p.Copies)
	}
	if !token.IsIdentifier(opt.Package) || opt.Package == "_" {
		return nil, fmt.Errorf("emit: package name %q is not a Go identifier", opt.Package)
	}
	if err := CheckPrefix(opt.Prefix); err != nil {
		return nil, fmt.Errorf("emit: name prefix %w", err)
	}
	n := names{opt.Prefix}
	if opt.HelperSize < 0 {
		return nil, fmt.Errorf("emit: helper size %d is negative; want 0 (default %d) or more", opt.HelperSize, DefaultHelperSize)
	}
	if opt.HelperSize == 0 {
		opt.HelperSize = DefaultHelperSize
	}
	if opt.Layers != nil && len(opt.Layers) != p.Stages() {
		return nil, fmt.Errorf("emit: %d layer ranges for %d stages", len(opt.Layers), p.Stages())
	}
	ops, slots, err := resolve(p, opt.Slots)
	if err != nil {
		return nil, err
	}

	f := jen.NewFile(opt.Package)
	f.ImportAlias(PipePath, "pipe")
	writeHeader(f, opt.Invocation)

	f.Comment("This guard breaks the build when runtime/pipe no longer supports this generated code.")
	f.Const().Id("_").Op("=").Qual(PipePath, abi.VersionGuard)
	f.Line()
	f.Comment(n.of("Fingerprint") + " is the hash of the lowered program's canonical text (steps with peers and")
	f.Comment("slots); every rank checks it at the rendezvous.")
	f.Const().Id(n.of("Fingerprint")).Op("=").Lit(Fingerprint(p))
	f.Line()
	f.Comment(n.of("Spec") + " describes the program: ranks, stages, micro-batches, slots per rank and placement.")
	spec := []jen.Code{
		field("Schedule", jen.Lit(opt.Schedule)),
		field("Ranks", jen.Lit(p.Placement.NumRanks)),
		field("Stages", jen.Lit(p.Stages())),
		field("Micro", jen.Lit(p.Micro)),
		field("Slots", intSlice(slots)),
		field("RankOf", intSlice(p.Placement.RankOf)),
		field("Fingerprint", jen.Id(n.of("Fingerprint"))),
		copiesField(p.Copies),
		ownedField(Owned(p)),
		labelsField(ShipsLabels(p)),
		forwardOnlyField(p.ForwardOnly()),
		layersField(opt.Layers),
		tiesField(p.Ties),
	}
	spec = append(spec, rebuildFields(p)...)
	spec = append(spec, recomputeShareField(p.RecomputeShare), recomputeLayersField(p.RecomputeLayers), recomputeCostField(&p))
	f.Var().Id(n.of("Spec")).Op("=").Qual(PipePath, "Spec").Custom(multiline, spec...)
	f.Line()
	ranks := n.of("Ranks")
	f.Comment(ranks + " holds the program of each rank: " + ranks + "[r] runs rank r's steps and returns the")
	f.Comment("first error.")
	funcs := make([]jen.Code, len(ops))
	for r := range ops {
		funcs[r] = jen.Id(n.rank(r))
	}
	f.Var().Id(ranks).Op("=").Index(jen.Op("...")).Func().Params(jen.Op("*").Qual(PipePath, "Exec")).Error().
		Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: len(ops) > 8}, funcs...)

	// The header above is small: jennifer renders it and gofmts it. The
	// rank functions, nearly all of the file, are written as text in the
	// form gofmt gives them (writeBody), so the output is never parsed and
	// reprinted: TestEmitIsGofmtClean checks that gofmt leaves it unchanged.
	var head bytes.Buffer
	if err := f.Render(&head); err != nil {
		return nil, fmt.Errorf("emit: rendering the generated file: %w", err)
	}
	out := make([]byte, 0, head.Len()+64*len(p.Ranks)+72*p.NumSteps())
	out = append(out, bytes.TrimRight(head.Bytes(), "\n")...)
	out = append(out, '\n')
	for r, rank := range ops {
		out = writeRank(out, n, p.Placement, r, rank, opt.HelperSize, opt.NoFuse)
	}
	if opt.Table {
		// The table's items are aligned by gofmt itself: a -table file is
		// formatted whole (it is opt-in, and its table costs a parse anyway).
		out = writeTable(out, n.of("Program"), ops)
		formatted, err := format.Source(out)
		if err != nil {
			return nil, fmt.Errorf("emit: formatting the generated file: %w", err)
		}
		out = formatted
	}
	return out, nil
}

// multiline renders a composite literal's elements one per line.
var multiline = jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}

// copiesField is the Spec's Copies field of a program with model copies,
// and nothing (no field, so other programs' files do not change) otherwise.
func copiesField(c int) jen.Code {
	if c <= 1 {
		return jen.Null()
	}
	return field("Copies", jen.Lit(c))
}

// ownedField is the Spec's Owned field of an mpipe program (micro-batches
// loaded by their owner rank), and nothing otherwise.
func ownedField(n int) jen.Code {
	if n <= 0 {
		return jen.Null()
	}
	return field("Owned", jen.Lit(n))
}

// labelsField is the Spec's ShipLabels field of a program that ships
// labels along the pipe, and nothing otherwise.
func labelsField(ship bool) jen.Code {
	if !ship {
		return jen.Null()
	}
	return field("ShipLabels", jen.True())
}

// forwardOnlyField is the Spec's ForwardOnly field of a forward-only
// program (none otherwise).
func forwardOnlyField(f bool) jen.Code {
	if !f {
		return jen.Null()
	}
	return field("ForwardOnly", jen.True())
}

// layersField is the Spec's Layers field of a program generated for a
// model description, and nothing otherwise.
func layersField(layers [][2]int) jen.Code {
	if layers == nil {
		return jen.Null()
	}
	items := make([]jen.Code, len(layers))
	for i, l := range layers {
		items[i] = jen.Values(jen.Lit(l[0]), jen.Lit(l[1]))
	}
	return field("Layers", jen.Index().Index(jen.Lit(2)).Int().Values(items...))
}

// tiesField is the Spec's Ties field of a program with tied stages
// (-tie), and nothing otherwise.
func tiesField(ties []ir.Tie) jen.Code {
	if len(ties) == 0 {
		return jen.Null()
	}
	items := make([]jen.Code, len(ties))
	for i, t := range ties {
		items[i] = jen.Values(jen.Id("A").Op(":").Lit(t.A), jen.Id("B").Op(":").Lit(t.B))
	}
	return field("Ties", jen.Index().Qual(PipePath, "Tie").Values(items...))
}

// rebuildFields are the Spec's fields of the kinds of abi's IsRebuild
// class (RECOMPUTE) that p has steps of: each named after its kind's Go
// name (Spec.Recompute), listing the stages whose F keep only their input
// (RebuiltStages). A program without such steps has none of them.
func rebuildFields(p ir.Program) []jen.Code {
	var fields []jen.Code
	for _, k := range abi.Kinds() {
		if !k.IsRebuild() {
			continue
		}
		if stages := RebuiltStages(p, k); len(stages) != 0 {
			fields = append(fields, field(k.GoName(), intSlice(stages)))
		}
	}
	return fields
}

// recomputeShareField is the Spec's RecomputeShare field of a program
// with a selective recompute policy (ir.Program.RecomputeShare), and
// nothing otherwise.
func recomputeShareField(share []float64) jen.Code {
	if share == nil {
		return jen.Null()
	}
	items := make([]jen.Code, len(share))
	for i, f := range share {
		items[i] = jen.Lit(f)
	}
	return field("RecomputeShare", jen.Index().Float64().Values(items...))
}

// recomputeCostField is the Spec's RecomputeCost field (RecomputeCosts),
// and nothing where that is nil.
func recomputeCostField(p *ir.Program) jen.Code {
	costs := RecomputeCosts(*p)
	if costs == nil {
		return jen.Null()
	}
	items := make([]jen.Code, len(costs))
	for s, f := range costs {
		items[s] = jen.Lit(f)
	}
	return field("RecomputeCost", jen.Index().Float64().Values(items...))
}

// RecomputeCosts is the Spec's RecomputeCost of a program with a selective
// or model recompute policy (one of ir.Program's RecomputeShare,
// RecomputeCost, RecomputeLayers set): per stage, the share of the
// stage's R one RECOMPUTE of it costs (ir.Program.RecomputeCostPart; 1
// for a stage that recomputes whole or not at all). It is nil otherwise,
// so that other programs' files are as before.
func RecomputeCosts(p ir.Program) []float64 {
	if p.RecomputeShare == nil && p.RecomputeCost == nil && p.RecomputeLayers == nil {
		return nil
	}
	costs := make([]float64, p.Stages())
	for s := range costs {
		costs[s] = p.RecomputeCostPart(s)
	}
	return costs
}

// recomputeLayersField is the Spec's RecomputeLayers field of a program
// whose RECOMPUTE steps re-run named layers (ir.Program.RecomputeLayers,
// -recompute model), and nothing otherwise.
func recomputeLayersField(layers [][]int) jen.Code {
	if layers == nil {
		return jen.Null()
	}
	items := make([]jen.Code, len(layers))
	for s, ls := range layers {
		if ls == nil {
			items[s] = jen.Nil()
			continue
		}
		idx := make([]jen.Code, len(ls))
		for i, l := range ls {
			idx[i] = jen.Lit(l)
		}
		items[s] = jen.Values(idx...)
	}
	return field("RecomputeLayers", jen.Index().Index().Int().Values(items...))
}

// RebuiltStages returns the stages that p's steps of kind k name, in
// increasing order (nil when it has none): for a kind of abi's IsRebuild
// class, the Spec field named after it (Spec.Recompute for RECOMPUTE).
func RebuiltStages(p ir.Program, k abi.Kind) []int {
	var stages []int
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind == k && !slices.Contains(stages, st.Stage) {
				stages = append(stages, st.Stage)
			}
		}
	}
	slices.Sort(stages)
	return stages
}

// ShipsLabels reports whether p carries labels along the pipe (it holds
// DATA_SEND or DATA_RECV steps): its Spec.ShipLabels.
func ShipsLabels(p ir.Program) bool {
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind == ir.DataSend || st.Kind == ir.DataRecv {
				return true
			}
		}
	}
	return false
}

// Owned returns the Spec.Owned of p: one more than the highest micro-batch
// an MPIPE_FWD_SEND or MPIPE_FWD_RECV ships, or 0 when p has none.
func Owned(p ir.Program) int {
	n := 0
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind == ir.MpipeSend || st.Kind == ir.MpipeRecv {
				n = max(n, st.Micro+1)
			}
		}
	}
	return n
}

// field renders "name: value" in a composite literal, keeping the order given
// (jen.Dict sorts its keys).
func field(name string, value jen.Code) jen.Code { return jen.Id(name).Op(":").Add(value) }

func intSlice(v []int) *jen.Statement {
	items := make([]jen.Code, len(v))
	for i, x := range v {
		items[i] = jen.Lit(x)
	}
	return jen.Index().Int().Values(items...)
}

// writeRank appends RankN and its helpers rankNPartK (with n's prefix) to dst.
func writeRank(dst []byte, n names, pl ir.Placement, r int, rank []op, size int, noFuse bool) []byte {
	stages := pl.StagesOf(r)
	list := make([]string, len(stages))
	for i, s := range stages {
		list[i] = strconv.Itoa(s)
	}
	held := "stages " + strings.Join(list, ", ")
	switch len(list) {
	case 0:
		held = "no stages"
	case 1:
		held = "stage " + list[0]
	}
	name := n.rank(r)
	helper := n.helper(r)

	// The calls: one per step, or one per fused pair.
	type unit struct{ first, n int } // steps first..first+n-1
	var units []unit
	for i := 0; i < len(rank); i++ {
		if !noFuse && i+1 < len(rank) {
			if _, ok := fuse(rank[i], rank[i+1]); ok {
				units = append(units, unit{i, 2})
				i++
				continue
			}
		}
		units = append(units, unit{i, 1})
	}

	dst = fmt.Appendf(dst, "\n// %s runs rank %d's %d steps (%s) and returns the first error.\nfunc %s(x *pipe.Exec) error {\n", name, r, len(rank), held, name)
	for k := 0; k*size < len(units); k++ {
		dst = fmt.Appendf(dst, "\t%s%d(x)\n", helper, k)
	}
	dst = append(dst, "\treturn x.Err()\n}\n"...)

	var ss []stmt
	for k := 0; k*size < len(units); k++ {
		us := units[k*size : min((k+1)*size, len(units))]
		ss = ss[:0]
		for _, u := range us {
			if u.n == 2 {
				ss = append(ss, fusedStmt(&rank[u.first], &rank[u.first+1]))
			} else {
				ss = append(ss, rank[u.first].stmt())
			}
		}
		lo, hi := us[0].first, us[len(us)-1].first+us[len(us)-1].n-1
		dst = fmt.Appendf(dst, "\n// %s%d runs steps %d-%d of rank %d.\nfunc %s%d(x *pipe.Exec) {\n", helper, k, lo, hi, r, helper, k)
		dst = writeBody(dst, ss)
		dst = append(dst, "}\n"...)
	}
	return dst
}

// stmt is one statement of a rank function: a packed call x.Method(at)
// with the text of its step, or of its two fused steps, as the trailing
// comment; or (code set) a call without a comment.
type stmt struct {
	method string
	at     abi.At
	a, b   *op // the steps the comment describes (b: the second of a fused pair)
	code   []byte
}

// atWidth is the length of an At literal, 0x0000_0000_0000_0000.
const atWidth = 21

// width is the length of the statement's code.
func (s *stmt) width() int {
	if s.code != nil {
		return len(s.code)
	}
	return len("x.") + len(s.method) + atWidth + len("()")
}

func (s *stmt) appendCode(dst []byte) []byte {
	if s.code != nil {
		return append(dst, s.code...)
	}
	dst = append(append(append(dst, "x."...), s.method...), '(')
	return append(abi.AppendAt(dst, s.at), ')')
}

func (s *stmt) appendComment(dst []byte) []byte {
	dst = appendDescribe(dst, s.a.step(), s.a.src)
	if s.b != nil {
		dst = appendDescribe(append(dst, "; "...), s.b.step(), s.b.src)
	}
	return dst
}

// writeBody appends the statements of a function body the way gofmt
// prints them: one tab of indent, and the trailing comments of each run of
// consecutive commented statements aligned one space after the run's
// longest code (gofmt's tabwriter column; a statement without a comment
// ends the run).
func writeBody(dst []byte, ss []stmt) []byte {
	for i := 0; i < len(ss); {
		if ss[i].code != nil {
			dst = append(ss[i].appendCode(append(dst, '\t')), '\n')
			i++
			continue
		}
		j, width := i, 0
		for ; j < len(ss) && ss[j].code == nil; j++ {
			width = max(width, ss[j].width())
		}
		for k := i; k < j; k++ {
			s := &ss[k]
			dst = s.appendCode(append(dst, '\t'))
			for range width - s.width() + 1 {
				dst = append(dst, ' ')
			}
			dst = append(s.appendComment(append(dst, "// "...)), '\n')
		}
		i = j
	}
	return dst
}

// fusedStmt returns the one call of the fused steps a and b:
// x.Method(at of the compute step) with both steps' text as the comment.
func fusedStmt(a, b *op) stmt {
	fu, _ := fuse(*a, *b)
	c := a
	if b.kind.Shape() == abi.ArgsCompute {
		c = b
	}
	d := c.src
	if c.kind.Shape() != abi.ArgsCompute {
		d = ir.None
	}
	at, _ := abi.PackAt(c.stage, c.micro, c.slot, d)
	return stmt{method: fu.Method, at: at, a: a, b: b}
}

// step is the op's step (without sub-steps).
func (o op) step() ir.Step {
	return ir.Step{Kind: o.kind, Stage: o.stage, Micro: o.micro, Peer: o.peer, Slot: o.slot}
}

// stmt returns the call of one step: x.Method(at) with the step's text as
// a trailing comment, x.OptStep() or an overlap's x.Method(args...).
func (o *op) stmt() stmt {
	switch o.kind.Shape() {
	case abi.ArgsOverlap:
		return stmt{code: o.overlapCall()}
	case abi.ArgsNone:
		return stmt{code: []byte("x." + o.method + "()")}
	case abi.ArgsStage:
		return stmt{code: []byte("x." + o.method + "(" + strconv.Itoa(o.stage) + ")")}
	}
	at, _ := o.kind.Pack(o.stage, o.micro, o.peer, o.slot, o.src)
	return stmt{method: o.method, at: at, a: o}
}

// Describe is the comment of a packed call: the step's text form and its
// peer, slot and source slot, e.g. "0SEND_F1 peer 1, slot 1" or
// "3F17 slot 2, src slot 1" (src is ir.None when the input is the chunk's
// own).
func Describe(st ir.Step, src int) string { return string(appendDescribe(nil, st, src)) }

// appendDescribe appends Describe(st, src) to dst.
func appendDescribe(dst []byte, st ir.Step, src int) []byte {
	dst = ir.Step{Kind: st.Kind, Stage: st.Stage, Micro: st.Micro}.AppendText(dst)
	switch {
	case st.Slot == ir.None && st.Kind.IsComm():
		return strconv.AppendInt(append(dst, " peer "...), int64(st.Peer), 10) // an owner's MPIPE_FWD_SEND
	case st.Slot == ir.None:
		return append(dst, " (owned micro-batch)"...) // an owner's DATA_LOAD
	case st.Kind.IsComm():
		dst = strconv.AppendInt(append(dst, " peer "...), int64(st.Peer), 10)
		return strconv.AppendInt(append(dst, ", slot "...), int64(st.Slot), 10)
	}
	dst = strconv.AppendInt(append(dst, " slot "...), int64(st.Slot), 10)
	if src != ir.None {
		dst = strconv.AppendInt(append(dst, ", src slot "...), int64(src), 10)
	}
	return dst
}

// writeTable appends `var Program = [][]pipe.Op{pipe.DecodeOps(kinds,
// []pipe.At{...}), ...}` (name is Program with the file's prefix): per rank, the ops' kind letters as one string and
// their fields packed one pipe.At per line with the step as a comment. Six
// keyed fields per op cost the Go compiler about five times as much. Emit
// gofmts the result.
func writeTable(dst []byte, name string, ops [][]op) []byte {
	dst = fmt.Appendf(dst, "\n// %s holds the same steps as data, %s[r] for rank r, for pipe.Interpret.\nvar %s = [][]pipe.Op{\n", name, name, name)
	for r, rank := range ops {
		var kinds []byte
		var items []byte
		add := func(o op, comment []byte) {
			kinds = append(kinds, o.kind.Code())
			a, _ := o.kind.Pack(o.stage, o.micro, o.peer, o.slot, o.src)
			items = append(abi.AppendAt(append(items, "\t\t"...), a), ", // "...)
			items = append(append(items, comment...), '\n')
		}
		for _, o := range rank {
			switch o.kind.Shape() {
			case abi.ArgsOverlap:
				// The header, then its sub-steps (see calls.go).
				add(o, []byte(o.kind.String()))
				for _, s := range o.sub {
					add(s, appendDescribe(nil, s.step(), s.src))
				}
			case abi.ArgsNone:
				add(o, []byte(o.kind.String()))
			case abi.ArgsStage:
				add(o, o.step().AppendText(nil))
			default:
				add(o, appendDescribe(nil, o.step(), o.src))
			}
		}
		dst = strconv.AppendQuote(append(dst, "\tpipe.DecodeOps("...), string(kinds))
		if len(rank) == 0 {
			dst = append(dst, ", []pipe.At{}),\n"...)
			continue
		}
		dst = strconv.AppendInt(append(dst, ", []pipe.At{ // rank "...), int64(r), 10)
		dst = append(append(append(dst, '\n'), items...), "\t}),\n"...)
	}
	return append(dst, "}\n"...)
}

// resolve checks the program against the runtime API and returns each rank's
// steps as calls, with the slot count of each rank.
func resolve(p ir.Program, slots []int) ([][]op, []int, error) {
	P, S := p.Placement.NumRanks, p.Stages()
	if P < 1 {
		return nil, nil, fmt.Errorf("emit: the program's placement has %d ranks; want at least 1", P)
	}
	if len(p.Ranks) != P {
		return nil, nil, fmt.Errorf("emit: the program has %d rank programs but its placement has %d ranks", len(p.Ranks), P)
	}
	if slots != nil && len(slots) != P {
		return nil, nil, fmt.Errorf("emit: %d slot counts given for %d ranks", len(slots), P)
	}
	if slots == nil {
		slots = make([]int, P)
		for r, steps := range p.Ranks {
			for _, st := range steps {
				slots[r] = max(slots[r], st.Slot+1)
			}
		}
	} else {
		slots = append([]int(nil), slots...)
	}
	for _, c := range []struct {
		what string
		n    int
	}{{"ranks", P}, {"stages", S}, {"micro-batches", p.Micro}, {"slots on a rank", slices.Max(append([]int{0}, slots...))}} {
		if c.n > abi.MaxCount {
			return nil, nil, fmt.Errorf("emit: the program has %d %s; the runtime takes at most %d (it packs a step's arguments in 16 bits each)", c.n, c.what, abi.MaxCount)
		}
	}
	ops := make([][]op, P)
	for r, steps := range p.Ranks {
		if slots[r] < 0 {
			return nil, nil, fmt.Errorf("emit: rank %d: slot count %d is negative", r, slots[r])
		}
		ops[r] = make([]op, len(steps))
		// leaf resolves one step that is not an overlap (or an overlap's sub-step).
		leaf := func(st ir.Step) (op, error) {
			if st.Kind.Method() == "" || st.Kind.IsOverlap() {
				return op{}, fmt.Errorf("the runtime has no call for %s", st.Kind)
			}
			o := op{method: st.Kind.Method(), kind: st.Kind, stage: st.Stage, micro: st.Micro, peer: st.Peer, slot: st.Slot}
			if st.Kind.Shape() == abi.ArgsNone {
				// OPT_STEP: no operands; record none in the table either.
				o.stage, o.micro, o.peer, o.slot = ir.None, ir.None, ir.None, ir.None
				return o, nil
			}
			if st.Kind.Shape() == abi.ArgsStage {
				// UNSHARD, RESHARD, REDUCE_GRAD: a stage of this rank.
				o.micro, o.peer, o.slot = ir.None, ir.None, ir.None
				switch {
				case st.Stage < 0 || st.Stage >= S:
					return op{}, fmt.Errorf("stage %d is outside 0..%d", st.Stage, S-1)
				case p.Placement.RankOf[st.Stage] != r:
					return op{}, fmt.Errorf("stage %d is placed on rank %d, not this one", st.Stage, p.Placement.RankOf[st.Stage])
				}
				return o, nil
			}
			if p.OwnerStep(r, st) {
				// mpipe: the owner's load and send of another rank's input; no slot.
				o.slot = ir.None
				if st.Kind == ir.MpipeSend && st.Peer != p.Placement.PeerOfStep(st) {
					return op{}, fmt.Errorf("peer %d but stage %d is on rank %d", st.Peer, st.Stage, p.Placement.PeerOfStep(st))
				}
				if st.Kind != ir.MpipeSend {
					o.peer = ir.None
				}
				return o, nil
			}
			switch {
			case st.Stage < 0 || st.Stage >= S:
				return op{}, fmt.Errorf("stage %d is outside 0..%d", st.Stage, S-1)
			case p.Placement.RankOf[st.Stage] != r:
				return op{}, fmt.Errorf("stage %d is placed on rank %d, not this one", st.Stage, p.Placement.RankOf[st.Stage])
			case st.Micro < 0 || st.Micro >= p.Micro:
				return op{}, fmt.Errorf("micro-batch %d is outside 0..%d", st.Micro, p.Micro-1)
			case st.Slot < 0:
				return op{}, fmt.Errorf("no slot assigned (slot %d); run slot assignment before emitting", st.Slot)
			case st.Slot >= slots[r]:
				return op{}, fmt.Errorf("slot %d but the rank has %d slots", st.Slot, slots[r])
			}
			if st.Kind.Shape() == abi.ArgsComm {
				want := p.Placement.PeerOfStep(st)
				switch {
				case want == ir.None:
					return op{}, fmt.Errorf("stage %d has no neighbour stage to exchange %s with", st.Stage, st.Kind.Channel())
				case st.Peer != want:
					return op{}, fmt.Errorf("peer %d but the placement puts the other end on rank %d", st.Peer, want)
				}
			} else {
				o.peer = ir.None
			}
			return o, nil
		}
		for i, st := range steps {
			var o op
			var err error
			if st.Kind.IsOverlap() && st.Kind.Valid() {
				o, err = resolveOverlap(st, leaf)
			} else {
				o, err = leaf(st)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("emit: rank %d step %d (%s): %w", r, i, st, err)
			}
			ops[r][i] = o
		}
	}
	// The steps are valid now; take each compute's src from its neighbour's slot.
	index := passes.IndexSlots(p)
	for r, steps := range p.Ranks {
		for i, st := range steps {
			ops[r][i].src = ir.None
			if st.Kind == ir.Forward || st.Kind.IsBackward() {
				ops[r][i].src = index.Src(st)
			}
			for k, sub := range ops[r][i].sub {
				ops[r][i].sub[k].src = ir.None
				if sub.kind.Shape() == abi.ArgsCompute {
					ops[r][i].sub[k].src = index.Src(st.Sub[k])
				}
			}
		}
	}
	return ops, slots, nil
}
