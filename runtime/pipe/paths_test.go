package pipe

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
)

// FuzzExecPaths is the differential test of the step methods' two paths:
// it runs one random program (valid and invalid steps alike) twice through
// the packed methods as generated code and Interpret call them, once as
// usual (fast path first, slow path when a check fails) and once with every
// step forced onto its slow path (Exec.state's stSlow), on
// deterministic fake stages, data and transport, and requires the same
// state after every step: slots, losses, the owner's input, the error, and
// every call the rank made on its stages, data and transport.
//
// The input's first byte picks the rank's world (one rank with four local
// stages, a V placement, shipped labels, mpipe's owned inputs), the second
// and third which stage call and which data load fail; then every five bytes
// are a step: its kind, then stage, micro and the two other fields, each
// from a small range around the valid values (-1, a few indices, 0xffff and
// 70000, which no At holds).
func FuzzExecPaths(f *testing.F) {
	for _, seed := range pathSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 3 {
			return
		}
		w := worlds[int(in[0])%len(worlds)]
		prog := decodeSteps(in[3:])
		fast := newPathRig(t, w, int(in[1]), int(in[2]))
		slow := newPathRig(t, w, int(in[1]), int(in[2]))
		slow.x.state.Store(stSlow) // every step takes its slow path
		for i, st := range prog {
			if fast.x.failedNow() && slow.x.failedNow() {
				break
			}
			fast.begin(st)
			slow.begin(st)
			st.run(fast.x)
			st.run(slow.x)
			fast.x.Sync()
			slow.x.Sync()
			// A receive the fake transport fails (failRecvs) or answers with the
			// wrong tag (wrongTag) fails on the
			// comm goroutine, so it races with the step's own checks: either
			// may be the rank's first error, on either path. Both paths
			// must fail then, with the same state, but which error wins is
			// left open.
			race := (st.failRecvs || st.wrongTag) && fast.x.failedNow() && slow.x.failedNow()
			if a, b := fast.state(race), slow.state(race); a != b {
				t.Fatalf("world %s, after step %d (%s) of %v:\nfast: %s\nslow: %s", w.name, i, st, prog, a, b)
			}
		}
	})
}

