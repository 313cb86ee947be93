package sim

import (
	"fmt"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/ir"
)

type chunkKey struct {
	kind         ir.Kind
	stage, micro int
}

type chunkRankKey struct {
	rank int
	chunkKey
}

func newSimulator(p ir.Program, c Cost) (*simulator, error) {
	P := len(p.Ranks)
	if P == 0 {
		return nil, fmt.Errorf("sim: program has no ranks")
	}
	stages := p.Stages()
	if stages == 0 { // no placement: take the stages the steps name
		for _, steps := range p.Ranks {
			for _, st := range steps {
				stages = max(stages, st.Stage+1)
				for _, sub := range st.Sub {
					stages = max(stages, sub.Stage+1)
				}
			}
		}
	}
	rc, err := c.Resolve(stages)
	if err != nil {
		return nil, fmt.Errorf("sim: cost: %w", err)
	}
	s := &simulator{p: p, dp: p, c: rc, stages: stages, ranks: make([]rankState, P)}
	if p.Stages() == 0 {
		// The dependency model reads routes from the placement: give it
		// one of the stages the steps name (no ranks: sim finds producers
		// by chunk, wherever they run).
		s.dp.Placement.RankOf = make([]int, stages)
		for i := range s.dp.Placement.RankOf {
			s.dp.Placement.RankOf[i] = ir.None
		}
		s.dp.Copies = 0
	}
	total := 0
	for r, steps := range p.Ranks {
		s.ranks[r] = rankState{n: len(steps), off: total}
		total += len(steps)
	}
	s.ev = make([]Event, total)
	s.cls = make([]class, total)
	s.dur = make([]float64, total)
	s.done = make([]bool, total)
	s.deps = make([][]dep, total)
	s.match = make([]int, total)

	// Validate kinds and micro numbers, and size the chunk tables.
	maxMicro := 0
	for r, steps := range p.Ranks {
		for i, st := range steps {
			for _, x := range append([]ir.Step{st}, st.Sub...) {
				if !validKind(x.Kind) {
					return nil, fmt.Errorf("sim: rank %d step %d %s: invalid step kind %d", r, i, st, uint8(x.Kind))
				}
				if x.Kind.HasMicro() && x.Micro < 0 {
					return nil, fmt.Errorf("sim: rank %d step %d %s: %s needs a micro-batch number ≥ 0, has %d", r, i, st, x.Kind, x.Micro)
				}
				maxMicro = max(maxMicro, x.Micro)
			}
		}
	}
	idx := &indexes{
		compute: map[ir.Kind]*chunkTable{},
		recv:    map[ir.Kind]*chunkTable{},
		recvDup: map[chunkRankKey]int{},
	}
	for _, k := range []ir.Kind{ir.Forward, ir.Backward, ir.BackwardInput, ir.BackwardWeight} {
		idx.compute[k] = newChunkTable(stages, maxMicro, total)
	}
	for _, k := range []ir.Kind{ir.RecvF, ir.RecvB, ir.DataRecv, ir.MpipeRecv} {
		idx.recv[k] = newChunkTable(stages, maxMicro, total)
	}
	launchSeen := map[chunkRankKey]int{}

	// Classify and cost every step; index compute steps and receives.
	for r, steps := range p.Ranks {
		rs := &s.ranks[r]
		batch := -1 // first event of the open batch
		for i, st := range steps {
			e := rs.off + i
			if k := st.Kind; k == ir.BatchBegin {
				batch = e + 1
			} else if !k.IsComm() {
				batch = -1 // a batch is the run of transfers after its BATCH_BEGIN
			} else if batch >= 0 && e > batch {
				if s.bFirst == nil {
					s.bFirst, s.bEnd = make([]int, total), make([]int, total)
					for x := range s.bFirst {
						s.bFirst[x], s.bEnd[x] = x, x+1
					}
				}
				for x := batch; x <= e; x++ {
					s.bFirst[x], s.bEnd[x] = batch, e+1
				}
			}
			s.ev[e] = Event{Rank: r, Index: i, Step: st, Peer: -1}
			s.match[e] = -1
			where := func() string { return fmt.Sprintf("sim: rank %d step %d %s", r, i, st) }
			k := st.Kind
			if k.HasStage() && (st.Stage < 0 || st.Stage >= stages) {
				return nil, fmt.Errorf("%s: stage %d outside 0..%d", where(), st.Stage, stages-1)
			}
			switch {
			case k.IsOverlap():
				if len(st.Sub) != 2 {
					return nil, fmt.Errorf("%s: an overlap step needs exactly 2 sub-steps, has %d", where(), len(st.Sub))
				}
				var d [2]float64
				for j, sub := range st.Sub {
					if !sub.Kind.IsCompute() || sub.Kind.IsOverlap() {
						return nil, fmt.Errorf("%s: overlap sub-step %s is not F, B, I or W", where(), sub)
					}
					if sub.Stage < 0 || sub.Stage >= stages {
						return nil, fmt.Errorf("%s: sub-step %s: stage %d outside 0..%d", where(), sub, sub.Stage, stages-1)
					}
					d[j] = rc.computeCost(sub)
				}
				s.cls[e] = clCompute
				s.dur[e] = max(d[0], d[1]) + rc.Overlap*min(d[0], d[1])
			case k.IsCompute():
				s.cls[e] = clCompute
				s.dur[e] = rc.computeCost(st)
			case k.IsComm():
				s.cls[e] = clComm
				s.dur[e] = rc.transfer(st)
				s.ev[e].Lane = LaneComm
				rs.comm = append(rs.comm, i)
				if t := idx.recv[k]; t != nil && !t.setFirst(st.Stage, st.Micro, e) {
					if first := t.get(st.Stage, st.Micro); first >= 0 && s.ev[first].Rank != r {
						key := chunkRankKey{r, chunkKey{k, st.Stage, st.Micro}}
						if _, dup := idx.recvDup[key]; !dup {
							idx.recvDup[key] = e
						}
					}
				}
			case k == ir.SwapLaunchOffload || k == ir.SwapLaunchLoad:
				s.cls[e] = clLaunch
				s.dur[e] = rc.Swap
				s.ev[e].Lane = LaneSwap
				launchSeen[chunkRankKey{r, chunkKey{k, st.Stage, st.Micro}}] = e
			case k == ir.Unshard:
				s.cls[e] = clGather
				s.dur[e] = rc.StepCost(st) // Unshard and the all-gather's ring cost
				s.ev[e].Lane = LaneFSDP
			case k == ir.SwapWaitOffload || k == ir.SwapWaitLoad:
				s.cls[e] = clWait
				lk := ir.SwapLaunchOffload
				if k == ir.SwapWaitLoad {
					lk = ir.SwapLaunchLoad
				}
				if le, ok := launchSeen[chunkRankKey{r, chunkKey{lk, st.Stage, st.Micro}}]; ok {
					s.deps[e] = []dep{{ev: le}}
				} else {
					s.deps[e] = []dep{{ev: -1, why: fmt.Sprintf("waits for a %d%s%d that no earlier step of rank %d starts", st.Stage, lk, st.Micro, r)}}
				}
			case k.IsRendezvous() || k == ir.OptStep && rc.PreB > 0:
				s.cls[e] = clMeet // its dependencies: meetDeps (OPT_STEP with a trainable tower: tower.go)
			default:
				s.cls[e] = clLocal
				if k.IsBatch() {
					s.ev[e].Lane = LaneComm // a bracket of the comm stream, free
				}
				// DATA_LOAD, REDUCE_GRAD (with the reduce-scatter's ring
				// cost), OPT_STEP; 0 for a kind StepCost does not price.
				s.dur[e] = rc.StepCost(st)
				if k == abi.Recompute {
					s.dur[e] *= p.RecomputeCostPart(st.Stage) // selective: its share
				}
			}
			if k.IsOverlap() {
				for _, cs := range st.Sub {
					idx.compute[cs.Kind].setFirst(cs.Stage, cs.Micro, e)
				}
			} else if k.IsCompute() {
				idx.compute[k].setFirst(st.Stage, st.Micro, e)
			}
		}
	}
	if err := s.matchComm(); err != nil {
		return nil, err
	}
	for _, fill := range meetDeps {
		fill(s)
	}

	// Dependencies of compute steps, and who watches whom: rank q watches
	// rank r when a step of q depends on one of r or they are comm peers.
	w := newWatchers(P)
	addWatch := w.add
	flat := make([]dep, 0, 3*total)
	gather := make([]int, stages) // per stage: the rank's latest UNSHARD so far, or -1
	for r, steps := range p.Ranks {
		off := s.ranks[r].off
		for i := range gather {
			gather[i] = -1
		}
		for i, st := range steps {
			e := off + i
			if s.cls[e] == clGather {
				gather[st.Stage] = e
				continue
			}
			if s.cls[e] == clComm {
				addWatch(s.ev[s.match[e]].Rank, r)
				continue
			}
			if s.cls[e] == clMeet {
				for _, d := range s.deps[e] {
					addWatch(s.ev[d.ev].Rank, r)
				}
				if s.peers != nil {
					for _, pe := range s.peers[e] {
						if pe >= 0 {
							addWatch(s.ev[pe].Rank, r)
						}
					}
				}
				continue
			}
			if s.cls[e] != clCompute {
				continue
			}
			subs := st.Sub
			if !st.Kind.IsOverlap() {
				subs = []ir.Step{st}
			}
			first := len(flat)
			for _, cs := range subs {
				from := len(flat)
				var err error
				flat, err = s.computeDeps(r, cs, idx, flat)
				if err != nil {
					return nil, fmt.Errorf("sim: rank %d step %d %s: %w", r, i, st, err)
				}
				// Drop what the other half of the same overlap produces.
				kept := flat[:from]
				for _, d := range flat[from:] {
					if d.ev != e {
						kept = append(kept, d)
					}
				}
				flat = kept
			}
			// The parameters: the latest UNSHARD of each stage it computes on.
			for j, cs := range subs {
				if g := gather[cs.Stage]; g >= 0 && (j == 0 || cs.Stage != subs[0].Stage) {
					flat = append(flat, dep{ev: g})
				}
			}
			s.deps[e] = flat[first:len(flat):len(flat)]
			for _, d := range s.deps[e] {
				if d.ev >= 0 {
					addWatch(s.ev[d.ev].Rank, r)
				}
			}
		}
	}
	s.watch = w.lists()
	return s, nil
}

