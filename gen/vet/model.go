package vet

import (
	"fmt"
	"go/ast"
	"go/token"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/ir"
)

// method is how gen/emit writes one step kind: its pipe.Exec method and
// arguments.
type method struct {
	kind   ir.Kind
	args   abi.Shape
	packed bool         // takes one pipe.At constant
	fused  *emit.Fusion // two steps in one call (kind is unused)
}

// methods (by pipe.Exec method name) and opKinds (by the pipe.OpKind
// constant of an overlap's backward kind argument, and for naming -table
// entries) come from abi's kind table (Kind.Method, "Op" and Kind.GoName),
// as do the arguments and the letters of -table kinds strings, and the
// fused calls from gen/emit's Fusions, so reading generated code back
// always matches what the emitter writes. removed maps the unpacked methods
// runtime/pipe no longer has (x.DataLoad(stage, micro, slot), ...) to the
// packed method of the same step kind.
var (
	methods = map[string]method{}
	opKinds = map[string]ir.Kind{}
	removed = map[string]string{}
)

// older are the names a step kind's method had in earlier runtime APIs,
// which hand-edited or stale code may call; vet names the method that
// replaced them. Within Version 1 runtime/pipe dropped the unpacked twins
// of the packed steps (x.RecvAct(stage, micro, peer, slot), ...); Version 2
// named the methods after their kinds (x.Load became x.DataLoad, ...), so
// that a kind has no third spelling (abi.Kind.Method).
var older = map[ir.Kind][]string{
	ir.DataLoad:          {"Load"},
	ir.RecvF:             {"RecvAct"},
	ir.SendF:             {"SendAct"},
	ir.RecvB:             {"RecvGrad"},
	ir.SendB:             {"SendGrad"},
	ir.Forward:           {"Forward"},
	ir.Backward:          {"Backward"},
	ir.BackwardInput:     {"BackwardInput"},
	ir.BackwardWeight:    {"BackwardWeight"},
	ir.SwapLaunchOffload: {"LaunchOffload"},
	ir.SwapWaitOffload:   {"WaitOffload"},
	ir.SwapLaunchLoad:    {"LaunchLoad"},
	ir.SwapWaitLoad:      {"WaitLoad"},
	ir.DataRecv:          {"RecvData", "RecvLabels"},
	ir.DataSend:          {"SendData", "SendLabels"},
	ir.MpipeRecv:         {"RecvInput"},
	ir.MpipeSend:         {"SendInput"},
}

func init() {
	for _, k := range abi.Kinds() {
		methods[k.Method()] = method{kind: k, args: k.Shape(), packed: k.Shape().Packed()}
		opKinds["Op"+k.GoName()] = k
		for _, old := range older[k] {
			removed[old] = k.Method()
		}
	}
	for _, f := range emit.Fusions() {
		methods[f.Method] = method{args: abi.ArgsCompute, packed: true, fused: &f}
	}
}

// step is one runtime call of a rank function.
type step struct {
	call   *ast.CallExpr
	rank   int
	index  int
	method string
	st     ir.Step
	src    int    // compute: the src argument; else ir.None
	subSrc [2]int // overlap: the sub-steps' src
	ok     bool   // well-formed: known method, constant arguments of the right count
	desc   string // a well-formed packed call: emit.Describe of its step
}

// text renders the call as written, e.g. "x.Unshard(1)", and a
// packed call with what its pipe.At says, e.g.
// "x.SendF(0x0000_0003_0001_0003) (0SEND_F3 peer 1, slot 3)".
func (s *step) text() string {
	if s.desc != "" {
		return exprString(s.call) + " (" + s.desc + ")"
	}
	return exprString(s.call)
}