// pathSeeds are the committed starting points (also under
// testdata/fuzz/FuzzExecPaths): a valid iteration of each world and a few
// misuses. The last step of each of the first seven is a misuse.
var pathSeeds = [][]byte{
	// one rank, four local stages: loads, forwards through source slots, backwards, OPT_STEP
	seed(0, 0, 0, st(sLoad, 0, 0, 0, -1), st(sF, 0, 0, 0, -1), st(sF, 1, 0, 1, 0), st(sF, 2, 0, 2, 1), st(sLoad, 3, 0, 3, -1),
		st(sF, 3, 0, 3, 2), st(sB, 3, 0, 3, -1), st(sB, 2, 0, 2, 3), st(sI, 1, 0, 1, 2), st(sW, 1, 0, 1, -1), st(sB, 0, 0, 0, 1),
		st(sOpt, 0, 0, 0, 0), st(sF, 0, 0, 0, -1)),
	// V placement, rank 0 (stages 0 and 3): F and send, the last stage's F and B, the gradient out and in
	seed(1, 0, 0, st(sLoad, 0, 0, 0, -1), st(sFAndSend, 0, 0, 0, -1), st(sRecvF, 3, 0, 1, 1), st(sLoad, 3, 0, 1, -1),
		st(sF, 3, 0, 1, -1), st(sB, 3, 0, 1, -1), st(sSendB, 3, 0, 1, 1), st(sRecvAndB, 0, 0, 0, -1), st(sOpt, 0, 0, 0, 0), st(sSendB, 0, 0, 1, 0)),
	// V placement, rank 1 (stages 1 and 2): the middle, a local neighbour, an overlap
	seed(2, 0, 0, st(sRecvAndF, 1, 0, 0, -1), st(sF, 2, 0, 1, 0), st(sSendF, 2, 0, 0, 1), st(sRecvF, 1, 1, 0, 2), st(sRecvB, 2, 0, 0, 1),
		st(sOverlapFB, 1, 1, 2, 1), st(sBAndSend, 1, 0, 0, 1), st(sOpt, 0, 0, 0, 0), st(sW, 1, 0, 0, -1)),
	// shipped labels, last rank: labels and activation in, F with the loss, B, the gradient out
	seed(3, 0, 0, st(sLabelsAndRecvF, 1, 0, 0, -1), st(sF, 1, 0, 0, -1), st(sB, 1, 0, 0, -1), st(sSendB, 1, 0, 0, 0), st(sRecvData, 1, 1, 0, 0)),
	// shipped labels, first rank: load, F, labels and activation out
	seed(4, 0, 0, st(sLoad, 0, 0, 0, -1), st(sF, 0, 0, 0, -1), st(sLabelsAndSendF, 0, 0, 0, -1), st(sSendData, 0, 0, 1, 0)),
	// mpipe: the first stage's rank receives micro 1's input from its owner
	seed(5, 0, 0, st(sRecvInput, 0, 1, 1, 0), st(sF, 0, 1, 0, -1), st(sSendF, 0, 1, 1, 0), st(sLoad, 0, 0, 1, -1), st(sRecvInput, 0, 0, 1, 1)),
	// mpipe: the owner loads micro 1's input and ships it
	seed(6, 0, 0, st(sLoad, 0, 1, -1, -1), st(sSendInput, 0, 1, 0, -1), st(sSendInput, 0, 1, 0, -1)),
	// misuses: swap steps out of order, FSDP, fields no At holds, a failing stage call and data load
	seed(0, 3, 1, st(sLoad, 0, 0, 0, -1), st(sF, 0, 0, 0, -1), st(sOffload, 0, 0, 0, -1), st(sB, 0, 0, 0, -1), st(sLoadBack, 0, 0, 0, -1),
		st(sWaitLoad, 0, 0, 0, -1), st(sUnshard, 1, 0, 0, 0), st(sF, 1, 70000, 0, 0xffff), st(sW, -1, 0, 0, -1), st(sF, 1, 0, 1, 0)),
	seed(1, 0, 2, st(sRecvF, 0, 0, -1, 0), st(sSendF, 0xffff, 0, 70000, 0), st(sRecvB, 3, 70000, 1, 0), st(sFAndSend, 1, 0, 0, -1)),
	// a receive posted by a fused step whose compute half fails at once
	// (the comm goroutine may or may not run it before the failure)
	seed(1, 0, 0, st(sLoad, 0, 0, 0, -1), st(sRecvAndB, 0, 0, 0, -1)),
	// a receive that gets another micro-batch's tag, one that fails
	seed(2, 0, 0, st(sRecvF, 1, 0, 0, 0)|0x80<<16, st(sF, 1, 0, 0, -1), st(sRecvB, 2, 0, 0, 1)|0x80<<8, st(sB, 2, 0, 1, -1)),
}

// st encodes a step of a seed: its kind and field values (of fieldValues).
func st(kind, stage, micro, c, d int) uint64 {
	enc := func(v int) uint64 {
		i := slices.Index(fieldValues, v)
		if i < 0 {
			panic(fmt.Sprintf("seed field %d is not in fieldValues", v))
		}
		return uint64(i)
	}
	return uint64(kind)<<32 | enc(stage)<<24 | enc(micro)<<16 | enc(c)<<8 | enc(d)
}

// seed is a fuzz input: the world, failing stage call and data load, then
// the steps (st; a step's flag bits may be ORed into its micro and c bytes).
func seed(world, failCall, failMicro byte, steps ...uint64) []byte {
	b := []byte{world, failCall, failMicro}
	for _, s := range steps {
		b = append(b, byte(s>>32), byte(s>>24), byte(s>>16), byte(s>>8), byte(s))
	}
	return b
}

// The step kinds of the fuzz programs: the Op kinds and the fused calls.
const (
	sLoad = iota
	sRecvF
	sSendF
	sRecvB
	sSendB
	sF
	sB
	sI
	sW
	sOpt
	sOverlapFB
	sOverlapBF
	sUnshard
	sReshard
	sReduceGrad
	sOffload
	sWaitOffload
	sLoadBack
	sWaitLoad
	sRecvInput
	sSendInput
	sRecvData
	sSendData
	sFAndSend
	sRecvAndF
	sRecvAndB
	sBAndSend
	sRecvAndI
	sIAndSend
	sLabelsAndSendF
	sLabelsAndRecvF
	numSteps
)

