package vet

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"strconv"

	"golang.org/x/tools/go/analysis"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/verify"
)

func exprString(e ast.Expr) string { return types.ExprString(e) }

// checker reports the diagnostics of one generated file.
type checker struct {
	pass *analysis.Pass
	m    *model
	// bad counts the diagnostics that make deeper checks meaningless
	// (structure, ranges, matching).
	bad int
}

func (c *checker) reportf(n ast.Node, format string, args ...any) {
	c.pass.Report(analysis.Diagnostic{Pos: n.Pos(), End: n.End(), Message: fmt.Sprintf(format, args...)})
}

func (c *checker) badf(n ast.Node, format string, args ...any) {
	c.bad++
	c.reportf(n, format, args...)
}

func checkFile(pass *analysis.Pass, f *ast.File) {
	m := readModel(f)
	c := &checker{pass: pass, m: m}
	defer func() {
		for _, p := range m.problems {
			c.badf(p.node, "%s", p.msg)
		}
	}()
	if m.pipe == "" {
		c.badf(f.Name, "generated file does not import %s", emit.PipePath)
		return
	}
	if !m.guard {
		c.reportf(f.Name, "the runtime API guard `const _ = %s.SupportPackageIsVersionN` is missing: the build would no longer break against an incompatible runtime/pipe", m.pipe)
	}
	if m.spec == nil {
		if m.specDecl == nil {
			c.badf(f.Name, "generated file declares no %sSpec", m.prefix)
		}
		return
	}
	if m.fp == nil {
		c.badf(f.Name, "generated file declares no %sFingerprint constant", m.prefix)
	}
	c.checkRankTable()
	m.readSteps()
	// Report what reading the steps found before judging the steps.
	for _, p := range m.problems {
		c.badf(p.node, "%s", p.msg)
	}
	m.problems = nil
	c.checkRanges()
	c.checkMatching()
	p, complete := m.program()
	if !complete {
		return
	}
	if m.fp != nil {
		c.checkFingerprint(p)
	}
	if want := emit.Owned(p); want != m.spec.owned {
		node := ast.Node(m.file.Name)
		if e, ok := m.spec.fields["Owned"]; ok {
			node = e
		}
		c.badf(node, "Spec.Owned is %d, but the rank functions ship the inputs of %d owned micro-batches (MPIPE_FWD_SEND/RECV): the runtime would reject the owners' loads", m.spec.owned, want)
	}
	if want := emit.ShipsLabels(p); want != m.spec.labels {
		node := ast.Node(m.file.Name)
		if e, ok := m.spec.fields["ShipLabels"]; ok {
			node = e
		}
		c.badf(node, "Spec.ShipLabels is %v, but the rank functions ship labels (DATA_SEND/DATA_RECV): %v; the first stage's DATA_LOAD would load the labels wrongly", m.spec.labels, want)
	}
	if c.bad > 0 {
		return
	}
	c.checkSrc(p)
	c.checkVerify(p)
	if m.table != nil && c.bad == 0 {
		c.checkTable()
	}
}

// checkRankTable checks that Ranks lists Rank0..RankP-1, each once, in order.
func (c *checker) checkRankTable() {
	m := c.m
	if m.ranks == nil {
		c.badf(m.file.Name, "generated file declares no %sRanks table", m.prefix)
		return
	}
	P := m.spec.ranks
	seen := map[int]int{}
	for i, e := range m.ranks.Elts {
		id, ok := e.(*ast.Ident)
		r := -1
		if ok {
			if n, cut := cutPrefixInt(id.Name, m.prefix+"Rank"); cut {
				r = n
			}
		}
		switch {
		case r < 0:
			c.badf(e, "rank table entry %d is %s; want %s", i, exprString(e), m.rankName(i))
			continue
		case r >= P:
			c.badf(e, "rank table entry %d is %s, but Spec.Ranks is %d", i, id.Name, P)
			continue
		case m.funcs[id.Name] == nil:
			c.badf(e, "rank table entry %d names %s, which this file does not declare", i, id.Name)
		}
		if prev, dup := seen[r]; dup {
			c.badf(e, "rank table lists %s twice (entries %d and %d): a rank would run twice and another never", id.Name, prev, i)
			continue
		}
		seen[r] = i
		if r != i {
			c.badf(e, "rank table entry %d is %s: %sRanks[r] must run rank r", i, id.Name, m.prefix)
		}
	}
	for r := range P {
		if _, ok := seen[r]; !ok {
			c.badf(m.ranks, "rank table has no entry for rank %d (Spec.Ranks is %d): that rank would never run and its peers would hang", r, P)
		}
	}
}