// spec is the parsed Spec literal.
type spec struct {
	lit    *ast.CompositeLit
	fields map[string]ast.Expr
	ranks  int
	stages int
	micro  int
	slots  []int
	rankOf []int
	copies int      // 0 when absent
	owned  int      // 0 when absent (mpipe's Spec.Owned)
	labels bool     // Spec.ShipLabels; false when absent
	ties   []ir.Tie // Spec.Ties; nil when absent
	fpRef  bool     // Fingerprint: Fingerprint
}

// model is what a generated file declares.
type model struct {
	file     *ast.File
	prefix   string                   // the prefix of its names (gen's -name; prefixOf)
	pipe     string                   // the import name of runtime/pipe
	guard    bool                     // const _ = pipe.SupportPackageIsVersionN
	fp       *ast.BasicLit            // the Fingerprint constant's value
	fpValue  string                   // its unquoted value
	spec     *spec                    // nil when missing
	specDecl ast.Node                 // the Spec declaration (for positions)
	ranks    *ast.CompositeLit        // the Ranks table
	table    *ast.CompositeLit        // the -table Program, if any
	funcs    map[string]*ast.FuncDecl // top-level functions by name
	steps    [][]*step                // per rank, nil when RankN is missing
	opaque   bool                     // a rank function holds code other than calls: its steps are unknown
	problems []problem                // what collecting found wrong
}

// problem is one diagnostic found while reading the file.
type problem struct {
	node ast.Node
	msg  string
}

func (m *model) report(n ast.Node, format string, args ...any) {
	m.problems = append(m.problems, problem{n, fmt.Sprintf(format, args...)})
}

// readModel collects the declarations of a generated file. It records
// problems for what is malformed and reads as much as it can.
func readModel(f *ast.File) *model {
	m := &model{file: f, prefix: prefixOf(f), funcs: map[string]*ast.FuncDecl{}}
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == emit.PipePath {
			m.pipe = "pipe"
			if imp.Name != nil {
				m.pipe = imp.Name.Name
			}
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				m.funcs[d.Name.Name] = d
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				vs, ok := s.(*ast.ValueSpec)
				if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
					continue
				}
				m.readValue(d.Tok, vs)
			}
		}
	}
	return m
}

// prefixOf is the prefix of the names of the program f declares (gen's
// -name): the one the `ppgen gen` invocation its header records gives, or,
// when the header records none that parses (an import, a hand-made file), the
// prefix of its one constant named PrefixFingerprint. Each file of a package
// holding several programs is read with its own.
func prefixOf(f *ast.File) string {
	if len(f.Comments) > 0 && f.Comments[0].Pos() < f.Package {
		var header strings.Builder
		for _, c := range f.Comments[0].List {
			header.WriteString(c.Text + "\n")
		}
		if inv, ok := emit.Recorded([]byte(header.String())); ok {
			if words, err := emit.SplitArgs(inv); err == nil && len(words) >= 2 && words[0] == "ppgen" && words[1] == "gen" {
				if r, err := gencmd.Parse(words[2:], gencmd.Env{}); err == nil && emit.CheckPrefix(r.Prefix) == nil {
					return r.Prefix
				}
			}
		}
	}
	var found []string
	for _, d := range f.Decls {
		if d, ok := d.(*ast.GenDecl); ok && d.Tok == token.CONST {
			for _, s := range d.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if p, ok := strings.CutSuffix(n.Name, "Fingerprint"); ok && emit.CheckPrefix(p) == nil {
						found = append(found, p)
					}
				}
			}
		}
	}
	if len(found) == 1 {
		return found[0]
	}
	return ""
}

// rankName is the name of rank r's function, PrefixRankN.
func (m *model) rankName(r int) string { return m.prefix + "Rank" + strconv.Itoa(r) }