var stepNames = [numSteps]string{"Load", "RecvF", "SendF", "RecvB", "SendB", "F", "B", "I", "W", "OptStep", "OverlapFB", "OverlapBF",
	"Unshard", "Reshard", "ReduceGrad", "LaunchOffload", "WaitOffload", "LaunchLoad", "WaitLoad", "RecvInput", "SendInput",
	"RecvLabels", "SendLabels", "FAndSend", "RecvAndF", "RecvAndB", "BAndSend", "RecvAndI", "IAndSend", "LabelsAndSendF", "LabelsAndRecvF"}

// fieldValues maps a field byte to a value: mostly small indices, some -1,
// and values no valid Spec has.
var fieldValues = []int{-1, 0, 1, 2, 3, 4, 5, 0, 1, 0xffff, 70000, -2}

// pathStep is one step of a fuzz program.
type pathStep struct {
	kind                int
	stage, micro, c, d  int
	wrongTag, failRecvs bool
}

func (s pathStep) String() string {
	return fmt.Sprintf("%s(%d, %d, %d, %d)", stepNames[s.kind], s.stage, s.micro, s.c, s.d)
}

func decodeSteps(b []byte) []pathStep {
	var out []pathStep
	for ; len(b) >= 5 && len(out) < 64; b = b[5:] {
		v := func(x byte) int { return fieldValues[int(x)%len(fieldValues)] }
		out = append(out, pathStep{kind: int(b[0]) % numSteps, stage: v(b[1]), micro: v(b[2]), c: v(b[3]), d: v(b[4]),
			wrongTag: b[2]&0x80 != 0, failRecvs: b[3]&0x80 != 0})
	}
	return out
}

// op is the step as an Op, for the kinds Interpret runs.
func (s pathStep) op() (Op, bool) {
	kinds := map[int]OpKind{sLoad: OpDataLoad, sRecvF: OpRecvF, sSendF: OpSendF, sRecvB: OpRecvB, sSendB: OpSendB,
		sF: OpForward, sB: OpBackward, sI: OpBackwardInput, sW: OpBackwardWeight, sOpt: OpOptStep,
		sUnshard: OpUnshard, sReshard: OpReshard, sReduceGrad: OpReduceGrad,
		sOffload: OpSwapLaunchOffload, sWaitOffload: OpSwapWaitOffload, sLoadBack: OpSwapLaunchLoad, sWaitLoad: OpSwapWaitLoad,
		sRecvInput: OpMpipeRecv, sSendInput: OpMpipeSend, sRecvData: OpDataRecv, sSendData: OpDataSend}
	k, ok := kinds[s.kind]
	if !ok {
		return Op{}, false
	}
	o := Op{Kind: k, Stage: int32(s.stage), Micro: int32(s.micro), Peer: -1, Slot: int32(s.c), Src: int32(s.d)}
	switch k {
	case OpRecvF, OpSendF, OpRecvB, OpSendB, OpMpipeRecv, OpMpipeSend, OpDataRecv, OpDataSend:
		o.Peer, o.Slot, o.Src = int32(s.c), int32(s.d), -1
	case OpDataLoad, OpBackwardWeight, OpSwapLaunchOffload, OpSwapWaitOffload, OpSwapLaunchLoad, OpSwapWaitLoad:
		o.Src = -1
	}
	return o, true
}

// overlapHalves returns the forward and the backward half of an overlap
// step: F(stage, micro) in slot c, and B (I when d is odd) of (stage+1,
// micro-1) in slot d, both with src -1.
func (s pathStep) overlapHalves() (f, b Op) {
	bk := OpBackward
	if s.d%2 != 0 {
		bk = OpBackwardInput
	}
	f = Op{Kind: OpForward, Stage: int32(s.stage), Micro: int32(s.micro), Peer: -1, Slot: int32(s.c), Src: -1}
	b = Op{Kind: bk, Stage: int32(s.stage + 1), Micro: int32(s.micro - 1), Peer: -1, Slot: int32(s.d), Src: -1}
	return f, b
}

