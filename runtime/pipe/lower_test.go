package pipe_test

// A tiny stand-in for gen/: it builds the lowered programs the tests run,
// and emits them as straight-line Go (fakegen_test.go) the way gen/emit
// does. The runtime must not depend on gen/, so the tests carry their own.

import (
	"bytes"
	"fmt"
	"go/format"
	"slices"
	"sort"
	"strings"

	"github.com/ppgen/ppgen/runtime/pipe"
)

type progDef struct {
	name   string // Go identifier prefix in fakegen_test.go
	policy string // "gpipe", "1f1b", "zb" (I/W split, W deferred)
	ranks  int
	rankOf []int
	micro  int
}

// The programs of fakegen_test.go.
var progDefs = []progDef{
	{"twoRank1F1B", "1f1b", 2, []int{0, 1}, 4},
	{"threeRankGPipe", "gpipe", 3, []int{0, 1, 2}, 4},
	{"threeRank1F1B", "1f1b", 3, []int{0, 1, 2}, 6},
	{"twoRankLoop1F1B", "1f1b", 2, []int{0, 1, 0, 1}, 4}, // interleaved: two stages per rank, remote neighbours
	{"twoRankVZB", "zb", 2, []int{0, 1, 1, 0}, 4},        // V placement: local neighbours (src slots), I/W split
	{"oneRankLocal", "1f1b", 1, []int{0, 0, 0, 0}, 64},   // single rank, four local stages: the benchmark
}

type task struct {
	kind         pipe.OpKind // OpForward, OpBackward, OpBackwardInput, OpBackwardWeight
	stage, micro int
}

// order computes each rank's compute order by a unit-time list scheduling
// simulation: every tick each rank runs its best ready task.
func order(d progDef) [][]task {
	S, M := len(d.rankOf), d.micro
	split := d.policy == "zb"
	done := map[task]int{} // task -> tick it finished
	var pending [][]task = make([][]task, d.ranks)
	for s := range S {
		for m := range M {
			r := d.rankOf[s]
			pending[r] = append(pending[r], task{pipe.OpForward, s, m})
			if split {
				pending[r] = append(pending[r], task{pipe.OpBackwardInput, s, m}, task{pipe.OpBackwardWeight, s, m})
			} else {
				pending[r] = append(pending[r], task{pipe.OpBackward, s, m})
			}
		}
	}
	bwd := pipe.OpBackward
	if split {
		bwd = pipe.OpBackwardInput
	}
	finished := func(t task, now int) bool { at, ok := done[t]; return ok && at < now }
	ready := func(t task, now int) bool {
		switch t.kind {
		case pipe.OpForward:
			return t.stage == 0 || finished(task{pipe.OpForward, t.stage - 1, t.micro}, now)
		case pipe.OpBackwardWeight:
			return finished(task{pipe.OpBackwardInput, t.stage, t.micro}, now)
		default:
			return finished(task{pipe.OpForward, t.stage, t.micro}, now) &&
				(t.stage == S-1 || finished(task{bwd, t.stage + 1, t.micro}, now))
		}
	}
	prio := func(t task) int { // lower runs first
		rank := map[pipe.OpKind]int{}
		switch d.policy {
		case "gpipe":
			rank = map[pipe.OpKind]int{pipe.OpForward: 0, pipe.OpBackward: 1}
		default:
			rank = map[pipe.OpKind]int{pipe.OpBackward: 0, pipe.OpBackwardInput: 0, pipe.OpForward: 1, pipe.OpBackwardWeight: 2}
		}
		st := t.stage
		if t.kind != pipe.OpForward {
			st = S - st
		}
		return rank[t.kind]*1_000_000 + t.micro*1000 + st
	}
	inflight := make([]int, d.ranks) // forwards whose backward has not run
	limit := make([]int, d.ranks)
	for r := range limit {
		limit[r] = 1 << 30
		if d.policy != "gpipe" {
			n := 0
			for _, rr := range d.rankOf {
				if rr == r {
					n++
				}
			}
			limit[r] = n * (d.ranks - r)
		}
	}
	firstStage := make([]int, d.ranks)
	for r := range firstStage {
		firstStage[r] = slices.Index(d.rankOf, r)
	}
	out := make([][]task, d.ranks)
	for now := 0; ; now++ {
		left := 0
		for r := range d.ranks {
			left += len(pending[r])
			best := -1
			for i, t := range pending[r] {
				// The limit applies to micro-batches entering the rank (its
				// first stage), so a rank's later stages never starve.
				if !ready(t, now) || (t.kind == pipe.OpForward && t.stage == firstStage[r] && inflight[r] >= limit[r]) {
					continue
				}
				if best < 0 || prio(t) < prio(pending[r][best]) {
					best = i
				}
			}
			if best < 0 {
				continue
			}
			t := pending[r][best]
			pending[r] = append(pending[r][:best], pending[r][best+1:]...)
			done[t] = now
			out[r] = append(out[r], t)
			switch {
			case t.kind == pipe.OpForward && t.stage == firstStage[r]:
				inflight[r]++
			case t.kind == bwd && t.stage == firstStage[r]:
				inflight[r]--
			}
		}
		if left == 0 {
			return out
		}
		if now > 100000 {
			panic("order: no progress")
		}
	}
}