func (m *model) readValue(tok token.Token, vs *ast.ValueSpec) {
	name, val := vs.Names[0].Name, vs.Values[0]
	switch {
	case tok == token.CONST && name == "_":
		if sel, ok := val.(*ast.SelectorExpr); ok && isIdent(sel.X, m.pipe) && strings.HasPrefix(sel.Sel.Name, "SupportPackageIsVersion") {
			m.guard = true
		}
	case tok == token.CONST && name == m.prefix+"Fingerprint":
		if lit, ok := val.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			m.fp = lit
			m.fpValue, _ = strconv.Unquote(lit.Value)
		} else {
			m.report(val, "the %sFingerprint constant is not a string literal", m.prefix)
		}
	case tok == token.VAR && name == m.prefix+"Spec":
		m.specDecl = vs
		lit, ok := val.(*ast.CompositeLit)
		if !ok {
			m.report(val, "%sSpec is not a pipe.Spec composite literal", m.prefix)
			return
		}
		m.spec = m.readSpec(lit)
	case tok == token.VAR && name == m.prefix+"Ranks":
		if lit, ok := val.(*ast.CompositeLit); ok {
			m.ranks = lit
		} else {
			m.report(val, "%sRanks is not the table of rank functions", m.prefix)
		}
	case tok == token.VAR && name == m.prefix+"Program":
		if lit, ok := val.(*ast.CompositeLit); ok {
			m.table = lit
		}
	}
}

func (m *model) readSpec(lit *ast.CompositeLit) *spec {
	sp := &spec{lit: lit, fields: map[string]ast.Expr{}}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			m.report(e, "Spec field is not keyed")
			return nil
		}
		if k, ok := kv.Key.(*ast.Ident); ok {
			sp.fields[k.Name] = kv.Value
		}
	}
	ints := func(name string, dst *int) bool {
		e, ok := sp.fields[name]
		if !ok {
			m.report(lit, "Spec has no %s", name)
			return false
		}
		v, ok := intLit(e)
		if !ok {
			m.report(e, "Spec.%s is not an integer constant", name)
			return false
		}
		*dst = v
		return true
	}
	slice := func(name string) ([]int, bool) {
		e, ok := sp.fields[name]
		if !ok {
			m.report(lit, "Spec has no %s", name)
			return nil, false
		}
		cl, ok := e.(*ast.CompositeLit)
		if !ok {
			m.report(e, "Spec.%s is not a []int literal", name)
			return nil, false
		}
		out := make([]int, len(cl.Elts))
		for i, x := range cl.Elts {
			v, ok := intLit(x)
			if !ok {
				m.report(x, "Spec.%s[%d] is not an integer constant", name, i)
				return nil, false
			}
			out[i] = v
		}
		return out, true
	}
	good := ints("Ranks", &sp.ranks)
	good = ints("Stages", &sp.stages) && good
	good = ints("Micro", &sp.micro) && good
	var ok bool
	sp.slots, ok = slice("Slots")
	good = ok && good
	sp.rankOf, ok = slice("RankOf")
	good = ok && good
	if _, has := sp.fields["Copies"]; has { // only programs with model copies set it
		good = ints("Copies", &sp.copies) && good
	}
	if _, has := sp.fields["Owned"]; has { // only mpipe programs set it
		good = ints("Owned", &sp.owned) && good
	}
	if e, has := sp.fields["Ties"]; has { // only programs with tied stages set it
		var ok bool
		sp.ties, ok = m.readTies(e)
		good = ok && good
	}
	if e, has := sp.fields["ShipLabels"]; has { // only programs that ship labels set it
		switch {
		case isIdent(e, "true"):
			sp.labels = true
		case isIdent(e, "false"):
		default:
			m.report(e, "Spec.ShipLabels is not true or false")
			good = false
		}
	}
	if e, has := sp.fields["Fingerprint"]; has && isIdent(e, m.prefix+"Fingerprint") {
		sp.fpRef = true
	} else {
		m.report(lit, "Spec.Fingerprint is not the %sFingerprint constant", m.prefix)
	}
	if !good {
		return nil
	}
	switch {
	case sp.ranks < 1:
		m.report(sp.fields["Ranks"], "Spec.Ranks = %d; want at least 1", sp.ranks)
		return nil
	case sp.micro < 1:
		m.report(sp.fields["Micro"], "Spec.Micro = %d; want at least 1", sp.micro)
		return nil
	case len(sp.rankOf) != sp.stages:
		m.report(sp.fields["RankOf"], "Spec.RankOf places %d stages but Spec.Stages is %d", len(sp.rankOf), sp.stages)
		return nil
	case len(sp.slots) != sp.ranks:
		m.report(sp.fields["Slots"], "Spec.Slots gives %d slot counts for Spec.Ranks = %d ranks", len(sp.slots), sp.ranks)
		return nil
	}
	for s, r := range sp.rankOf {
		if r < 0 || r >= sp.ranks {
			m.report(sp.fields["RankOf"], "Spec.RankOf puts stage %d on rank %d, outside 0..%d", s, r, sp.ranks-1)
			return nil
		}
	}
	return sp
}