func cutPrefixInt(s, prefix string) (int, bool) {
	if len(s) <= len(prefix) || s[:len(prefix)] != prefix {
		return 0, false
	}
	n, err := strconv.Atoi(s[len(prefix):])
	if err != nil || strconv.Itoa(n) != s[len(prefix):] {
		return 0, false
	}
	return n, true
}

// checkRanges checks each step's fields against the Spec. A step that fails
// is marked not ok so that matching does not pair it.
func (c *checker) checkRanges() {
	for r, steps := range c.m.steps {
		for _, s := range steps {
			if !s.ok {
				continue
			}
			if s.st.Kind.IsOverlap() {
				for k, sub := range s.st.Sub {
					if msg := c.leafRange(r, sub, s.subSrc[k]); msg != "" {
						c.badf(s.call, "rank %d step %d: %s: sub-step %s: %s", r, s.index, s.text(), sub, msg)
						s.ok = false
						break
					}
				}
				continue
			}
			if s.st.Kind.Shape() == abi.ArgsNone { // OPT_STEP, BATCH_BEGIN, BATCH_END
				continue
			}
			if msg := c.leafRange(r, s.st, s.src); msg != "" {
				c.badf(s.call, "rank %d step %d: %s: %s", r, s.index, s.text(), msg)
				s.ok = false
			}
		}
	}
}

// leafRange checks one step (not an overlap) of rank r; "" when it is fine.
func (c *checker) leafRange(r int, st ir.Step, src int) string {
	sp := c.m.spec
	S := sp.stages
	if st.Stage >= 0 && st.Stage < S && sp.rankOf[st.Stage] != r && (st.Kind == ir.DataLoad || st.Kind == ir.MpipeSend) {
		// mpipe: an owner loads and ships the input of a micro it owns.
		pr := ir.Program{Placement: sp.placement(), Micro: sp.micro, Copies: sp.copies}
		switch {
		case !pr.OwnerStep(r, st) || st.Micro >= sp.owned:
			return fmt.Sprintf("stage %d is placed on rank %d (Spec.RankOf), not on rank %d, which does not own micro %d (Spec.Owned = %d; micro m < Owned is owned by rank m mod %d)", st.Stage, sp.rankOf[st.Stage], r, st.Micro, sp.owned, sp.ranks)
		case st.Slot != ir.None:
			return fmt.Sprintf("slot %d, but an owner's %s of another rank's stage has no slot (0xffff)", st.Slot, st.Kind)
		case st.Kind == ir.MpipeSend && st.Peer != sp.rankOf[st.Stage]:
			return fmt.Sprintf("peer %d, but stage %d is on rank %d", st.Peer, st.Stage, sp.rankOf[st.Stage])
		}
		return ""
	}
	switch {
	case st.Stage < 0 || st.Stage >= S:
		return fmt.Sprintf("stage %d is outside 0..%d", st.Stage, S-1)
	case sp.rankOf[st.Stage] != r:
		return fmt.Sprintf("stage %d is placed on rank %d (Spec.RankOf), not on rank %d", st.Stage, sp.rankOf[st.Stage], r)
	case !st.Kind.HasMicro():
		return "" // UNSHARD, RESHARD, REDUCE_GRAD: a stage of this rank is all they name
	case st.Micro < 0 || st.Micro >= sp.micro:
		return fmt.Sprintf("micro-batch %d is outside 0..%d", st.Micro, sp.micro-1)
	case st.Slot < 0 || st.Slot >= sp.slots[r]:
		return fmt.Sprintf("slot %d is outside 0..%d (Spec.Slots[%d] = %d)", st.Slot, sp.slots[r]-1, r, sp.slots[r])
	case src < ir.None || src >= sp.slots[r]:
		return fmt.Sprintf("src %d is neither -1 nor a slot in 0..%d", src, sp.slots[r]-1)
	}
	if st.Kind.IsComm() {
		want := sp.placement().PeerOfStep(st)
		switch {
		case want == ir.None:
			return fmt.Sprintf("stage %d has no neighbour stage to exchange %s with", st.Stage, st.Kind.Channel())
		case st.Peer != want:
			return fmt.Sprintf("peer %d, but stage %d's neighbour for %s is on rank %d", st.Peer, st.Stage, st.Kind.Channel(), want)
		}
	}
	return ""
}

