// Package strict simulates ppgen's strict execution model (docs/internals.md,
// "The strict execution model"). It is the one engine behind comm insertion
// (gen/passes), which drives it to decide where receives must go, and the
// deadlock check (gen/verify), which runs it once to decide a program.
//
// The engine knows nothing of step kinds. A Model holds, per rank, a
// sequence of host steps (steps the host thread runs and blocks on: compute
// and local steps) and a sequence of comm ops (the rank's comm stream, in
// program order). Each comm op sits at a gap: the number of host steps that
// precede it on its rank; it is posted once the host has passed that many
// steps. Each host step may wait for events: the completion of a comm op
// (a compute step consumes its receive) or, for compute-only programs, a host
// step of another rank (the producer of its input; or, for a tie's
// exchange, a host step or an op of the peer). Two matched ops complete
// together, and only when each is the first unfinished op of its stream and
// both are posted (rendezvous).
//
// A batch (coalesced transfers, docs/internals.md "Batches") is a run of
// consecutive ops of one stream, all posted at one gap: once every op before
// it has completed, each of its ops completes with its partner as soon as
// the partner is ready, in any order, and the stream's next op waits for the
// whole batch. A host step that waits for an op of a batch waits for the
// whole batch (OpDone of any op of a batch means "the batch completed").
// A single op is a batch of one, so a model without batches runs as before.
//
// Since the model has no choices, one run decides whether everything
// completes; when it does not, Stuck names a cycle of ranks that wait for one
// another. Sim.Hoist is the one mutation comm insertion needs: it moves a
// receive to the head of its stream and completes it with its (waiting) send.
//
// Everything is indexed by dense int32 arrays; a run costs O(host steps + ops
// + waits) plus O(ranks) per stuck state inspected by the caller.
package strict

// OpEvent is the Event.Rank of an event that is the completion of a comm op.
const OpEvent = -1

// Event is something a host step waits for: comm op Index when Rank is
// OpEvent, else host step Index of rank Rank.
type Event struct {
	Rank  int32
	Index int32
}

// OpDone is the event "comm op op has completed".
func OpDone(op int32) Event { return Event{Rank: OpEvent, Index: op} }

// HostDone is the event "host step index of rank rank has run".
func HostDone(rank, index int) Event { return Event{Rank: int32(rank), Index: int32(index)} }

// Model is the event structure of a program under the strict model. Build it
// with a Builder.
type Model struct {
	// HostOff[r]..HostOff[r+1] are the global numbers of rank r's host steps.
	HostOff []int32
	// WaitOff[h]..WaitOff[h+1] index Waits for global host step h.
	WaitOff []int32
	Waits   []Event
	// OpOff[r]..OpOff[r+1] are rank r's comm ops, in stream order.
	OpOff []int32
	// Per comm op: its rank, the gap it is posted at, and its matched op (or
	// -1), an op of another rank; partners are mutual (OpPartner[OpPartner[op]] == op).
	OpRank    []int32
	OpGap     []int32
	OpPartner []int32
	// BatchFirst[op] and BatchEnd[op] bound the batch op belongs to: ops
	// BatchFirst[op]..BatchEnd[op]-1 of its rank's stream. Both are nil
	// when the model has no batch of more than one op.
	BatchFirst []int32
	BatchEnd   []int32
}

// Ranks returns the number of ranks.
func (m *Model) Ranks() int { return len(m.HostOff) - 1 }

// HostLen returns the number of host steps of rank r.
func (m *Model) HostLen(r int) int { return int(m.HostOff[r+1] - m.HostOff[r]) }

// NumOps returns the number of comm ops.
func (m *Model) NumOps() int { return len(m.OpRank) }

// Builder builds a Model rank by rank, each rank's steps in program order.
type Builder struct {
	m       Model
	rank    int32
	started bool
}