// placement is the Spec's placement as gen/ir holds it.
func (sp *spec) placement() ir.Placement {
	return ir.Placement{Name: "table", NumRanks: sp.ranks, RankOf: sp.rankOf}
}

// readSteps collects the runtime calls of every rank function, following
// the helpers each calls, in order.
func (m *model) readSteps() {
	m.steps = make([][]*step, m.spec.ranks)
	for r := range m.spec.ranks {
		name := m.rankName(r)
		fn, ok := m.funcs[name]
		if !ok {
			m.report(m.file.Name, "no function %s: Spec.Ranks is %d, so every rank 0..%d needs one", name, m.spec.ranks, m.spec.ranks-1)
			continue
		}
		steps := []*step{}
		m.walk(fn, r, &steps, map[string]bool{}, true)
		m.steps[r] = steps
	}
}

// walk appends the steps of fn (RankN or a helper) to steps.
func (m *model) walk(fn *ast.FuncDecl, r int, steps *[]*step, active map[string]bool, top bool) {
	name := fn.Name.Name
	params := fn.Type.Params.List
	if len(params) != 1 || len(params[0].Names) != 1 {
		m.report(fn.Name, "rank %d: %s should take the one parameter x *%s.Exec", r, name, m.pipe)
		return
	}
	x := params[0].Names[0].Name
	active[name] = true
	defer delete(active, name)
	body := fn.Body.List
	for i, stmt := range body {
		if ret, ok := stmt.(*ast.ReturnStmt); ok && top && i == len(body)-1 {
			if len(ret.Results) != 1 || !isCall(ret.Results[0], x, "Err") {
				m.report(ret, "rank %d: %s should end with return %s.Err()", r, name, x)
			}
			continue
		}
		es, ok := stmt.(*ast.ExprStmt)
		call, isCallExpr := func() (*ast.CallExpr, bool) {
			if !ok {
				return nil, false
			}
			c, ok := es.X.(*ast.CallExpr)
			return c, ok
		}()
		if !isCallExpr {
			m.opaque = true
			m.report(stmt, "rank %d: %s holds a %s; generated rank functions are straight-line runtime calls with constant arguments", r, name, stmtKind(stmt))
			continue
		}
		switch fun := call.Fun.(type) {
		case *ast.SelectorExpr:
			if isIdent(fun.X, x) {
				if meth, ok := methods[fun.Sel.Name]; ok && meth.fused != nil {
					*steps = append(*steps, m.readFused(call, fun.Sel.Name, *meth.fused, r, len(*steps))...)
					continue
				}
				*steps = append(*steps, m.readStep(call, fun.Sel.Name, r, len(*steps)))
				continue
			}
		case *ast.Ident:
			helper, ok := m.funcs[fun.Name]
			if ok && len(call.Args) == 1 && isIdent(call.Args[0], x) {
				if active[fun.Name] {
					m.report(call, "rank %d: %s calls itself through %s", r, fun.Name, name)
					continue
				}
				m.walk(helper, r, steps, active, false)
				continue
			}
		}
		m.opaque = true
		m.report(call, "rank %d: %s calls %s, which is neither a runtime step nor a helper of this file taking %s", r, name, exprString(call.Fun), x)
	}
	if top && (len(body) == 0 || !isReturn(body[len(body)-1])) {
		m.report(at(fn.Body.Rbrace), "rank %d: %s should end with return %s.Err()", r, name, x)
	}
}