type prog struct {
	def  progDef
	spec pipe.Spec
	ops  [][]pipe.Op
}

// lower inserts data loads and transfers around the compute order (every
// RECV right before its consumer, every SEND right after its producer) and
// assigns slots (lowest free first; a chunk is live from its first step to
// its last use, including being a local neighbour's source).
func lower(d progDef) prog {
	S := len(d.rankOf)
	compute := order(d)
	p := prog{def: d, ops: make([][]pipe.Op, d.ranks)}
	slotsPerRank := make([]int, d.ranks)
	type chunk struct{ s, m int }
	// sendSeq[src][dst][kind]: the receiver-side chunks of the messages src
	// sends dst, in send order (a SEND follows its producer immediately).
	// Receives must be posted in the same order (FIFO per channel), so a
	// receive whose predecessors were not posted yet hoists them.
	sendSeq := make([][]map[pipe.OpKind][]chunk, d.ranks)
	for r := range d.ranks {
		sendSeq[r] = make([]map[pipe.OpKind][]chunk, d.ranks)
		for p := range d.ranks {
			sendSeq[r][p] = map[pipe.OpKind][]chunk{}
		}
		for _, t := range compute[r] {
			s, m := t.stage, t.micro
			switch {
			case t.kind == pipe.OpForward && s < S-1 && d.rankOf[s+1] != r:
				p := d.rankOf[s+1]
				sendSeq[r][p][pipe.OpRecvAct] = append(sendSeq[r][p][pipe.OpRecvAct], chunk{s + 1, m})
			case (t.kind == pipe.OpBackward || t.kind == pipe.OpBackwardInput) && s > 0 && d.rankOf[s-1] != r:
				p := d.rankOf[s-1]
				sendSeq[r][p][pipe.OpRecvGrad] = append(sendSeq[r][p][pipe.OpRecvGrad], chunk{s - 1, m})
			}
		}
	}
	for r := range d.ranks {
		var ops []pipe.Op
		var owner []chunk // owner[i]: chunk of ops[i], or the chunk a src refers to is added separately
		var uses [][]chunk
		add := func(op pipe.Op, c chunk, also ...chunk) {
			ops = append(ops, op)
			owner = append(owner, c)
			uses = append(uses, append([]chunk{c}, also...))
		}
		op := func(k pipe.OpKind, s, m, peer int) pipe.Op {
			return pipe.Op{Kind: k, Stage: int32(s), Micro: int32(m), Peer: int32(peer), Slot: -1, Src: -1}
		}
		local := func(s int) bool { return s >= 0 && s < S && d.rankOf[s] == r }
		type msg struct {
			k pipe.OpKind
			c chunk
		}
		posted := map[msg]bool{}
		next := map[[2]int]int{} // (peer, kind) -> next index into sendSeq[peer][r][kind]
		recv := func(k pipe.OpKind, c chunk, peer int) {
			if posted[msg{k, c}] {
				return
			}
			seq := sendSeq[peer][r][k]
			key := [2]int{peer, int(k)}
			for ; ; next[key]++ {
				h := seq[next[key]]
				add(op(k, h.s, h.m, peer), h)
				posted[msg{k, h}] = true
				if h == c {
					next[key]++
					return
				}
			}
		}
		for _, t := range compute[r] {
			c := chunk{t.stage, t.micro}
			s, m := t.stage, t.micro
			switch t.kind {
			case pipe.OpForward:
				if s == 0 || s == S-1 {
					add(op(pipe.OpDataLoad, s, m, -1), c)
				}
				if s > 0 && !local(s-1) {
					recv(pipe.OpRecvAct, c, d.rankOf[s-1])
				}
				f := op(pipe.OpForward, s, m, -1)
				if local(s - 1) {
					f.Src = 0 // resolved below
					add(f, c, chunk{s - 1, m})
				} else {
					add(f, c)
				}
				if s < S-1 && !local(s+1) {
					add(op(pipe.OpSendAct, s, m, d.rankOf[s+1]), c)
				}
			case pipe.OpBackward, pipe.OpBackwardInput:
				if s < S-1 && !local(s+1) {
					recv(pipe.OpRecvGrad, c, d.rankOf[s+1])
				}
				b := op(t.kind, s, m, -1)
				if local(s + 1) {
					b.Src = 0
					add(b, c, chunk{s + 1, m})
				} else {
					add(b, c)
				}
				if s > 0 && !local(s-1) {
					add(op(pipe.OpSendGrad, s, m, d.rankOf[s-1]), c)
				}
			case pipe.OpBackwardWeight:
				add(op(pipe.OpBackwardWeight, s, m, -1), c)
			}
		}
		// Live ranges.
		first, last := map[chunk]int{}, map[chunk]int{}
		for i := range ops {
			for _, c := range uses[i] {
				if _, ok := first[c]; !ok {
					first[c] = i
				}
				last[c] = i
			}
		}
		slotOf := map[chunk]int{}
		var free []int
		n := 0
		for i := range ops {
			c := owner[i]
			if first[c] == i {
				if len(free) > 0 {
					sort.Ints(free)
					slotOf[c], free = free[0], free[1:]
				} else {
					slotOf[c] = n
					n++
				}
			}
			ops[i].Slot = int32(slotOf[c])
			if ops[i].Src == 0 {
				src := uses[i][1]
				ops[i].Src = int32(slotOf[src])
			}
			for _, u := range uses[i] {
				if last[u] == i {
					free = append(free, slotOf[u])
				}
			}
		}
		ops = append(ops, pipe.Op{Kind: pipe.OpOptStep, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1})
		p.ops[r] = ops
		slotsPerRank[r] = n
	}
	p.spec = pipe.Spec{Schedule: d.policy, Ranks: d.ranks, Stages: S, Micro: d.micro, Slots: slotsPerRank,
		RankOf: append([]int(nil), d.rankOf...), Fingerprint: "test:" + d.name}
	return p
}