// NewBuilder returns a builder; hostHint and opHint size its arrays (0 is fine).
func NewBuilder(hostHint, opHint int) *Builder {
	b := &Builder{rank: -1}
	b.m.HostOff = make([]int32, 1, 65)
	b.m.OpOff = make([]int32, 1, 65)
	b.m.WaitOff = make([]int32, 1, hostHint+1)
	b.m.Waits = make([]Event, 0, hostHint)
	b.m.OpRank = make([]int32, 0, opHint)
	b.m.OpGap = make([]int32, 0, opHint)
	b.m.OpPartner = make([]int32, 0, opHint)
	return b
}

// StartRank begins the next rank (ranks are built in order 0, 1, ...) and
// returns its number.
func (b *Builder) StartRank() int {
	if b.started {
		b.finishRank()
	}
	b.started = true
	b.rank++
	return int(b.rank)
}

func (b *Builder) finishRank() {
	b.m.HostOff = append(b.m.HostOff, int32(len(b.m.WaitOff)-1))
	b.m.OpOff = append(b.m.OpOff, int32(len(b.m.OpRank)))
}

// Host appends a host step to the current rank and returns its index on the rank.
func (b *Builder) Host() int {
	b.m.WaitOff = append(b.m.WaitOff, int32(len(b.m.Waits)))
	return len(b.m.WaitOff) - 2 - int(b.m.HostOff[len(b.m.HostOff)-1])
}

// Wait makes the last host step of the current rank wait for e.
func (b *Builder) Wait(e Event) {
	b.m.Waits = append(b.m.Waits, e)
	b.m.WaitOff[len(b.m.WaitOff)-1] = int32(len(b.m.Waits))
}

// Op appends a comm op to the current rank's stream, posted after the host
// steps appended so far, and returns its id.
func (b *Builder) Op() int32 {
	id := int32(len(b.m.OpRank))
	gap := int32(len(b.m.WaitOff)-1) - b.m.HostOff[len(b.m.HostOff)-1]
	b.m.OpRank = append(b.m.OpRank, b.rank)
	b.m.OpGap = append(b.m.OpGap, gap)
	b.m.OpPartner = append(b.m.OpPartner, -1)
	return id
}

// Model finishes the last rank and returns the model. The builder must not be used afterwards.
func (b *Builder) Model() *Model {
	if b.started {
		b.finishRank()
		b.started = false
	}
	return &b.m
}

// Sim runs a Model.
type Sim struct {
	m    *Model
	host []int32 // per rank: host steps passed
	head []int32 // per rank: first op of the stream not known to be done
	// gap is, per op, its current gap: the model's OpGap until Hoist
	// changes one, then gapBuf, a copy of it the Sim owns (the run
	// itself does not copy the model's).
	gap    []int32
	gapBuf []int32
	done   []bool  // per op
	order  []int32 // per rank, at OpOff[r]: ops in completion order
	nDone  []int32 // per rank: completed ops
	// worklist of ranks to (re)examine
	queue []int32
	inQ   []bool
	// watchers[q]: ranks whose host waits for a host step of q
	watchers [][]int32
	watching []bool
	nWatch   int     // ranks watching another (len of all watchers together)
	blocked  []Event // per rank: event the host waits for (valid while blocked)
	left     int     // host steps not passed + ops not done
	started  bool
	touched  []int32 // ranks processed since the last Touched call
	isTouch  []bool
	// batchLeft[first]: ops of the batch starting at op first not yet
	// completed (nil when the model has no batches).
	batchLeft []int32
	// plain: the model has no batches and nothing was hoisted, so ops
	// complete in stream order and head[r] is exactly rank r's first
	// unfinished op (OpOff[r] + nDone[r]); Run then takes processPlain.
	plain bool
}

// NewSim returns a simulation of m in its initial state.
func NewSim(m *Model) *Sim { return NewSimInto(nil, m) }