var validKinds = func() (t [256]bool) {
	for _, k := range ir.Kinds() {
		t[k] = true
	}
	return t
}()

func validKind(k ir.Kind) bool { return validKinds[k] }

// indexes locate the steps of each chunk.
type indexes struct {
	compute map[ir.Kind]*chunkTable // first event running F/B/I/W of (stage, micro)
	recv    map[ir.Kind]*chunkTable // first RECV_F/RECV_B/DATA_RECV of (stage, micro) on any rank
	recvDup map[chunkRankKey]int    // first receive on a rank other than the table's
}

// recvOn returns the first receive of kind k for (stage, micro) on rank r, or -1.
func (s *simulator) recvOn(idx *indexes, r int, k ir.Kind, stage, micro int) int {
	if e := idx.recv[k].get(stage, micro); e >= 0 {
		if s.ev[e].Rank == r {
			return e
		}
		if d, ok := idx.recvDup[chunkRankKey{r, chunkKey{k, stage, micro}}]; ok {
			return d
		}
	}
	return -1
}

func (c *Cost) computeCost(st ir.Step) float64 {
	if c.Each != nil {
		if d, ok := c.Each[StepKey{st.Kind, st.Stage, st.Micro}]; ok {
			return d
		}
	}
	switch st.Kind {
	case ir.Forward:
		return of(c.F, st.Stage)
	case ir.Backward:
		return of(c.B, st.Stage)
	case ir.BackwardInput:
		return of(c.I, st.Stage)
	case ir.BackwardWeight:
		return of(c.W, st.Stage)
	}
	return 0
}

