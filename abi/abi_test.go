package abi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestKinds pins every kind's row: its text form, its table letter (those of
// the committed generated tables), shape, channel and predicates.
func TestKinds(t *testing.T) {
	type want struct {
		name     string
		code     byte
		shape    Shape
		ch       Channel
		preds    string // C compute, K backward, O overlap, S send, R recv, Z FSDP, P swap, A batch, M rendezvous, L collective, E rebuild, s stage, m micro
		aliasesN int
	}
	cases := map[Kind]want{
		Forward:           {"F", 'F', ArgsCompute, NoChannel, "Csm", 2},
		Backward:          {"B", 'B', ArgsCompute, NoChannel, "CKsm", 2},
		BackwardInput:     {"I", 'I', ArgsCompute, NoChannel, "CKsm", 2},
		BackwardWeight:    {"W", 'W', ArgsLocal, NoChannel, "Csm", 2},
		SendF:             {"SEND_F", 's', ArgsComm, ActChannel, "Ssm", 1},
		RecvF:             {"RECV_F", 'r', ArgsComm, ActChannel, "Rsm", 1},
		SendB:             {"SEND_B", 'S', ArgsComm, GradChannel, "Ssm", 1},
		RecvB:             {"RECV_B", 'R', ArgsComm, GradChannel, "Rsm", 1},
		DataLoad:          {"DATA_LOAD", 'L', ArgsLocal, NoChannel, "sm", 0},
		DataSend:          {"DATA_SEND", 't', ArgsComm, DataChannel, "Ssm", 0},
		DataRecv:          {"DATA_RECV", 'T', ArgsComm, DataChannel, "Rsm", 0},
		Unshard:           {"UNSHARD", 'U', ArgsStage, NoChannel, "Zs", 0},
		Reshard:           {"RESHARD", 'u', ArgsStage, NoChannel, "Zs", 0},
		ReduceGrad:        {"REDUCE_GRAD", 'G', ArgsStage, NoChannel, "Zs", 0},
		SwapLaunchOffload: {"SWAP_LAUNCH_OFFLOAD", 'J', ArgsLocal, NoChannel, "Psm", 0},
		SwapWaitOffload:   {"SWAP_WAIT_OFFLOAD", 'j', ArgsLocal, NoChannel, "Psm", 0},
		SwapLaunchLoad:    {"SWAP_LAUNCH_LOAD", 'K', ArgsLocal, NoChannel, "Psm", 0},
		SwapWaitLoad:      {"SWAP_WAIT_LOAD", 'k', ArgsLocal, NoChannel, "Psm", 0},
		OverlapFB:         {"OVERLAP_F_B", 'X', ArgsOverlap, NoChannel, "CO", 0},
		OverlapBF:         {"OVERLAP_B_F", 'Y', ArgsOverlap, NoChannel, "CO", 0},
		OptStep:           {"OPT_STEP", 'O', ArgsNone, NoChannel, "", 0},
		MpipeSend:         {"MPIPE_FWD_SEND", 'm', ArgsComm, DataChannel, "Ssm", 0},
		MpipeRecv:         {"MPIPE_FWD_RECV", 'M', ArgsComm, DataChannel, "Rsm", 0},
		BatchBegin:        {"BATCH_BEGIN", 'Q', ArgsNone, NoChannel, "A", 0},
		BatchEnd:          {"BATCH_END", 'q', ArgsNone, NoChannel, "A", 0},
		TieGrad:           {"TIE_GRAD", 'E', ArgsStage, NoChannel, "Ms", 0},
		AllReduce:         {"ALL_REDUCE", 'A', ArgsNone, NoChannel, "ML", 0},
		Recompute:         {"RECOMPUTE", 'C', ArgsLocal, NoChannel, "Esm", 1},
		GatherLoss:        {"GATHER_LOSS", 'l', ArgsNone, NoChannel, "ML", 0},
	}
	if len(Kinds()) != len(cases) {
		t.Errorf("Kinds() has %d kinds; the test pins %d", len(Kinds()), len(cases))
	}
	for _, k := range Kinds() {
		w, ok := cases[k]
		if !ok {
			t.Errorf("kind %d (%s) is not pinned here", uint8(k), k)
			continue
		}
		preds := ""
		for _, p := range []struct {
			c  string
			is bool
		}{{"C", k.IsCompute()}, {"K", k.IsBackward()}, {"O", k.IsOverlap()}, {"S", k.IsSend()}, {"R", k.IsRecv()}, {"Z", k.IsFSDP()}, {"P", k.IsSwap()}, {"A", k.IsBatch()}, {"M", k.IsRendezvous()}, {"L", k.IsCollective()}, {"E", k.IsRebuild()}, {"s", k.HasStage()}, {"m", k.HasMicro()}} {
			if p.is {
				preds += p.c
			}
		}
		if got := (want{k.String(), k.Code(), k.Shape(), k.Channel(), preds, len(k.Aliases())}); got != w {
			t.Errorf("%s: got %+v, want %+v", w.name, got, w)
		}
		if k.IsComm() != (w.ch != NoChannel) || k.IsComm() != (k.IsSend() || k.IsRecv()) {
			t.Errorf("%s: IsComm = %v with channel %s", k, k.IsComm(), k.Channel())
		}
		if !k.Valid() {
			t.Errorf("%s: not Valid", k)
		}
	}
	for _, k := range []Kind{Invalid, numKinds, 255} {
		if k.Valid() || k.Code() != 0 || k.IsCompute() || k.IsComm() || k.IsFSDP() || k.IsSwap() || !k.HasStage() || !k.HasMicro() {
			t.Errorf("Kind(%d): Valid %v, Code %q, IsCompute %v, IsComm %v, HasStage %v, HasMicro %v",
				uint8(k), k.Valid(), k.Code(), k.IsCompute(), k.IsComm(), k.HasStage(), k.HasMicro())
		}
	}
	if Invalid.String() != "INVALID" || Kind(200).String() != "Kind(200)" {
		t.Errorf("String: %q, %q", Invalid.String(), Kind(200).String())
	}
}