// link is one direction of one channel between two ranks.
type link struct {
	from, to int
	ch       ir.Channel
}

// checkMatching pairs the sends of each (from, to, channel) with the
// receives of the peer, in order, and reports the first pair that does not
// match, or the first send (receive) without a partner.
func (c *checker) checkMatching() {
	sends := map[link][]*step{}
	recvs := map[link][]*step{}
	var order []link
	note := func(l link) {
		if _, ok := sends[l]; !ok {
			if _, ok := recvs[l]; !ok {
				order = append(order, l)
			}
		}
	}
	for r, steps := range c.m.steps {
		for _, s := range steps {
			if !s.ok || !s.st.Kind.IsComm() {
				continue
			}
			if s.st.Kind.IsSend() {
				l := link{r, s.st.Peer, s.st.Kind.Channel()}
				note(l)
				sends[l] = append(sends[l], s)
			} else {
				l := link{s.st.Peer, r, s.st.Kind.Channel()}
				note(l)
				recvs[l] = append(recvs[l], s)
			}
		}
	}
	for _, l := range order {
		ss, rs := sends[l], recvs[l]
		for k := 0; k < max(len(ss), len(rs)); k++ {
			switch {
			case k >= len(rs):
				s := ss[k]
				c.badf(s.call, "rank %d step %d: %s, the %s %s send from rank %d to rank %d, has no matching receive: rank %d posts only %d %s receives from rank %d",
					s.rank, s.index, s.text(), ordinal(k+1), l.ch, l.from, l.to, l.to, len(rs), l.ch, l.from)
			case k >= len(ss):
				s := rs[k]
				c.badf(s.call, "rank %d step %d: %s, the %s %s receive on rank %d from rank %d, has no matching send: rank %d posts only %d %s sends to rank %d",
					s.rank, s.index, s.text(), ordinal(k+1), l.ch, l.to, l.from, l.from, len(ss), l.ch, l.to)
			default:
				s, rv := ss[k], rs[k]
				want := partner(s.st)
				if rv.st.Kind == want.Kind && rv.st.Stage == want.Stage && rv.st.Micro == want.Micro {
					continue
				}
				c.pass.Report(analysis.Diagnostic{
					Pos: s.call.Pos(), End: s.call.End(),
					Message: fmt.Sprintf("rank %d step %d: %s is the %s %s send from rank %d to rank %d, but the %s %s receive on rank %d is %s, not stage %d micro %d: sends and receives must pair in the same FIFO order per (src, dst, channel)",
						s.rank, s.index, s.text(), ordinal(k+1), l.ch, l.from, l.to,
						ordinal(k+1), l.ch, l.to, rv.text(), want.Stage, want.Micro),
					Related: []analysis.RelatedInformation{{Pos: rv.call.Pos(), End: rv.call.End(),
						Message: fmt.Sprintf("the receive it pairs with: rank %d step %d", rv.rank, rv.index)}},
				})
				c.bad++
			}
			break // the first mismatch on a link explains the rest
		}
	}
}

