package verify_test

import (
	"fmt"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// runNaive is an independent checker for the mutation tests: a plain
// interpreter of the runtime semantics (docs/internals.md), written without
// verify's tables or gen/internal/strict. It runs every rank's host until it
// blocks, posts transfers to per-rank queues, and completes the heads of two
// queues when they are complementary (rendezvous), checking each delivered
// payload. It reports whether the program runs to the end ("") or why it
// hangs or breaks. Contract points it shares with verify by definition, not
// by code: a chunk's F, backward, W, DATA_LOAD and each of its transfers run
// once; a chunk keeps one slot and no slot is taken while its chunk still
// has uses to come. A batch (BATCH_BEGIN .. BATCH_END) is posted as one
// group at its BATCH_END; each of its transfers completes with its FIFO
// partner once that partner is in the peer's first unfinished group, and a
// receive counts as done for its consumer when its whole group is. A
// TIE_GRAD (ties, -tie) names a stage of one of p.Ties whose weight
// gradients are final (every chunk of the stage had its backward and W),
// runs once and before the rank's OPT_STEP; one of a tie within a rank
// names the tie's first stage and passes at once; one across ranks passes
// when this rank's transfers are all done and the peer's host is at its
// TIE_GRAD with its transfers done (the exchange), and then both pass. An
// ALL_REDUCE is the n-th of its rank; it passes when this rank's transfers
// are all done and every other rank has passed its n-th or is at it with
// its transfers done; every rank with an OPT_STEP has passed as many before
// it.
func runNaive(p ir.Program) string {
	P, S := len(p.Ranks), p.Stages()
	rankOf := p.Placement.RankOf
	lowered, hasData, slotted := false, false, false
	for _, steps := range p.Ranks {
		for _, st := range steps {
			lowered = lowered || st.Kind.IsComm()
			hasData = hasData || st.Kind == ir.DataLoad || st.Kind == ir.DataRecv
			slotted = slotted || st.Slot >= 0
			for _, c := range st.Sub {
				slotted = slotted || c.Slot >= 0
			}
		}
	}
	key := func(tag string, s, m int) string { return fmt.Sprintf("%s/%d/%d", tag, s, m) }
	facts := map[string]int{}
	type group struct{ left int }
	type op struct {
		st   ir.Step
		done bool
		grp  *group
	}
	// posted[r] holds rank r's posted groups in stream order, each a batch
	// or a single transfer; open[r] the batch its host is collecting.
	posted := make([][][]*op, P)
	open := make([][]*op, P)
	opened := make([]bool, P)
	recvs := map[string]*op{}
	// Slots: remaining uses of each chunk (its own steps and src reads) and
	// the chunk each (rank, slot) holds.
	uses := map[string]int{}
	seen := map[string]bool{}
	owner := map[[2]int]string{}
	srcOf := func(r int, c ir.Step) string {
		switch {
		case c.Kind == ir.Forward && c.Stage > 0 && rankOf[c.Stage-1] == r:
			return key("chunk", c.Stage-1, c.Micro)
		case c.Kind.IsBackward() && c.Stage < S-1 && rankOf[c.Stage+1] == r:
			return key("chunk", c.Stage+1, c.Micro)
		}
		return ""
	}
	leaves := func(st ir.Step) []ir.Step {
		if st.Kind.IsOverlap() {
			return st.Sub
		}
		return []ir.Step{st}
	}
	for r, steps := range p.Ranks {
		for _, st := range steps {
			for _, c := range leaves(st) {
				if c.Stage >= 0 && c.Stage < S && c.Micro >= 0 && rankOf[c.Stage] == r { // not an mpipe owner's step
					uses[key("chunk", c.Stage, c.Micro)]++
					if s := srcOf(r, c); s != "" {
						uses[s]++
					}
				}
			}
		}
	}
	slotStep := func(r int, st ir.Step) string {
		if !slotted {
			return ""
		}
		ls := leaves(st)
		for _, c := range ls {
			if c.Stage < 0 || c.Micro < 0 || (c.Stage < S && rankOf[c.Stage] != r) {
				continue // no chunk, or an mpipe owner's step: no slot
			}
			if c.Slot < 0 {
				return "a chunk step without a slot"
			}
			ch := key("chunk", c.Stage, c.Micro)
			k := [2]int{r, c.Slot}
			if o := owner[k]; o != ch {
				if o != "" && uses[o] > 0 {
					return fmt.Sprintf("%s overwrites slot %d of %s, still in use", c, c.Slot, o)
				}
				if seen[ch] {
					return fmt.Sprintf("%s uses slot %d, its chunk lives elsewhere", c, c.Slot)
				}
				owner[k] = ch
			}
			seen[ch] = true
		}
		for _, c := range ls {
			if c.Stage >= 0 && c.Stage < S && c.Micro >= 0 && rankOf[c.Stage] == r {
				uses[key("chunk", c.Stage, c.Micro)]--
				if s := srcOf(r, c); s != "" {
					uses[s]--
				}
			}
		}
		return ""
	}
	// received reports whether a receive for k is done ("ok"), pending ("wait") or absent.
	received := func(k string) string {
		o := recvs[k]
		switch {
		case o == nil:
			return "absent"
		case o.grp.left == 0:
			return "ok"
		}
		return "wait"
	}
	const wait = "wait"
	cond := func(r int, c ir.Step) string {
		s, m := c.Stage, c.Micro
		switch c.Kind {
		case ir.Forward:
			if facts[key("F", s, m)] > 0 {
				return c.String() + " runs twice"
			}
			switch {
			case s == 0:
				if hasData && facts[key("load", 0, m)] == 0 {
					// mpipe: the input may come from the micro's owner.
					switch received(key("MPIPE_FWD_RECV", 0, m)) {
					case "absent":
						return c.String() + " without its data"
					case "wait":
						return wait
					}
				}
			case rankOf[s-1] == r:
				if facts[key("F", s-1, m)] == 0 {
					return c.String() + " before its local input"
				}
			case lowered:
				switch received(key("RECV_F", s, m)) {
				case "absent":
					return c.String() + " without a posted receive"
				case "wait":
					return wait
				}
			default:
				if facts[key("F", s-1, m)] == 0 {
					return wait
				}
			}
			if s == S-1 && hasData && facts[key("load", s, m)] == 0 {
				switch received(key("DATA_RECV", s, m)) {
				case "absent":
					return c.String() + " without labels"
				case "wait":
					return wait
				}
			}
		case ir.Backward, ir.BackwardInput:
			if facts[key("BWD", s, m)] > 0 {
				return c.String() + ": second backward"
			}
			if facts[key("F", s, m)] == 0 {
				return c.String() + " before its forward"
			}
			switch {
			case s == S-1:
			case rankOf[s+1] == r:
				if facts[key("BWD", s+1, m)] == 0 {
					return c.String() + " before its local gradient"
				}
			case lowered:
				switch received(key("RECV_B", s, m)) {
				case "absent":
					return c.String() + " without a posted receive"
				case "wait":
					return wait
				}
			default:
				if facts[key("BWD", s+1, m)] == 0 {
					return wait
				}
			}
		case ir.BackwardWeight:
			if facts[key("W", s, m)] > 0 || facts[key("I", s, m)] == 0 {
				return c.String() + " without its I, or twice"
			}
		}
		return ""
	}
	apply := func(c ir.Step) {
		s, m := c.Stage, c.Micro
		switch c.Kind {
		case ir.Forward:
			facts[key("F", s, m)]++
		case ir.Backward:
			facts[key("BWD", s, m)]++
		case ir.BackwardInput:
			facts[key("BWD", s, m)]++
			facts[key("I", s, m)]++
		case ir.BackwardWeight:
			facts[key("W", s, m)]++
		}
	}
	tieOf := func(s int) (ir.Tie, bool) {
		for _, t := range p.Ties {
			if t.A == s || t.B == s {
				return t, true
			}
		}
		return ir.Tie{}, false
	}
	final := func(s int) bool {
		for m := range p.Micro {
			if facts[key("BWD", s, m)] != 1 || facts[key("I", s, m)] != facts[key("W", s, m)] {
				return false
			}
		}
		return true
	}
	var pc []int
	host := func(r int, st ir.Step) string {
		if st.Kind == ir.TieGrad && !opened[r] {
			s := st.Stage
			t, ok := tieOf(s)
			switch {
			case !ok || s < 0 || s >= S || rankOf[s] != r:
				return st.String() + " of a stage in no tie, or not on this rank"
			case facts[key("opt", r, 0)] > 0:
				return st.String() + " after OPT_STEP"
			case facts[key("tie", s, 0)] > 0 && facts[key("tiedone", s, 0)] == 0:
				return st.String() + " twice"
			}
			other := t.A + t.B - s
			q := rankOf[other]
			if q == r {
				if s != t.A || !final(s) || !final(other) {
					return st.String() + " names the tie's second stage, or comes before a backward it sums"
				}
				facts[key("tie", s, 0)]++
				facts[key("tie", other, 0)]++
				return ""
			}
			if !final(s) {
				return st.String() + " before a backward of its stage"
			}
			if facts[key("tiedone", s, 0)] > 0 {
				facts[key("tiedone", s, 0)] = 0
				return "" // the peer ran the exchange with this rank
			}
			peerAt := pc[q] < len(p.Ranks[q]) && p.Ranks[q][pc[q]].Kind == ir.TieGrad && p.Ranks[q][pc[q]].Stage == other
			if len(posted[r]) > 0 || !peerAt || len(posted[q]) > 0 {
				return wait
			}
			facts[key("tie", s, 0)]++
			facts[key("tie", other, 0)]++
			facts[key("tiedone", other, 0)]++ // the peer passes its TIE_GRAD next
			return ""
		}
		if st.Kind.IsCollective() && !opened[r] {
			k := int(st.Kind) // each collective kind's n-th meet the others' n-th
			n := facts[key("coll", r, k)]
			if len(posted[r]) > 0 {
				return wait
			}
			for q := range P {
				if q == r || facts[key("coll", q, k)] > n {
					continue
				}
				at := pc[q] < len(p.Ranks[q]) && p.Ranks[q][pc[q]].Kind == st.Kind && facts[key("coll", q, k)] == n
				if !at || len(posted[q]) > 0 {
					return wait
				}
			}
			facts[key("coll", r, k)]++
			if st.Kind == abi.GatherLoss {
				// The losses it gathers: every F of a last stage on
				// this rank must have run (the last one counts).
				per := p.Stages() / max(p.Copies, 1)
				facts[key("lossLate", r, 0)] = 0
				for _, s := range p.Ranks[r] {
					for _, f := range append([]ir.Step{s}, s.Sub...) {
						if f.Kind == ir.Forward && (f.Stage+1)%per == 0 && facts[key("F", f.Stage, f.Micro)] == 0 {
							facts[key("lossLate", r, 0)] = 1
						}
					}
				}
			}
			return ""
		}
		if st.Kind == ir.OptStep {
			facts[key("opt", r, 0)]++
			// ALL_REDUCE's count before OPT_STEP must agree (a norm
			// belongs to one iteration's step); GATHER_LOSS's need not.
			facts[key("collopt", r, 0)] = facts[key("coll", r, int(abi.AllReduce))]
		}
		switch {
		case st.Kind == ir.BatchBegin:
			if opened[r] {
				return "a batch inside a batch"
			}
			opened[r], open[r] = true, nil
			return ""
		case st.Kind == ir.BatchEnd:
			if !opened[r] || len(open[r]) == 0 {
				return "a BATCH_END without a batch, or an empty batch"
			}
			g := &group{left: len(open[r])}
			for _, o := range open[r] {
				o.grp = g
			}
			posted[r] = append(posted[r], open[r])
			opened[r] = false
			return ""
		case opened[r] && !st.Kind.IsComm():
			return st.String() + " inside a batch"
		}
		switch {
		case st.Kind.IsCompute():
			res := ""
			for _, c := range leaves(st) {
				if x := cond(r, c); x != "" && (res == "" || res == wait) {
					res = x
				}
			}
			if res != "" {
				return res
			}
			if x := slotStep(r, st); x != "" {
				return x
			}
			for _, c := range leaves(st) {
				apply(c)
			}
		case st.Kind.IsComm():
			if st.Peer != p.Placement.PeerOfStep(st) || st.Peer == r {
				return st.String() + " to the wrong peer"
			}
			s, m := st.Stage, st.Micro
			switch st.Kind {
			case ir.SendF:
				if facts[key("F", s, m)] == 0 {
					return st.String() + " before its forward"
				}
			case ir.SendB:
				if facts[key("BWD", s, m)] == 0 {
					return st.String() + " before its backward"
				}
			case ir.DataSend:
				if facts[key("load", s, m)] == 0 && recvs[key("DATA_RECV", s, m)] == nil {
					return st.String() + " without data"
				}
				if o := recvs[key("DATA_RECV", s, m)]; opened[r] && o != nil && o.grp == nil {
					return st.String() + " relays labels its own batch receives"
				}
			case ir.MpipeSend:
				if facts[key("ownerload", s, m)] == 0 {
					return st.String() + " before its owner's load"
				}
				if rankOf[s] == r || p.Placement.Owner(m) != r {
					return st.String() + " not from the micro's owner"
				}
			case ir.MpipeRecv:
				if p.Placement.Owner(m) == r {
					return st.String() + " on the micro's own owner"
				}
			}
			// Contract: a chunk's transfer runs once (the runtime keeps one
			// handle per chunk and direction; a second post would replace it).
			tk := key("posted-"+st.Kind.String(), s, m)
			if facts[tk] > 0 {
				return st.String() + " posted twice"
			}
			facts[tk]++
			if x := slotStep(r, st); x != "" {
				return x
			}
			o := &op{st: st}
			if st.Kind.IsRecv() {
				recvs[key(st.Kind.String(), s, m)] = o
			}
			if opened[r] {
				open[r] = append(open[r], o)
			} else {
				o.grp = &group{left: 1}
				posted[r] = append(posted[r], []*op{o})
			}
		case st.Kind == ir.DataLoad && st.Stage >= 0 && st.Stage < S && rankOf[st.Stage] != r:
			// An owner's load of another rank's input (mpipe).
			if st.Stage != 0 || p.Placement.Owner(st.Micro) != r || facts[key("ownerload", 0, st.Micro)] > 0 {
				return st.String() + " on a rank that neither holds the stage nor owns the micro, or twice"
			}
			facts[key("ownerload", 0, st.Micro)]++
		case st.Kind == ir.DataLoad:
			if facts[key("load", st.Stage, st.Micro)] > 0 {
				return st.String() + " loads a micro-batch twice"
			}
			if x := slotStep(r, st); x != "" {
				return x
			}
			facts[key("load", st.Stage, st.Micro)]++
		}
		return ""
	}
	pc = make([]int, P)
	for {
		progress := false
		for r := range P {
			for pc[r] < len(p.Ranks[r]) {
				res := host(r, p.Ranks[r][pc[r]])
				if res == wait {
					break
				}
				if res != "" {
					return "breaks: " + res
				}
				pc[r]++
				progress = true
			}
		}
		// FIFO per (source, destination, channel): the first unfinished
		// transfer of a kind in a stream pairs with the peer's first
		// unfinished transfer of the other kind; both must be in the first
		// unfinished group of their stream.
		same := func(x, y ir.Step) bool {
			return x.Peer == y.Peer && x.Kind.Channel() == y.Kind.Channel() && x.Kind.IsSend() == y.Kind.IsSend()
		}
		firstOf := func(q int, like ir.Step) (*op, bool) {
			for gi, g := range posted[q] {
				for _, o := range g {
					if !o.done && same(o.st, like) {
						return o, gi == 0
					}
				}
			}
			return nil, false
		}
		for r := range P {
			if len(posted[r]) == 0 {
				continue
			}
			for _, a := range posted[r][0] {
				if a.done {
					continue
				}
				q := a.st.Peer
				if q < 0 || q >= P {
					continue
				}
				if first, _ := firstOf(r, a.st); first != a {
					continue // an earlier transfer of its FIFO is not done
				}
				// Its partner: the peer's first unfinished transfer of the
				// other direction on a's channel, with a's rank as peer.
				var b *op
				head := false
				for gi, g := range posted[q] {
					for _, o := range g {
						if !o.done && o.st.Peer == r && o.st.Kind.Channel() == a.st.Kind.Channel() && o.st.Kind.IsSend() != a.st.Kind.IsSend() {
							b, head = o, gi == 0
							break
						}
					}
					if b != nil {
						break
					}
				}
				if b == nil || !head {
					continue
				}
				snd, rcv := a.st, b.st
				if rcv.Kind.IsSend() {
					snd, rcv = rcv, snd
				}
				d := 1
				switch snd.Kind {
				case ir.SendB:
					d = -1
				case ir.MpipeSend:
					d = 0 // the owner's input, for the stage itself
				}
				if rcv.Stage != snd.Stage+d || rcv.Micro != snd.Micro {
					return fmt.Sprintf("breaks: %s delivers into %s", snd, rcv)
				}
				a.done, b.done = true, true
				a.grp.left--
				b.grp.left--
				progress = true
			}
		}
		for r := range P {
			for len(posted[r]) > 0 && posted[r][0][0].grp.left == 0 {
				posted[r] = posted[r][1:]
			}
		}
		if !progress {
			break
		}
	}
	for r := range P {
		if opened[r] {
			return fmt.Sprintf("breaks: rank %d never closes its batch", r)
		}
		if pc[r] < len(p.Ranks[r]) || len(posted[r]) > 0 {
			return fmt.Sprintf("hangs: rank %d at step %d with %d transfers pending", r, pc[r], len(posted[r]))
		}
	}
	for s := range S {
		for m := range p.Micro {
			if facts[key("F", s, m)] != 1 || facts[key("BWD", s, m)] != 1 || facts[key("I", s, m)] != facts[key("W", s, m)] {
				return fmt.Sprintf("breaks: chunk (%d,%d) incomplete", s, m)
			}
		}
	}
	for r := range P {
		if facts[key("lossLate", r, 0)] != 0 {
			return fmt.Sprintf("breaks: rank %d gathers the losses before one of them is computed", r)
		}
	}
	first := -1
	for r := range P {
		if facts[key("opt", r, 0)] == 0 {
			continue
		}
		if first < 0 {
			first = r
		} else if facts[key("collopt", r, 0)] != facts[key("collopt", first, 0)] {
			return fmt.Sprintf("breaks: rank %d passes %d ALL_REDUCE before OPT_STEP, rank %d %d", first, facts[key("collopt", first, 0)], r, facts[key("collopt", r, 0)])
		}
	}
	for _, t := range p.Ties {
		if facts[key("tie", t.A, 0)] != 1 || facts[key("tie", t.B, 0)] != 1 {
			return fmt.Sprintf("breaks: tie %s summed %d and %d times", t, facts[key("tie", t.A, 0)], facts[key("tie", t.B, 0)])
		}
	}
	return ""
}