// run runs the step as generated code and Interpret do.
func (s pathStep) run(x *Exec) {
	switch s.kind {
	case sOverlapFB:
		f, b := s.overlapHalves()
		x.OverlapFB(int(f.Stage), int(f.Micro), int(f.Slot), int(f.Src), b.Kind, int(b.Stage), int(b.Micro), int(b.Slot), int(b.Src))
		return
	case sOverlapBF:
		f, b := s.overlapHalves()
		x.OverlapBF(b.Kind, int(b.Stage), int(b.Micro), int(b.Slot), int(b.Src), int(f.Stage), int(f.Micro), int(f.Slot), int(f.Src))
		return
	}
	if o, ok := s.op(); ok {
		Interpret(x, []Op{o})
		return
	}
	a, ok := PackAt(s.stage, s.micro, s.c, s.d)
	if !ok {
		return
	}
	switch s.kind {
	case sFAndSend:
		x.FAndSend(a)
	case sRecvAndF:
		x.RecvAndF(a)
	case sRecvAndB:
		x.RecvAndB(a)
	case sBAndSend:
		x.BAndSend(a)
	case sRecvAndI:
		x.RecvAndI(a)
	case sIAndSend:
		x.IAndSend(a)
	case sLabelsAndSendF:
		x.LabelsAndSendF(a)
	case sLabelsAndRecvF:
		x.LabelsAndRecvF(a)
	}
}

// pathWorld is the Spec and rank of a fuzz run.
type pathWorld struct {
	name string
	rank int
	spec Spec
}

var worlds = []pathWorld{
	{"local", 0, Spec{Schedule: "t", Ranks: 1, Stages: 4, Micro: 3, Slots: []int{4}, RankOf: []int{0, 0, 0, 0}, Fingerprint: "fp"}},
	{"v/rank0", 0, Spec{Schedule: "t", Ranks: 2, Stages: 4, Micro: 3, Slots: []int{3, 3}, RankOf: []int{0, 1, 1, 0}, Fingerprint: "fp"}},
	{"v/rank1", 1, Spec{Schedule: "t", Ranks: 2, Stages: 4, Micro: 3, Slots: []int{3, 3}, RankOf: []int{0, 1, 1, 0}, Fingerprint: "fp"}},
	{"labels/last", 1, Spec{Schedule: "t", Ranks: 2, Stages: 2, Micro: 3, Slots: []int{2, 2}, RankOf: []int{0, 1}, Fingerprint: "fp", ShipLabels: true}},
	{"labels/first", 0, Spec{Schedule: "t", Ranks: 2, Stages: 2, Micro: 3, Slots: []int{2, 2}, RankOf: []int{0, 1}, Fingerprint: "fp", ShipLabels: true}},
	{"owned/first", 0, Spec{Schedule: "t", Ranks: 2, Stages: 2, Micro: 3, Slots: []int{2, 2}, RankOf: []int{0, 1}, Fingerprint: "fp", Owned: 2}},
	{"owned/owner", 1, Spec{Schedule: "t", Ranks: 2, Stages: 2, Micro: 3, Slots: []int{2, 2}, RankOf: []int{0, 1}, Fingerprint: "fp", Owned: 2}},
}

// pathRig is one run: the Exec and the log its fakes write.
type pathRig struct {
	x       *Exec
	tr      *fakeTransport
	log     *[]string
	stepLog int // len(*log) when the current step began
}

func newPathRig(t *testing.T, w pathWorld, failCall, failMicro int) *pathRig {
	log := &[]string{}
	tr := &fakeTransport{rank: w.rank, world: w.spec.Ranks, log: log}
	stages := map[int]Stage{}
	calls := 0
	for s, r := range w.spec.RankOf {
		if r == w.rank {
			stages[s] = &fakeStage{stage: s, log: log, calls: &calls, failAt: failCall % 16}
		}
	}
	cfg := Config{Rank: w.rank, Spec: w.spec, Stages: stages, Loss: fakeLoss{log}, Data: fakeData{log, failMicro%8 - 1}, SerialOverlap: true,
		OptStep: func() error { logAppend(log, "opt"); return nil }}
	if w.spec.Ranks > 1 {
		cfg.Transport = tr
	}
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return &pathRig{x: x, tr: tr, log: log}
}

// begin prepares the fakes for step st.
func (g *pathRig) begin(st pathStep) {
	g.tr.expect(st)
	logMu.Lock()
	g.stepLog = len(*g.log)
	logMu.Unlock()
}