// NewSimInto is NewSim reusing the buffers of s (nil: none), a Sim the
// caller is done with: a caller that decides one model after another (the
// verifier) then allocates and clears a Sim's memory once, not per model.
func NewSimInto(s *Sim, m *Model) *Sim {
	if s == nil {
		s = new(Sim)
	}
	n := m.Ranks()
	ops := m.NumOps()
	watchers := resize(s.watchers, n)
	for r := range watchers {
		watchers[r] = watchers[r][:0]
	}
	batchLeft, gapBuf := s.batchLeft, s.gapBuf
	*s = Sim{
		m:        m,
		host:     zeroed(s.host, n),
		head:     resize(s.head, n),
		gap:      m.OpGap[:ops:ops], // read only: Hoist copies it to gapBuf first
		gapBuf:   gapBuf,
		done:     zeroed(s.done, ops),
		order:    resize(s.order, ops), // written before it is read (Order)
		nDone:    zeroed(s.nDone, n),
		queue:    s.queue[:0],
		inQ:      zeroed(s.inQ, n),
		watchers: watchers,
		watching: zeroed(s.watching, n),
		blocked:  zeroed(s.blocked, n),
		left:     int(m.HostOff[n]) + ops,
		touched:  s.touched[:0],
		isTouch:  zeroed(s.isTouch, n),
	}
	for r := range n {
		s.head[r] = m.OpOff[r]
		s.blocked[r] = HostDone(r, -1) // done: nothing blocks a host yet (processPlain)
	}
	s.plain = m.BatchFirst == nil
	if m.BatchFirst != nil {
		s.batchLeft = zeroed(batchLeft, ops)
		for op := range ops {
			s.batchLeft[m.BatchFirst[op]]++
		}
	}
	return s
}