// computeDeps appends to ds what compute step cs (run on rank r) waits for,
// input by input (deps.Of): the receive of its own chunk that carries the
// input when the rank has one, else the producer step itself (latency Comm
// plus the activation's transfer time when it runs on another rank: a
// compute-only program); an optional input (shipped labels, an owned
// input) only when the rank has its receive.
func (s *simulator) computeDeps(r int, cs ir.Step, idx *indexes, ds []dep) ([]dep, error) {
	s.ins = deps.Of(&s.dp, &cs, s.ins[:0])
	for _, in := range s.ins {
		if in.Recv != ir.Invalid {
			if re := s.recvOn(idx, r, in.Recv, cs.Stage, cs.Micro); re >= 0 {
				if s.bFirst != nil {
					// A receive of a batch is there when the whole batch is.
					for x := s.bFirst[re]; x < s.bEnd[re]; x++ {
						ds = append(ds, dep{ev: x})
					}
					continue
				}
				ds = append(ds, dep{ev: re})
				continue
			}
		}
		if in.Optional() {
			continue
		}
		// The producer: the first of kinds that runs (a chunk has one
		// backward, B or I; for W, sim accepts the B that verify rejects).
		kinds, what := []ir.Kind{ir.Forward}, "the forward F"
		switch in.Kind {
		case ir.Backward:
			kinds, what = []ir.Kind{ir.Backward, ir.BackwardInput}, "the backward B or I"
		case ir.BackwardInput:
			kinds, what = []ir.Kind{ir.BackwardInput, ir.Backward}, "the input backward I"
		}
		found := false
		for _, k := range kinds {
			if pe := idx.compute[k].get(in.Stage, in.Micro); pe >= 0 {
				lat := 0.0
				if s.ev[pe].Rank != r {
					lat = s.c.Comm + s.c.ActTime(in.Act)
				}
				ds = append(ds, dep{ev: pe, lat: lat})
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("%s needs %s of stage %d micro %d, which no rank runs (%w)", cs, what, in.Stage, in.Micro, ErrStuck)
		}
	}
	return ds, nil
}

type channelKey struct {
	src, dst int
	ch       ir.Channel
}

// matchComm pairs sends and receives FIFO per (source rank, destination
// rank, channel) and reports the first transfer without a partner.
func (s *simulator) matchComm() error {
	P := len(s.p.Ranks)
	sends := map[channelKey][]int{}
	recvs := map[channelKey][]int{}
	var keys []channelKey
	seen := map[channelKey]bool{}
	for r, steps := range s.p.Ranks {
		off := s.ranks[r].off
		for _, i := range s.ranks[r].comm {
			st := steps[i]
			peer := st.Peer
			if peer < 0 || peer >= P {
				peer = s.p.Placement.PeerOfStep(st)
			}
			if peer < 0 || peer >= P {
				return fmt.Errorf("sim: rank %d step %d %s: no peer rank (Peer = %d, and the placement names none for stage %d); ranks are 0..%d", r, i, st, st.Peer, st.Stage, P-1)
			}
			var key channelKey
			if st.Kind.IsSend() {
				key = channelKey{r, peer, st.Kind.Channel()}
				sends[key] = append(sends[key], off+i)
			} else {
				key = channelKey{peer, r, st.Kind.Channel()}
				recvs[key] = append(recvs[key], off+i)
			}
			if !seen[key] {
				seen[key] = true
				keys = append(keys, key)
			}
		}
	}
	for _, key := range keys {
		ss, rr := sends[key], recvs[key]
		for n := 0; n < min(len(ss), len(rr)); n++ {
			s.match[ss[n]], s.match[rr[n]] = rr[n], ss[n]
			s.ev[ss[n]].Peer, s.ev[rr[n]].Peer = rr[n], ss[n]
		}
	}
	for e := range s.ev {
		if s.cls[e] != clComm || s.match[e] >= 0 {
			continue
		}
		ev := s.ev[e]
		dir := "send"
		if ev.Step.Kind.IsRecv() {
			dir = "receive"
		}
		var key channelKey
		peer := ev.Step.Peer
		if peer < 0 || peer >= P {
			peer = s.p.Placement.PeerOfStep(ev.Step)
		}
		if ev.Step.Kind.IsSend() {
			key = channelKey{ev.Rank, peer, ev.Step.Kind.Channel()}
		} else {
			key = channelKey{peer, ev.Rank, ev.Step.Kind.Channel()}
		}
		return fmt.Errorf("sim: rank %d step %d %s: %s has no matching partner on rank %d: rank %d sends %d %s transfer(s) to rank %d, which receives %d (%w)",
			ev.Rank, ev.Index, ev.Step, dir, peer, key.src, len(sends[key]), key.ch, key.dst, len(recvs[key]), ErrStuck)
	}
	return nil
}