// state renders everything the two runs must agree on. A step that fails
// races with the transfers it posted (the comm goroutine skips those that
// start after the failure), so once the rank has failed the received
// tensors and the last step's transfers are left out.
func (g *pathRig) state(maskErr bool) string {
	x := g.x
	failed := x.Err() != nil
	errText := fmt.Sprint(x.Err())
	if maskErr {
		errText = "<failed>"
	}
	var b strings.Builder
	for i := range x.slots {
		s := &x.slots[i]
		flags := fmt.Sprintf("%b", s.flags)
		if maskErr {
			flags = "-" // a pending transfer's flag may still be set, or cleared by its failure
		}
		fmt.Fprintf(&b, "slot %d: key %x flags %s x %s y %s dy %s dx %s target %s saved %v", i, s.key, flags,
			val(s.x), val(s.y), val(s.dy), val(s.dx), val(s.target), s.saved)
		if !failed {
			fmt.Fprintf(&b, " ract %s rgrad %s rdata %s", val(s.ract), val(s.rgrad), val(s.rdata))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "losses %v own %s/%d err %s\n", x.Losses(), val(x.ownIn), x.ownMicro, errText)
	logMu.Lock()
	entries := slices.Clone(*g.log)
	logMu.Unlock()
	for i, l := range entries {
		if failed && i >= g.stepLog && (strings.HasPrefix(l, "send(") || strings.HasPrefix(l, "recv(")) {
			continue
		}
		if maskErr && strings.HasPrefix(l, "abort(") {
			l = "abort(<failed>)"
		}
		b.WriteString(l + "; ")
	}
	return b.String()
}

// logMu guards the rigs' call logs: the comm goroutine (a receive) and the
// step's goroutine (or an overlap's two) append to one log at once.
var logMu sync.Mutex

func logAppend(log *[]string, entry string) {
	logMu.Lock()
	*log = append(*log, entry)
	logMu.Unlock()
}

func val(t *tensor.Dense) string {
	if t == nil {
		return "-"
	}
	return fmt.Sprint(t.Float64s())
}

func scalar(v float64) *tensor.Dense {
	return tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{v}))
}

func num(t *tensor.Dense) float64 {
	if t == nil {
		return -1
	}
	return t.Float64s()[0]
}

// fakeStage computes from its inputs' values, so that a tensor's value
// names what produced it; its failAt-th call fails. It is a Swapper, a
// SwapWaiter and Sharded, logging each call.
type fakeStage struct {
	stage  int
	log    *[]string
	calls  *int // shared by the rank's stages
	failAt int
}

func (s *fakeStage) call(what string, v float64) error {
	*s.calls++
	logAppend(s.log, fmt.Sprintf("%d%s(%v)", s.stage, what, v))
	if *s.calls == s.failAt {
		return fmt.Errorf("stage %d: %s fails (call %d)", s.stage, what, *s.calls)
	}
	return nil
}

func (s *fakeStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	v := num(x)
	if err := s.call("F", v); err != nil {
		return nil, nil, err
	}
	return scalar(v*3 + float64(s.stage)), fmt.Sprintf("saved(%d,%v)", s.stage, v), nil
}

func (s *fakeStage) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	v := num(dy)
	if err := s.call(fmt.Sprintf("I[%v]", saved), v); err != nil {
		return nil, err
	}
	return scalar(v*5 + float64(s.stage)), nil
}

func (s *fakeStage) BackwardWeight(saved any, dy *tensor.Dense) error {
	return s.call(fmt.Sprintf("W[%v]", saved), num(dy))
}

func (s *fakeStage) Offload(saved any) (any, error) {
	return fmt.Sprintf("handle(%v)", saved), s.call(fmt.Sprintf("offload[%v]", saved), 0)
}

func (s *fakeStage) Load(h any) (any, error) {
	inner, _ := strings.CutPrefix(fmt.Sprint(h), "handle(")
	return strings.TrimSuffix(inner, ")"), s.call(fmt.Sprintf("load[%v]", h), 0)
}