// resize returns b with length n, reusing its memory when it is large
// enough; the contents are not cleared.
func resize[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// zeroed is resize with every element the zero value.
func zeroed[T any](b []T, n int) []T {
	b = resize(b, n)
	clear(b)
	return b
}

func (s *Sim) push(r int32) {
	if !s.inQ[r] {
		s.inQ[r] = true
		s.queue = append(s.queue, r)
	}
}

// Run advances the simulation as far as it can and reports whether every
// host step has run and every op has completed. Calling it again after Hoist
// continues from where it stopped.
func (s *Sim) Run() bool {
	if !s.started {
		s.started = true
		for r := s.m.Ranks() - 1; r >= 0; r-- {
			s.push(int32(r))
		}
	}
	for len(s.queue) > 0 {
		r := s.queue[len(s.queue)-1]
		s.queue = s.queue[:len(s.queue)-1]
		s.inQ[r] = false
		if s.plain {
			s.processPlain(r)
		} else {
			s.process(r)
		}
	}
	if s.plain {
		s.syncPlain()
	}
	return s.left == 0
}

func (s *Sim) eventDone(e Event) bool {
	if e.Rank == OpEvent {
		if s.batchLeft != nil {
			return s.batchLeft[s.m.BatchFirst[e.Index]] == 0
		}
		return s.done[e.Index]
	}
	return s.host[e.Rank] > e.Index
}

func (s *Sim) process(r int32) {
	s.touch(r)
	m := s.m
	off := m.HostOff[r]
	hostEnd := m.HostOff[r+1] - off
	for {
		progressed := false
		host := s.host[r]
	run:
		for host < hostEnd {
			h := off + host
			for w, end := m.WaitOff[h], m.WaitOff[h+1]; w < end; w++ {
				if e := m.Waits[w]; !s.eventDone(e) {
					s.block(r, e)
					break run
				}
			}
			host++
		}
		if moved := host - s.host[r]; moved > 0 {
			s.host[r] = host
			s.left -= int(moved)
			progressed = true
			s.wake(r)
		}
		op := s.headOp(int(r))
		if op >= 0 && s.gap[op] <= s.host[r] {
			if s.batchLeft != nil {
				progressed = s.batchStep(op) || progressed
			} else if p := m.OpPartner[op]; p >= 0 {
				q := m.OpRank[p]
				if s.headOp(int(q)) == p && s.gap[p] <= s.host[q] {
					s.complete(op, p)
					s.push(q)
					progressed = true
				}
			}
		}
		if !progressed {
			return
		}
	}
}

func (s *Sim) touch(r int32) {
	if !s.isTouch[r] {
		s.isTouch[r] = true
		s.touched = append(s.touched, r)
	}
}

// block records that rank r's host waits for e, not done, and has r
// watch the rank whose progress ends the wait: the one whose host step it
// is, or whose op (a comm op of another rank: a tie's exchange waits for
// the peer's).
func (s *Sim) block(r int32, e Event) {
	s.blocked[r] = e
	q := e.Rank
	if q == OpEvent {
		q = s.m.OpRank[e.Index]
	}
	if q != r && !s.watching[r] {
		s.watching[r] = true
		s.watchers[q] = append(s.watchers[q], r)
		s.nWatch++
	}
}

// processPlain is process for a plain Sim (no batches, nothing hoisted),
// where ops complete in stream order: the head of a stream is head[r]
// itself (no scan past done ops), an op event is done[op] alone, and after
// an op completes the host is tried again only when the event it is
// blocked on is now done; nDone and order are left to syncPlain and
// plainOrder (a plain Sim's completion order is stream order). It makes
// the same moves as process and reaches the same state
// (TestPlainMatchesGeneral).
func (s *Sim) processPlain(r int32) {
	s.touch(r)
	m := s.m
	off, hostEnd := m.HostOff[r], m.HostOff[r+1] // global host step numbers
	opEnd := m.OpOff[r+1]
	h := off + s.host[r] // the next host step
	// A host still blocked (the rank was woken for its ops, or by a rank
	// that has not yet done what it waits for) watches again and is not
	// run: its blocking event alone says so.
	skip := h < hostEnd && !s.plainDone(s.blocked[r])
	if skip {
		s.block(r, s.blocked[r])
	}
	for ; ; skip = false {
		if h < hostEnd && !skip {
			start := h
			w := m.WaitOff[h]
		run:
			for ; h < hostEnd; h++ {
				end := m.WaitOff[h+1]
				for ; w < end; w++ {
					e := m.Waits[w]
					if e.Rank == OpEvent {
						if !s.done[e.Index] {
							s.block(r, e)
							break run
						}
					} else if s.host[e.Rank] <= e.Index && (e.Rank != r || e.Index >= h-off) {
						// (s.host[r] is stored when the run ends: a
						// step of its own, before h, has run.)
						s.block(r, e)
						break run
					}
				}
			}
			if moved := h - start; moved > 0 {
				s.host[r] = h - off
				s.left -= int(moved)
				s.wake(r)
			}
		}
		for {
			op := s.head[r]
			if op == opEnd || s.gap[op] > h-off {
				return
			}
			p := m.OpPartner[op]
			if p < 0 {
				return
			}
			q := m.OpRank[p]
			if q == r || s.head[q] != p || s.gap[p] > s.host[q] {
				return // q == r: two ops of one stream are never both its head
			}
			s.done[op], s.done[p] = true, true
			s.head[r], s.head[q] = op+1, p+1
			s.left -= 2
			s.wake(r)
			s.wake(q)
			s.push(q)
			if h < hostEnd && s.plainDone(s.blocked[r]) {
				break // the host may move on
			}
		}
	}
}

// plainDone is eventDone for a plain Sim.
func (s *Sim) plainDone(e Event) bool {
	if e.Rank == OpEvent {
		return s.done[e.Index]
	}
	return s.host[e.Rank] > e.Index
}

// syncPlain brings nDone up to date for a plain Sim, whose heads alone
// say how far each stream has got (processPlain keeps only those); Run
// calls it before it returns.
func (s *Sim) syncPlain() {
	for r := range s.nDone {
		s.nDone[r] = s.head[r] - s.m.OpOff[r]
	}
}

// plainOrder writes rank r's completion order, which in a plain Sim is
// stream order, into order (processPlain does not).
func (s *Sim) plainOrder(r int) {
	lo := s.m.OpOff[r]
	for i := range s.nDone[r] {
		s.order[lo+i] = lo + i
	}
}

// ready reports whether op, unfinished, may complete now: it is posted and
// every op of its stream before its batch has completed (for a batch of
// one: it is the head of its stream).
func (s *Sim) ready(op int32) bool {
	q := s.m.OpRank[op]
	if s.gap[op] > s.host[q] {
		return false
	}
	h := s.headOp(int(q))
	if s.batchLeft == nil {
		return h == op
	}
	return h >= s.m.BatchFirst[op] && h < s.m.BatchEnd[op]
}

// batchStep completes every op of the posted batch at the head of its
// stream (head is its first unfinished op; a single op is a batch of one)
// whose partner is ready, and reports whether it completed any. Run takes
// it only for models with batches.
func (s *Sim) batchStep(head int32) bool {
	m := s.m
	progressed := false
	for op := head; op < m.BatchEnd[head]; op++ {
		if s.done[op] {
			continue
		}
		if p := m.OpPartner[op]; p >= 0 && !s.done[p] && s.ready(p) {
			s.complete(op, p)
			s.push(m.OpRank[p])
			progressed = true
		}
	}
	return progressed
}

func (s *Sim) complete(a, b int32) {
	for _, op := range [2]int32{a, b} {
		if s.batchLeft != nil {
			s.batchLeft[s.m.BatchFirst[op]]--
		}
		s.done[op] = true
		r := s.m.OpRank[op]
		s.order[s.m.OpOff[r]+s.nDone[r]] = op
		s.nDone[r]++
		s.left--
		s.wake(r)
	}
}

// wake re-queues the ranks watching rank r (their hosts wait for a host
// step or an op of r), which has progressed.
func (s *Sim) wake(r int32) {
	if s.nWatch == 0 {
		return // (a pipeline's ranks wait only for their own receives)
	}
	if w := s.watchers[r]; len(w) > 0 {
		for _, q := range w {
			s.watching[q] = false
			s.push(q)
		}
		s.nWatch -= len(w)
		s.watchers[r] = w[:0]
	}
}

// headOp returns the first unfinished op of rank r's stream, or -1.
func (s *Sim) headOp(r int) int32 {
	h, end := s.head[r], s.m.OpOff[r+1]
	for h < end && s.done[h] {
		h++
	}
	s.head[r] = h
	if h == end {
		return -1
	}
	return h
}

// Touched returns the ranks whose state (host position or comm head) may
// have changed since the previous call, and forgets them. A caller that
// tracks something per rank across Run calls needs to look at these only.
// The slice is valid until the next Run.
func (s *Sim) Touched() []int32 {
	t := s.touched
	for _, r := range t {
		s.isTouch[r] = false
	}
	s.touched = s.touched[:0]
	return t
}

// Head returns the first unfinished op of rank r's comm stream (-1 when
// none) and whether it is posted (the host has reached it).
func (s *Sim) Head(r int) (op int32, posted bool) {
	op = s.headOp(r)
	if op < 0 {
		return -1, false
	}
	return op, s.gap[op] <= s.host[r]
}

// Partner returns the op matched with op, or -1.
func (s *Sim) Partner(op int32) int32 { return s.m.OpPartner[op] }

// Gap returns op's gap: the number of its rank's host steps before it
// (changed by Hoist).
func (s *Sim) Gap(op int32) int { return int(s.gap[op]) }

// Order returns rank r's completed ops in completion order, which is their
// order on the rank's comm stream (inside a batch, the order they matched
// in). The slice is owned by the Sim.
func (s *Sim) Order(r int) []int32 {
	if s.plain {
		s.plainOrder(r)
	}
	return s.order[s.m.OpOff[r] : s.m.OpOff[r]+s.nDone[r]]
}

// Hoist moves the unfinished op (a receive, in comm insertion) to just before
// the head of its rank's stream, taking the head's gap when that is earlier,
// and completes it with its partner, which must be the posted head of its own
// stream. It reports false, changing nothing, when those conditions do not
// hold or the model has batches (comm insertion hoists before coalescing).
// Call Run afterwards to continue.
func (s *Sim) Hoist(op int32) bool {
	if op < 0 || int(op) >= len(s.done) || s.done[op] || s.batchLeft != nil {
		return false
	}
	p := s.m.OpPartner[op]
	if p < 0 {
		return false
	}
	r, q := s.m.OpRank[op], s.m.OpRank[p]
	if r == q {
		return false
	}
	if hp, posted := s.Head(int(q)); hp != p || !posted {
		return false
	}
	g := s.gap[op]
	if h := s.headOp(int(r)); h >= 0 && s.gap[h] < g {
		g = s.gap[h]
	}
	if g > s.host[r] {
		return false
	}
	if len(s.gap) > 0 && (len(s.gapBuf) == 0 || &s.gap[0] != &s.gapBuf[0]) {
		s.gapBuf = append(s.gapBuf[:0], s.gap...) // the model's: copied before the first change
		s.gap = s.gapBuf
	}
	s.gap[op] = g
	if s.plain {
		// op completes before the head of its stream: from here on the
		// general process, which keeps the order itself.
		for r := range s.m.Ranks() {
			s.plainOrder(r)
		}
		s.plain = false
	}
	s.complete(op, p)
	s.push(r)
	s.push(q)
	return true
}

// Wait says what a stuck rank waits for.
type Wait struct {
	Rank int
	// Op is the posted head of the rank's comm stream it waits on, or -1 when
	// the rank waits in its host (then Host and On say where and on what).
	Op int32
	// Host is the index (on the rank) of the host step the host is blocked
	// at, or HostLen when it ran every host step.
	Host int
	// On is what the blocked host step waits for (meaningful when Host < HostLen).
	On Event
	// Peer is the rank waited for, or -1 when there is none (an unmatched op).
	Peer int
}

// WaitOf says what rank r waits for in the current state (meaningful when r
// has unfinished work and Run is stuck).
func (s *Sim) WaitOf(r int) Wait {
	w := Wait{Rank: r, Op: -1, Host: int(s.host[r]), Peer: -1}
	if w.Host < s.m.HostLen(r) {
		w.On = s.blocked[r]
	}
	if op, posted := s.Head(r); op >= 0 && posted {
		w.Op = op
		if p := s.m.OpPartner[op]; p >= 0 {
			w.Peer = int(s.m.OpRank[p])
		}
		return w
	}
	if w.Host < s.m.HostLen(r) {
		if w.On.Rank == OpEvent {
			if q := s.m.OpRank[w.On.Index]; int(q) != r {
				w.Peer = int(q) // another rank's op (a tie's exchange): that rank's stream
			} else if p := s.m.OpPartner[w.On.Index]; p >= 0 {
				w.Peer = int(s.m.OpRank[p])
			}
		} else {
			w.Peer = int(w.On.Rank)
		}
	}
	return w
}

// Unfinished reports whether rank r has host steps left or unfinished ops.
func (s *Sim) Unfinished(r int) bool {
	return s.host[r] < s.m.HostOff[r+1]-s.m.HostOff[r] || s.nDone[r] < s.m.OpOff[r+1]-s.m.OpOff[r]
}

// Stuck returns, for a stuck simulation, a cycle of ranks each waiting for
// the next (the last waits for the first), starting at the cycle's lowest
// rank, and true. When the waits form no cycle (a chain ending at an
// unmatched op or a finished rank) it returns that chain, starting at the
// lowest stuck rank, and false. It returns nil when nothing is stuck.
func (s *Sim) Stuck() ([]Wait, bool) {
	n := s.m.Ranks()
	color := make([]int32, n) // 0 unvisited, else 1 + the start of the walk that visited it
	var firstChain []Wait
	for start := range n {
		if color[start] != 0 || !s.Unfinished(start) {
			continue
		}
		var path []Wait
		r := start
		for {
			if color[r] != 0 {
				if color[r] != int32(start)+1 {
					break // joins an earlier walk: no new cycle here
				}
				// cycle: from r's position in path to the end
				i := 0
				for path[i].Rank != r {
					i++
				}
				return rotateLowest(path[i:]), true
			}
			color[r] = int32(start) + 1
			w := s.WaitOf(r)
			path = append(path, w)
			if w.Peer < 0 || !s.Unfinished(w.Peer) {
				break
			}
			r = w.Peer
		}
		if firstChain == nil {
			firstChain = path
		}
	}
	return firstChain, false
}

func rotateLowest(c []Wait) []Wait {
	lo := 0
	for i := range c {
		if c[i].Rank < c[lo].Rank {
			lo = i
		}
	}
	out := make([]Wait, 0, len(c))
	out = append(out, c[lo:]...)
	return append(out, c[:lo]...)
}