func TestParseKind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Kind
		ok   bool
	}{
		{"F", Forward, true},
		{"FORWARD", Forward, true},
		{"FWD", Forward, true},
		{"FULL_BACKWARD", Backward, true},
		{"BWD", Backward, true},
		{"BACKWARD_INPUT", BackwardInput, true},
		{"BWD_WEIGHT", BackwardWeight, true},
		{"FWD_SEND", SendF, true},
		{"BWD_RECV", RecvB, true},
		{"OVERLAP_B_F", OverlapBF, true},
		{"MPIPE_FWD_RECV", MpipeRecv, true},
		{"INVALID", Invalid, false},
		{"f", Invalid, false},
		{"", Invalid, false},
		{"SEND_F ", Invalid, false},
		{"Kind(3)", Invalid, false},
	} {
		k, ok := ParseKind(tc.in)
		if k != tc.want || ok != tc.ok {
			t.Errorf("ParseKind(%q) = %v, %v; want %v, %v", tc.in, k, ok, tc.want, tc.ok)
		}
	}
	seen := map[string]Kind{}
	for _, k := range Kinds() {
		for _, s := range append([]string{k.String()}, k.Aliases()...) {
			if o, dup := seen[s]; dup {
				t.Errorf("%q names both %v and %v", s, o, k)
			}
			seen[s] = k
			if got, ok := ParseKind(s); !ok || got != k {
				t.Errorf("ParseKind(%q) = %v, %v; want %v", s, got, ok, k)
			}
		}
	}
}

func TestKindOfCode(t *testing.T) {
	codes := map[byte]Kind{}
	for _, k := range Kinds() {
		if o, dup := codes[k.Code()]; dup {
			t.Errorf("letter %q is both %v and %v", k.Code(), o, k)
		}
		codes[k.Code()] = k
		if KindOfCode(k.Code()) != k {
			t.Errorf("%v: code %q decodes to %v", k, k.Code(), KindOfCode(k.Code()))
		}
	}
	for _, c := range []byte{0, '?', 'a', '#', 0xff} {
		if k := KindOfCode(c); k != Invalid {
			t.Errorf("KindOfCode(%q) = %v, want INVALID", c, k)
		}
	}
	// The letters of one committed table row (generated/ files hold them).
	var got []Kind
	for _, c := range []byte("LFLsFsRBRBO") {
		got = append(got, KindOfCode(c))
	}
	want := []Kind{DataLoad, Forward, DataLoad, SendF, Forward, SendF, RecvB, Backward, RecvB, Backward, OptStep}
	if !slices.Equal(got, want) {
		t.Errorf("LFLsFsRBRBO decodes to %v, want %v", got, want)
	}
}

func TestAtRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		stage, micro, c, d int
		want               At
		text               string
		ok                 bool
	}{
		{3, 17, 2, -1, 0x0003_0011_0002_ffff, "0x0003_0011_0002_ffff", true},
		{0, 0, 0, 0, 0, "0x0000_0000_0000_0000", true},
		{-1, -1, -1, -1, 0xffff_ffff_ffff_ffff, "0xffff_ffff_ffff_ffff", true},
		{65534, 65534, 65534, 65534, 0xfffe_fffe_fffe_fffe, "0xfffe_fffe_fffe_fffe", true},
		{65535, 0, 0, 0, 0, "", false},
		{0, -2, 0, 0, 0, "", false},
		{0, 0, 1 << 20, 0, 0, "", false},
		{0, 0, 0, -1 << 40, 0, "", false},
	} {
		a, ok := PackAt(tc.stage, tc.micro, tc.c, tc.d)
		if ok != tc.ok {
			t.Errorf("PackAt(%d, %d, %d, %d): ok = %v, want %v", tc.stage, tc.micro, tc.c, tc.d, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if a != tc.want || formatAt(a) != tc.text {
			t.Errorf("PackAt(%d, %d, %d, %d) = %s, want %s", tc.stage, tc.micro, tc.c, tc.d, formatAt(a), tc.text)
		}
		if s, m, c, d := a.Unpack(); s != tc.stage || m != tc.micro || c != tc.c || d != tc.d {
			t.Errorf("%s.Unpack() = %d, %d, %d, %d", formatAt(a), s, m, c, d)
		}
		raw := func(v int) int { return v & 0xffff }
		if s, m, c, d := a.Fields(); s != raw(tc.stage) || m != raw(tc.micro) || c != raw(tc.c) || d != raw(tc.d) {
			t.Errorf("%s.Fields() = %d, %d, %d, %d", formatAt(a), s, m, c, d)
		}
	}
	if MaxIndex != 65534 || MaxCount != 65535 || FieldNone != 0xffff {
		t.Errorf("MaxIndex %d, MaxCount %d, FieldNone %#x", MaxIndex, MaxCount, FieldNone)
	}
}

// TestPack pins each shape's At layout (docs/internals.md, "The runtime API
// generated code calls") and that Operands inverts Pack.
func TestPack(t *testing.T) {
	const stage, micro, peer, slot, src = 3, 17, 1, 2, 4
	for _, tc := range []struct {
		k                             Kind
		want                          At
		stage, micro, peer, slot, src int // Operands of want
	}{
		{Forward, 0x0003_0011_0002_0004, stage, micro, -1, slot, src},
		{BackwardInput, 0x0003_0011_0002_0004, stage, micro, -1, slot, src},
		{BackwardWeight, 0x0003_0011_0002_ffff, stage, micro, -1, slot, -1},
		{DataLoad, 0x0003_0011_0002_ffff, stage, micro, -1, slot, -1},
		{SwapWaitLoad, 0x0003_0011_0002_ffff, stage, micro, -1, slot, -1},
		{SendF, 0x0003_0011_0001_0002, stage, micro, peer, slot, -1},
		{MpipeRecv, 0x0003_0011_0001_0002, stage, micro, peer, slot, -1},
	} {
		a, ok := tc.k.Pack(stage, micro, peer, slot, src)
		if !ok || a != tc.want {
			t.Errorf("%v.Pack = %s, %v; want %s", tc.k, formatAt(a), ok, formatAt(tc.want))
		}
		s, m, p, sl, sr := a.Operands(tc.k)
		if got, want := [5]int{s, m, p, sl, sr}, [5]int{tc.stage, tc.micro, tc.peer, tc.slot, tc.src}; got != want {
			t.Errorf("%s.Operands(%v) = %v, want %v", formatAt(a), tc.k, got, want)
		}
	}
	if _, ok := Forward.Pack(0, MaxCount, -1, 0, -1); ok {
		t.Errorf("Pack took micro-batch %d", MaxCount)
	}
	for _, tc := range []struct {
		s    Shape
		args string
	}{{ArgsNone, ""}, {ArgsLocal, "stage micro slot"}, {ArgsComm, "stage micro peer slot"}, {ArgsCompute, "stage micro slot src"}, {ArgsOverlap, ""}, {ArgsStage, "stage"}} {
		if got := strings.Join(tc.s.Args(), " "); got != tc.args {
			t.Errorf("Shape %d: Args %q, want %q", tc.s, got, tc.args)
		}
		if tc.s.Packed() != (tc.s == ArgsLocal || tc.s == ArgsComm || tc.s == ArgsCompute) {
			t.Errorf("Shape %d: Packed = %v", tc.s, tc.s.Packed())
		}
	}
}

func TestVersionGuard(t *testing.T) {
	if want := "SupportPackageIsVersion" + strconv.Itoa(Version); VersionGuard != want {
		t.Errorf("VersionGuard = %q; Version %d wants %q", VersionGuard, Version, want)
	}
}

func TestChannelString(t *testing.T) {
	for c, want := range map[Channel]string{NoChannel: "none", ActChannel: "act", GradChannel: "grad", DataChannel: "data", 9: "none"} {
		if c.String() != want {
			t.Errorf("Channel(%d) = %q, want %q", c, c.String(), want)
		}
	}
}

// TestAppendAt: the hex form is four zero-padded groups of 16 bits.
func TestAppendAt(t *testing.T) {
	for _, c := range []struct {
		a    At
		want string
	}{
		{0, "0x0000_0000_0000_0000"},
		{0x0003_0011_0002_ffff, "0x0003_0011_0002_ffff"},
		{0xffff_ffff_ffff_ffff, "0xffff_ffff_ffff_ffff"},
		{0x1234_5678_9abc_def0, "0x1234_5678_9abc_def0"},
	} {
		if got := string(AppendAt([]byte("x="), c.a)); got != "x="+c.want {
			t.Errorf("AppendAt(%#x) = %q, want %q", uint64(c.a), got, "x="+c.want)
		}
		if got := formatAt(c.a); got != c.want {
			t.Errorf("formatAt(%#x) = %q, want %q", uint64(c.a), got, c.want)
		}
	}
}

// formatAt is the constant AppendAt writes for a, as a string.
func formatAt(a At) string { return string(AppendAt(nil, a)) }

// TestGoNames: each row's Go name is the identifier of its constant in
// kinds.go (read from the source, as stringer reads it), and every kind has
// a method of its own, its Go name or its text name.
func TestGoNames(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "kinds.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var idents []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || len(g.Specs) == 0 || g.Specs[0].(*ast.ValueSpec).Names[0].Name != "Invalid" {
			continue
		}
		for _, s := range g.Specs {
			idents = append(idents, s.(*ast.ValueSpec).Names[0].Name)
		}
	}
	if len(idents) != int(numKinds)+1 { // numKinds ends the block
		t.Fatalf("found %d constants in the Kind block, want %d", len(idents), numKinds+1)
	}
	methods := map[string]Kind{}
	for k := Invalid; k < numKinds; k++ {
		if got := k.GoName(); got != idents[k] {
			t.Errorf("kind %d: GoName %q, constant %s", uint8(k), got, idents[k])
		}
		if k == Invalid {
			if k.Method() != "" {
				t.Errorf("Invalid has method %q", k.Method())
			}
			continue
		}
		m := k.Method()
		if o, dup := methods[m]; dup || m == "" {
			t.Errorf("%v: method %q (also %v's)", k, m, o)
		}
		methods[m] = k
		if m != k.GoName() && m != k.String() {
			t.Errorf("%v: method %q is neither its Go name %s nor its text name", k, m, k.GoName())
		}
	}
	if Kind(200).GoName() != "" || Kind(200).Method() != "" {
		t.Errorf("Kind(200): GoName %q, Method %q", Kind(200).GoName(), Kind(200).Method())
	}
}