// readStep reads one x.Method(args) call.
func (m *model) readStep(call *ast.CallExpr, name string, r, index int) *step {
	s := &step{call: call, rank: r, index: index, method: name, src: ir.None, subSrc: [2]int{ir.None, ir.None}}
	meth, known := methods[name]
	if !known {
		if use, ok := removed[name]; ok {
			m.report(call, "rank %d step %d: %s calls %s, which runtime/pipe no longer has; generated code calls x.%s(pipe.At) (regenerate the file)", r, index, s.text(), name, use)
		} else if name == "Err" {
			m.report(call, "rank %d: x.Err() in the middle of a rank function", r)
		} else {
			m.report(call, "rank %d step %d: %s is not a runtime step call ppgen generates", r, index, s.text())
		}
		return s
	}
	if meth.args == abi.ArgsOverlap {
		s.st, s.subSrc, s.ok = m.readOverlap(call, meth.kind, r, index)
		return s
	}
	names := meth.args.Args()
	var vals []int
	var ok bool
	if meth.packed {
		vals, ok = m.readAt(call, meth.args, r, index, s.text())
	} else {
		vals, ok = m.readArgs(call, call.Args, names, r, index, s.text())
	}
	if !ok {
		return s
	}
	s.ok = true
	switch meth.args {
	case abi.ArgsNone:
		s.st = ir.Step{Kind: meth.kind, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	case abi.ArgsStage:
		s.st = ir.Step{Kind: meth.kind, Stage: vals[0], Micro: ir.None, Peer: ir.None, Slot: ir.None}
	case abi.ArgsLocal:
		s.st = ir.Step{Kind: meth.kind, Stage: vals[0], Micro: vals[1], Peer: ir.None, Slot: vals[2]}
	case abi.ArgsComm:
		s.st = ir.Step{Kind: meth.kind, Stage: vals[0], Micro: vals[1], Peer: vals[2], Slot: vals[3]}
	case abi.ArgsCompute:
		s.st = ir.Step{Kind: meth.kind, Stage: vals[0], Micro: vals[1], Peer: ir.None, Slot: vals[2]}
		s.src = vals[3]
	}
	if meth.packed {
		s.desc = emit.Describe(s.st, s.src)
	}
	return s
}

// readFused reads a fused call, x.Method(at), as its two steps: the compute
// step of the At and the transfer of the same chunk and slot with the peer
// the placement gives. Both steps point at the call.
func (m *model) readFused(call *ast.CallExpr, name string, f emit.Fusion, r, index int) []*step {
	newStep := func(i int) *step {
		return &step{call: call, rank: r, index: i, method: name, src: ir.None, subSrc: [2]int{ir.None, ir.None}}
	}
	a, b := newStep(index), newStep(index+1)
	vals, ok := m.readAt(call, abi.ArgsCompute, r, index, exprString(call))
	if !ok {
		return []*step{a, b}
	}
	stage, micro, slot, src := vals[0], vals[1], vals[2], vals[3]
	if f.First.IsComm() && f.Second.IsComm() {
		// Two transfers of the chunk with one neighbour (labels, then the
		// activation): src is not an argument of either.
		for i, k := range []ir.Kind{f.First, f.Second} {
			s := []*step{a, b}[i]
			peer := ir.None
			if stage >= 0 && stage < len(m.spec.rankOf) {
				peer = m.spec.placement().PeerOf(k, stage)
			}
			s.st = ir.Step{Kind: k, Stage: stage, Micro: micro, Peer: peer, Slot: slot}
			s.ok = src == ir.None
			if !s.ok {
				m.report(call, "%s: the fourth field of %s's At is %d; a pair of transfers takes 0xffff there", exprString(call), name, src)
			}
			s.desc = emit.Describe(s.st, ir.None)
		}
		return []*step{a, b}
	}
	compute, transfer := f.First, f.Second
	cs, ts := a, b
	if compute.IsComm() {
		compute, transfer = transfer, compute
		cs, ts = b, a
		// A src other than -1 (the compute reads another slot, not the
		// receive) is the src check's to report.
	}
	peer := ir.None
	if stage >= 0 && stage < len(m.spec.rankOf) {
		peer = m.spec.placement().PeerOf(transfer, stage)
	}
	cs.st = ir.Step{Kind: compute, Stage: stage, Micro: micro, Peer: ir.None, Slot: slot}
	cs.src = src
	ts.st = ir.Step{Kind: transfer, Stage: stage, Micro: micro, Peer: peer, Slot: slot}
	for _, s := range []*step{cs, ts} {
		s.ok = true
		s.desc = emit.Describe(s.st, s.src)
	}
	return []*step{a, b}
}

// readArgs reads integer-literal arguments named names.
func (m *model) readArgs(call *ast.CallExpr, args []ast.Expr, names []string, r, index int, text string) ([]int, bool) {
	if len(args) != len(names) {
		m.report(call, "rank %d step %d: %s has %d arguments; the runtime call takes %d (%s)", r, index, text, len(args), len(names), strings.Join(names, ", "))
		return nil, false
	}
	vals := make([]int, len(args))
	ok := true
	for i, a := range args {
		v, isLit := intLit(a)
		if !isLit {
			m.report(a, "rank %d step %d: argument %s of %s is %s, not a constant: generated steps pass integer literals", r, index, names[i], text, exprString(a))
			ok = false
			continue
		}
		vals[i] = v
	}
	return vals, ok
}

// readAt reads the one pipe.At argument of a packed call (x.F(0x...)) and
// returns its fields in the order of the unpacked call's arguments.
func (m *model) readAt(call *ast.CallExpr, args abi.Shape, r, index int, text string) ([]int, bool) {
	if len(call.Args) != 1 {
		m.report(call, "rank %d step %d: %s has %d arguments; the runtime call takes one pipe.At constant", r, index, text, len(call.Args))
		return nil, false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	var v uint64
	var err error
	if ok && lit.Kind == token.INT {
		v, err = strconv.ParseUint(lit.Value, 0, 64)
	}
	if !ok || lit.Kind != token.INT || err != nil {
		m.report(call.Args[0], "rank %d step %d: the argument of %s is %s, not a pipe.At constant: generated steps pass an integer literal such as 0x0003_0011_0002_ffff", r, index, text, exprString(call.Args[0]))
		return nil, false
	}
	stage, micro, c, d := abi.At(v).Unpack()
	if args == abi.ArgsLocal {
		if d != ir.None {
			m.report(call.Args[0], "rank %d step %d: %s sets the unused low field of its pipe.At to %d; generated code sets it to 0xffff", r, index, text, d)
			return nil, false
		}
		return []int{stage, micro, c}, true
	}
	return []int{stage, micro, c, d}, true
}

// readOverlap reads x.OverlapFB(F args, kind, B args) or
// x.OverlapBF(kind, B args, F args).
func (m *model) readOverlap(call *ast.CallExpr, kind ir.Kind, r, index int) (ir.Step, [2]int, bool) {
	text := exprString(call)
	src := [2]int{ir.None, ir.None}
	if len(call.Args) != 9 {
		m.report(call, "rank %d step %d: %s has %d arguments; an overlap call takes 9 (the forward's stage, micro, slot, src and the backward's kind, stage, micro, slot, src)", r, index, text, len(call.Args))
		return ir.Step{}, src, false
	}
	fArgs, bArgs := call.Args[0:4], call.Args[4:9]
	if kind == ir.OverlapBF {
		bArgs, fArgs = call.Args[0:5], call.Args[5:9]
	}
	computeNames := abi.ArgsCompute.Args()
	fv, okF := m.readArgs(call, fArgs, computeNames, r, index, text)
	var bk ir.Kind
	okK := false
	if sel, ok := bArgs[0].(*ast.SelectorExpr); ok && isIdent(sel.X, m.pipe) {
		bk, okK = opKinds[sel.Sel.Name]
		okK = okK && (bk == ir.Backward || bk == ir.BackwardInput || bk == ir.BackwardWeight)
	}
	if !okK {
		m.report(bArgs[0], "rank %d step %d: the backward kind of %s is %s; want %s.OpBackward, OpBackwardInput or OpBackwardWeight", r, index, text, exprString(bArgs[0]), m.pipe)
	}
	bv, okB := m.readArgs(call, bArgs[1:], computeNames, r, index, text)
	if !okF || !okK || !okB {
		return ir.Step{}, src, false
	}
	f := ir.Step{Kind: ir.Forward, Stage: fv[0], Micro: fv[1], Peer: ir.None, Slot: fv[2]}
	b := ir.Step{Kind: bk, Stage: bv[0], Micro: bv[1], Peer: ir.None, Slot: bv[2]}
	if kind == ir.OverlapFB {
		src = [2]int{fv[3], bv[3]}
		return ir.Overlap(kind, f, b), src, true
	}
	src = [2]int{bv[3], fv[3]}
	return ir.Overlap(kind, b, f), src, true
}

// program rebuilds the lowered program from the steps; ok is false when a
// rank function is missing or a step could not be read.
func (m *model) program() (ir.Program, bool) {
	p := ir.Program{Placement: m.spec.placement(), Micro: m.spec.micro, Ranks: make([][]ir.Step, m.spec.ranks), Copies: m.spec.copies, Ties: m.spec.ties}
	if m.opaque {
		return p, false
	}
	for r, steps := range m.steps {
		if steps == nil {
			return p, false
		}
		p.Ranks[r] = make([]ir.Step, len(steps))
		for i, s := range steps {
			if !s.ok {
				return p, false
			}
			p.Ranks[r][i] = s.st
		}
	}
	return p, true
}

// at is a position as an ast.Node.
type at token.Pos

func (p at) Pos() token.Pos { return token.Pos(p) }
func (p at) End() token.Pos { return token.Pos(p) + 1 }

func intLit(e ast.Expr) (int, bool) {
	neg := false
	if u, ok := e.(*ast.UnaryExpr); ok && (u.Op == token.SUB || u.Op == token.ADD) {
		neg, e = u.Op == token.SUB, u.X
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		return 0, false
	}
	v, err := strconv.ParseInt(lit.Value, 0, 64)
	if err != nil || v > 1<<31 {
		return 0, false
	}
	if neg {
		v = -v
	}
	return int(v), true
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// isCall reports whether e is x.name().
func isCall(e ast.Expr, x, name string) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 0 {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && isIdent(sel.X, x) && sel.Sel.Name == name
}

func isReturn(s ast.Stmt) bool { _, ok := s.(*ast.ReturnStmt); return ok }

func stmtKind(s ast.Stmt) string {
	switch s.(type) {
	case *ast.ForStmt, *ast.RangeStmt:
		return "loop"
	case *ast.IfStmt:
		return "if statement"
	case *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
		return "switch"
	case *ast.AssignStmt, *ast.DeclStmt:
		return "declaration or assignment"
	case *ast.ReturnStmt:
		return "return before the end"
	case *ast.GoStmt:
		return "go statement"
	case *ast.DeferStmt:
		return "defer statement"
	case *ast.BlockStmt:
		return "nested block"
	}
	return "statement other than a call"
}