// emit writes the programs as straight-line Go in the generated-code shape
// of docs/internals.md (long ranks split into helpers).
func emit(progs []prog) []byte {
	var b bytes.Buffer
	b.WriteString("// Code generated by lower_test.go (go test ./runtime/pipe -run TestFakeGenUpToDate -update). DO NOT EDIT.\n\n")
	b.WriteString("// Hand-made stand-ins for gen/emit output: the exact calls the emitter makes.\n\n")
	b.WriteString("package pipe_test\n\nimport pipe \"github.com/ppgen/ppgen/runtime/pipe\"\n\n")
	b.WriteString("// This guard breaks the build when runtime/pipe no longer supports this generated code.\nconst _ = pipe.SupportPackageIsVersion1\n\n")
	const part = 200
	for _, p := range progs {
		n := p.def.name
		sp := p.spec
		fmt.Fprintf(&b, "var %sSpec = pipe.Spec{Schedule: %q, Ranks: %d, Stages: %d, Micro: %d, Slots: %#v, RankOf: %#v, Fingerprint: %q}\n\n",
			n, sp.Schedule, sp.Ranks, sp.Stages, sp.Micro, sp.Slots, sp.RankOf, sp.Fingerprint)
		var names []string
		for r := range sp.Ranks {
			names = append(names, fmt.Sprintf("%sRank%d", n, r))
		}
		fmt.Fprintf(&b, "var %sRanks = [...]func(*pipe.Exec) error{%s}\n\n", n, strings.Join(names, ", "))
		for r, ops := range p.ops {
			fn := names[r]
			if len(ops) <= part {
				fmt.Fprintf(&b, "func %s(x *pipe.Exec) error {\n", fn)
				writeCalls(&b, ops)
				b.WriteString("\treturn x.Err()\n}\n\n")
				continue
			}
			fmt.Fprintf(&b, "func %s(x *pipe.Exec) error {\n", fn)
			for i := 0; i*part < len(ops); i++ {
				fmt.Fprintf(&b, "\t%sPart%d(x)\n", lowerFirst(fn), i)
			}
			b.WriteString("\treturn x.Err()\n}\n\n")
			for i := 0; i*part < len(ops); i++ {
				fmt.Fprintf(&b, "func %sPart%d(x *pipe.Exec) {\n", lowerFirst(fn), i)
				writeCalls(&b, ops[i*part:min(len(ops), (i+1)*part)])
				b.WriteString("}\n\n")
			}
		}
	}
	// The floor of BenchmarkStepOverhead: the same calls on floorExec.
	for _, p := range progs {
		if p.def.name != "oneRankLocal" {
			continue
		}
		b.WriteString("// oneRankLocalFloor makes oneRankLocalRank0's calls on a floorExec (bench_test.go).\n")
		b.WriteString("func oneRankLocalFloor(x *floorExec) {\n")
		for i := 0; i*part < len(p.ops[0]); i++ {
			fmt.Fprintf(&b, "\toneRankLocalFloorPart%d(x)\n", i)
		}
		b.WriteString("}\n\n")
		for i := 0; i*part < len(p.ops[0]); i++ {
			fmt.Fprintf(&b, "func oneRankLocalFloorPart%d(x *floorExec) {\n", i)
			writeCalls(&b, p.ops[0][i*part:min(len(p.ops[0]), (i+1)*part)])
			b.WriteString("}\n\n")
		}
	}
	out, err := format.Source(b.Bytes())
	if err != nil {
		panic(err)
	}
	return out
}