func (s *fakeStage) WaitOffload(h any) error { return s.call(fmt.Sprintf("wait[%v]", h), 0) }
func (s *fakeStage) Unshard() error          { return s.call("unshard", 0) }
func (s *fakeStage) Reshard() error          { return s.call("reshard", 0) }
func (s *fakeStage) ReduceGrad() error       { return s.call("reduce", 0) }

type fakeLoss struct{ log *[]string }

func (l fakeLoss) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	logAppend(l.log, fmt.Sprintf("loss(%v,%v)", num(y), num(target)))
	return num(y) - num(target), scalar(num(y) + 1), nil
}

type fakeData struct {
	log  *[]string
	fail int // the micro-batch whose labels fail to load, or -1
}

func (d fakeData) Input(m int) (*tensor.Dense, error) {
	logAppend(d.log, fmt.Sprintf("input(%d)", m))
	return scalar(float64(100 + m)), nil
}

func (d fakeData) Target(m int) (*tensor.Dense, error) {
	logAppend(d.log, fmt.Sprintf("target(%d)", m))
	if m == d.fail {
		return nil, nil // a nil tensor: the runtime reports it
	}
	return scalar(float64(200 + m)), nil
}

// fakeTransport is the rank's peers: every send is logged; a receive gets
// the tag the step that posted it expects (expect sets it), or another one
// when the step says wrongTag, or fails when it says failRecvs, with a
// tensor whose value names the tag and channel.
type fakeTransport struct {
	rank, world int
	log         *[]string
	next        transport.Tag
	wrong, fail bool
}

// expect sets what the next receive returns: the tag of the neighbour (or
// the owner's stage) that st's receive, if any, waits for.
func (tr *fakeTransport) expect(st pathStep) {
	stage := st.stage
	switch st.kind {
	case sRecvF, sRecvAndF, sRecvData, sLabelsAndRecvF:
		stage--
	case sRecvB, sRecvAndB, sRecvAndI:
		stage++
	}
	tr.next = transport.Tag{Stage: int32(stage), Micro: int32(st.micro)}
	tr.wrong, tr.fail = st.wrongTag, st.failRecvs
}

func (tr *fakeTransport) Rank() int  { return tr.rank }
func (tr *fakeTransport) World() int { return tr.world }

func (tr *fakeTransport) Send(peer int, ch abi.Channel, tag transport.Tag, t *tensor.Dense) error {
	logAppend(tr.log, fmt.Sprintf("send(%d,%v,%v,%s)", peer, ch, tag, val(t)))
	return nil
}

func (tr *fakeTransport) Recv(peer int, ch abi.Channel) (transport.Tag, *tensor.Dense, error) {
	logAppend(tr.log, fmt.Sprintf("recv(%d,%v)", peer, ch))
	if tr.fail {
		return transport.Tag{}, nil, errors.New("the peer is gone")
	}
	tag := tr.next
	if tr.wrong {
		tag.Micro++
	}
	return tag, scalar(float64(1000*int(ch) + 10*int(tag.Stage) + int(tag.Micro))), nil
}

func (tr *fakeTransport) Close() error { return nil }

func (tr *fakeTransport) Abort(cause error) {
	logAppend(tr.log, fmt.Sprintf("abort(%v)", cause))
}

// TestPathSeedsRunSteps checks that the seeds exercise what they are for:
// each world's valid seed runs every step without an error, so the fuzz
// corpus starts from programs deep enough to reach the fast paths.
func TestPathSeedsRunSteps(t *testing.T) {
	for i, seed := range pathSeeds[:7] {
		w := worlds[int(seed[0])%len(worlds)]
		g := newPathRig(t, w, int(seed[1]), int(seed[2]))
		steps := decodeSteps(seed[3:])
		// The last step of each seed is a deliberate misuse; the ones
		// before it must succeed.
		for j, st := range steps[:len(steps)-1] {
			g.begin(st)
			st.run(g.x)
			g.x.Sync()
			if err := g.x.Err(); err != nil {
				t.Fatalf("seed %d (%s), step %d %s: %v", i, w.name, j, st, err)
			}
		}
		if !slices.ContainsFunc(*g.log, func(s string) bool { return strings.Contains(s, "F(") || strings.Contains(s, "send(") }) {
			t.Errorf("seed %d (%s) ran no stage call or send: %v", i, w.name, *g.log)
		}
	}
}