// partner is the receive a send pairs with (docs/internals.md).
func partner(send ir.Step) ir.Step {
	switch send.Kind {
	case ir.SendF:
		return ir.Step{Kind: ir.RecvF, Stage: send.Stage + 1, Micro: send.Micro}
	case ir.SendB:
		return ir.Step{Kind: ir.RecvB, Stage: send.Stage - 1, Micro: send.Micro}
	case ir.DataSend:
		return ir.Step{Kind: ir.DataRecv, Stage: send.Stage + 1, Micro: send.Micro}
	case ir.MpipeSend:
		return ir.Step{Kind: ir.MpipeRecv, Stage: send.Stage, Micro: send.Micro}
	}
	return ir.Step{}
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

// checkFingerprint recomputes the program's fingerprint. On a mismatch it
// regenerates the file from its header to point at the edited call; when
// that is not possible it reports at the Fingerprint constant.
func (c *checker) checkFingerprint(p ir.Program) {
	m := c.m
	got := emit.Fingerprint(p)
	if got == m.fpValue {
		return
	}
	const fix = "run go generate (or the ppgen gen line in the header)"
	re, inv, err := c.regenerate()
	var why string
	switch {
	case err != nil:
		why = fmt.Sprintf("the edited line is unknown: %v", err)
	case re.fpValue == m.fpValue:
		// Regeneration reproduces the program the file was generated
		// with: the first call that differs is the edit.
		if n, msg := c.firstDifference(re, inv); n != nil {
			c.reportf(n, "edited generated code: %s; the rank functions no longer hash to Fingerprint: %s", msg, fix)
			return
		}
		why = "the edited line is unknown"
	case re.fpValue == got:
		why = "the calls and Spec are as generated, so the constant itself was edited"
	default:
		why = fmt.Sprintf("the edited line is unknown: `%s` now generates another program (Fingerprint %s), so the file is stale too", inv, re.fpValue)
	}
	c.reportf(m.fp, "edited generated code: the rank functions hash to %s, not to this Fingerprint (%s): %s", got, why, fix)
}

// regenerate reads the file again through the invocation its header records.
// It returns the regenerated model and the invocation.
func (c *checker) regenerate() (*model, string, error) {
	f := c.m.file
	path := c.pass.Fset.File(f.Pos()).Name()
	read := c.pass.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	src, err := read(path)
	if err != nil {
		return nil, "", err
	}
	req, err := gencmd.FromHeader(path, src)
	if err != nil {
		return nil, "", err
	}
	out, _, err := req.Generate()
	if err != nil {
		return nil, req.Invocation, fmt.Errorf("regenerating with `%s`: %v", req.Invocation, err)
	}
	rf, err := parser.ParseFile(token.NewFileSet(), path, out, parser.ParseComments)
	if err != nil {
		return nil, req.Invocation, fmt.Errorf("regenerated file does not parse: %v", err)
	}
	re := readModel(rf)
	if re.spec == nil || re.fp == nil {
		return nil, req.Invocation, errors.New("regenerated file lacks a Spec or Fingerprint")
	}
	re.readSteps()
	return re, req.Invocation, nil
}

// firstDifference finds the first call (or Spec field) where the file
// differs from the regenerated one re, and says how.
func (c *checker) firstDifference(re *model, inv string) (ast.Node, string) {
	m := c.m
	for _, name := range []string{"Ranks", "Stages", "Micro", "RankOf", "Slots"} {
		a, b := m.spec.fields[name], re.spec.fields[name]
		if a != nil && b != nil && exprString(a) != exprString(b) {
			return a, fmt.Sprintf("Spec.%s is %s where `%s` generates %s", name, exprString(a), inv, exprString(b))
		}
	}
	for r := range min(len(m.steps), len(re.steps)) {
		ours, theirs := m.steps[r], re.steps[r]
		for i := range min(len(ours), len(theirs)) {
			if ours[i].text() != theirs[i].text() {
				return ours[i].call, fmt.Sprintf("rank %d step %d is %s where `%s` generates %s", r, i, ours[i].text(), inv, theirs[i].text())
			}
		}
		switch {
		case len(ours) < len(theirs):
			var at ast.Node = m.funcs[m.rankName(r)].Name
			if len(ours) > 0 {
				at = ours[len(ours)-1].call
			}
			return at, fmt.Sprintf("rank %d ends after %d steps where `%s` generates %d (next: %s)", r, len(ours), inv, len(theirs), theirs[len(ours)].text())
		case len(ours) > len(theirs):
			return ours[len(theirs)].call, fmt.Sprintf("rank %d step %d, %s, is beyond the %d steps `%s` generates", r, len(theirs), ours[len(theirs)].text(), len(theirs), inv)
		}
	}
	return nil, ""
}

// checkSrc checks the src argument of every compute call (the one argument
// the fingerprint does not cover) against the slots of the program.
func (c *checker) checkSrc(p ir.Program) {
	index := passes.IndexSlots(p)
	for r, steps := range c.m.steps {
		for _, s := range steps {
			switch {
			case s.st.Kind.IsOverlap():
				for k, sub := range s.st.Sub {
					want := ir.None
					if sub.Kind != ir.BackwardWeight {
						want = index.Src(sub)
					}
					if s.subSrc[k] != want {
						c.badf(s.call, "rank %d step %d: %s: src %d of sub-step %s, but %s", r, s.index, s.text(), s.subSrc[k], sub, srcReason(sub, want))
					}
				}
			case s.st.Kind == ir.Forward || s.st.Kind == ir.Backward || s.st.Kind == ir.BackwardInput:
				if want := index.Src(s.st); s.src != want {
					c.badf(s.call, "rank %d step %d: %s: src %d, but %s", r, s.index, s.text(), s.src, srcReason(s.st, want))
				}
			}
		}
	}
}

func srcReason(st ir.Step, want int) string {
	if want == ir.None {
		return "its input comes from its own slot (a receive, a data load or the loss): want -1"
	}
	n := st.Stage - 1
	if st.Kind != ir.Forward {
		n = st.Stage + 1
	}
	return fmt.Sprintf("the neighbour chunk (stage %d, micro %d) on this rank is in slot %d", n, st.Micro, want)
}

// checkVerify runs gen/verify over the rebuilt program and reports its
// verdict at the step it names.
func (c *checker) checkVerify(p ir.Program) {
	_, err := verify.Check(p, verify.Options{})
	if err == nil {
		return
	}
	at := func(r, i int) ast.Node {
		if r >= 0 && r < len(c.m.steps) && i >= 0 && i < len(c.m.steps[r]) {
			return c.m.steps[r][i].call
		}
		if r >= 0 && r < len(c.m.steps) {
			if fn := c.m.funcs[c.m.rankName(r)]; fn != nil {
				return fn.Name
			}
		}
		return c.m.fp
	}
	var ve *verify.Error
	var de *verify.DeadlockError
	switch {
	case errors.As(err, &ve):
		c.badf(at(ve.Rank, ve.Index), "unsafe program: %v", err)
	case errors.As(err, &de) && len(de.Cycle) > 0:
		first := at(de.Cycle[0].Rank, de.Cycle[0].Index)
		d := analysis.Diagnostic{Pos: first.Pos(), End: first.End(), Message: "unsafe program: " + err.Error()}
		for _, b := range de.Cycle[1:] {
			n := at(b.Rank, b.Index)
			d.Related = append(d.Related, analysis.RelatedInformation{Pos: n.Pos(), End: n.End(),
				Message: fmt.Sprintf("rank %d blocked here (step %d, %s)", b.Rank, b.Index, b.Step)})
		}
		c.pass.Report(d)
		c.bad++
	default:
		c.badf(c.m.fp, "unsafe program: %v", err)
	}
}

// checkTable checks that the -table Program holds the same steps as the
// rank functions.
func (c *checker) checkTable() {
	m := c.m
	if len(m.table.Elts) != len(m.steps) {
		c.badf(m.table, "Program has %d rows for %d ranks", len(m.table.Elts), len(m.steps))
		return
	}
	for r, row := range m.table.Elts {
		kinds, ats, ok := c.decodeOpsCall(row)
		if !ok {
			c.badf(row, "Program[%d] is not pipe.DecodeOps(\"kind letters\", []pipe.At{...}) with constant arguments", r)
			continue
		}
		var want [][6]string // kind, stage, micro, peer, slot, src
		for _, s := range m.steps[r] {
			want = append(want, tableRows(s)...)
		}
		if len(kinds) != len(ats.Elts) {
			c.badf(ats, "Program[%d] has %d kind letters for %d pipe.At values", r, len(kinds), len(ats.Elts))
			continue
		}
		if len(ats.Elts) != len(want) {
			c.badf(ats, "Program[%d] holds %d ops but rank %d's function runs %d (overlaps count three)", r, len(ats.Elts), r, len(want))
			continue
		}
		for i, e := range ats.Elts {
			got, ok := tableOp(kinds[i], e)
			if !ok {
				c.badf(e, "Program[%d][%d] is kind letter %q with %s: not a kind ppgen writes and a pipe.At constant", r, i, kinds[i], exprString(e))
				break
			}
			if got != want[i] {
				c.badf(e, "Program[%d][%d] is {%s %s %s %s %s %s} but rank %d's function runs {%s %s %s %s %s %s} there (Kind Stage Micro Peer Slot Src): the interpreter would run another program",
					r, i, got[0], got[1], got[2], got[3], got[4], got[5], r, want[i][0], want[i][1], want[i][2], want[i][3], want[i][4], want[i][5])
				break
			}
		}
	}
}

// decodeOpsCall reads pipe.DecodeOps("kinds", []pipe.At{...}).
func (c *checker) decodeOpsCall(e ast.Expr) (string, *ast.CompositeLit, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 2 {
		return "", nil, false
	}
	if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || !isIdent(sel.X, c.m.pipe) || sel.Sel.Name != "DecodeOps" {
		return "", nil, false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", nil, false
	}
	kinds, err := strconv.Unquote(lit.Value)
	ats, ok := call.Args[1].(*ast.CompositeLit)
	return kinds, ats, err == nil && ok
}

// tableOp reads one op of a DecodeOps call: its kind letter and pipe.At
// literal, decoded as pipe.DecodeOps does.
func tableOp(code byte, e ast.Expr) ([6]string, bool) {
	kind := abi.KindOfCode(code)
	lit, isLit := e.(*ast.BasicLit)
	if !kind.Valid() || !isLit || lit.Kind != token.INT {
		return [6]string{}, false
	}
	v, err := strconv.ParseUint(lit.Value, 0, 64)
	if err != nil {
		return [6]string{}, false
	}
	stage, micro, peer, slot, src := abi.At(v).Operands(kind)
	itoa := strconv.Itoa
	return [6]string{opName(kind), itoa(stage), itoa(micro), itoa(peer), itoa(slot), itoa(src)}, true
}

// tableRows are the pipe.Op fields gen/emit writes for a step.
func tableRows(s *step) [][6]string {
	row := func(kind string, stage, micro, peer, slot, src int) [6]string {
		return [6]string{kind, strconv.Itoa(stage), strconv.Itoa(micro), strconv.Itoa(peer), strconv.Itoa(slot), strconv.Itoa(src)}
	}
	st := s.st
	if st.Kind.IsOverlap() {
		rows := [][6]string{row(opName(st.Kind), -1, -1, -1, -1, -1)}
		for k, sub := range st.Sub {
			rows = append(rows, row(opName(sub.Kind), sub.Stage, sub.Micro, -1, sub.Slot, s.subSrc[k]))
		}
		return rows
	}
	return [][6]string{row(opName(st.Kind), st.Stage, st.Micro, st.Peer, st.Slot, s.src)}
}

// opName is the pipe.OpKind constant of k's -table entries.
func opName(k ir.Kind) string {
	for name, kind := range opKinds {
		if kind == k {
			return name
		}
	}
	return "Op?"
}