func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }

func writeCalls(b *bytes.Buffer, ops []pipe.Op) {
	// The packed calls gen/emit writes: one pipe.At constant per step.
	at := func(method string, stage, micro, c, d int32) {
		a, ok := pipe.PackAt(int(stage), int(micro), int(c), int(d))
		if !ok {
			panic(fmt.Sprintf("%s(%d, %d, %d, %d) has no pipe.At", method, stage, micro, c, d))
		}
		fmt.Fprintf(b, "\tx.%s(%#016x)\n", method, uint64(a))
	}
	// Adjacent steps of one chunk fuse as gen/emit fuses them.
	fused := map[[2]pipe.OpKind]string{
		{pipe.OpForward, pipe.OpSendAct}:        "FAndSend",
		{pipe.OpRecvAct, pipe.OpForward}:        "RecvAndF",
		{pipe.OpRecvGrad, pipe.OpBackward}:      "RecvAndB",
		{pipe.OpBackward, pipe.OpSendGrad}:      "BAndSend",
		{pipe.OpRecvGrad, pipe.OpBackwardInput}: "RecvAndI",
		{pipe.OpBackwardInput, pipe.OpSendGrad}: "IAndSend",
	}
	for i := 0; i < len(ops); i++ {
		o := ops[i]
		if i+1 < len(ops) {
			n := ops[i+1]
			if m, ok := fused[[2]pipe.OpKind{o.Kind, n.Kind}]; ok && o.Stage == n.Stage && o.Micro == n.Micro && o.Slot == n.Slot {
				c := o // the compute step
				if n.Kind != pipe.OpSendAct && n.Kind != pipe.OpSendGrad {
					c = n
				}
				if c == n && c.Src != -1 {
					// A compute whose input is another slot's does not
					// consume the receive before it.
				} else {
					at(m, c.Stage, c.Micro, c.Slot, c.Src)
					i++
					continue
				}
			}
		}
		switch o.Kind {
		case pipe.OpDataLoad:
			at("Load", o.Stage, o.Micro, o.Slot, -1)
		case pipe.OpRecvAct:
			at("RecvF", o.Stage, o.Micro, o.Peer, o.Slot)
		case pipe.OpSendAct:
			at("SendF", o.Stage, o.Micro, o.Peer, o.Slot)
		case pipe.OpRecvGrad:
			at("RecvB", o.Stage, o.Micro, o.Peer, o.Slot)
		case pipe.OpSendGrad:
			at("SendB", o.Stage, o.Micro, o.Peer, o.Slot)
		case pipe.OpForward:
			at("F", o.Stage, o.Micro, o.Slot, o.Src)
		case pipe.OpBackward:
			at("B", o.Stage, o.Micro, o.Slot, o.Src)
		case pipe.OpBackwardInput:
			at("I", o.Stage, o.Micro, o.Slot, o.Src)
		case pipe.OpBackwardWeight:
			at("W", o.Stage, o.Micro, o.Slot, -1)
		case pipe.OpOptStep:
			b.WriteString("\tx.OptStep()\n")
		}
	}
}
