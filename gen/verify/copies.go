package verify

import "github.com/ppgen/ppgen/gen/internal/strict"

// copiesModel returns m with the waits of the model copies' gradient
// exchange (ir.Program.Copies > 1, dualpipe): at OPT_STEP runtime/pipe
// first lets its comm stream drain, then sums each stage's gradients with
// its twins' (stage s ± S/Copies) on the ranks that hold them, a
// rendezvous with each of those ranks (Exec.syncCopies). So a rank's
// OPT_STEP passes only when every twin rank's host has run the steps
// before its own OPT_STEP and both comm streams have drained up to them:
// an OPT_STEP placed before a transfer a twin still waits for is then a
// cycle the strict model finds, as the runtime would hang on it. A rank
// whose twins all live on it waits for nothing more.
func (c *checker) copiesModel(m *strict.Model) *strict.Model {
	if c.p.Copies <= 1 || c.forwardOnly {
		return m
	}
	per := c.S / c.p.Copies
	twins := make([]map[int]bool, c.P) // rank -> the other ranks it exchanges with
	for s, r := range c.rankOf {
		for k := 1; k < c.p.Copies; k++ {
			if q := c.rankOf[(s+k*per)%c.S]; q != r {
				if twins[r] == nil {
					twins[r] = map[int]bool{}
				}
				twins[r][q], twins[q] = true, addRank(twins[q], r)
			}
		}
	}
	at := make([]hostPos, c.P)
	for r := range c.P {
		at[r] = hostPos{host: -1, lastOp: -1}
		if o := c.optAt[r]; o >= 0 {
			at[r] = c.hostPositions(m, r, []int{int(o)})[0]
		}
	}
	extra := map[int32][]strict.Event{}
	for r, peers := range twins {
		me := at[r]
		if me.host < 0 {
			continue // no OPT_STEP here: verify's order checks say so
		}
		var ws []strict.Event
		if me.lastOp >= 0 {
			ws = append(ws, strict.OpDone(me.lastOp))
		}
		for q := range c.P { // in rank order: the model's waits are deterministic
			them := at[q]
			if !peers[q] || them.host < 0 {
				continue
			}
			if them.host > 0 {
				ws = append(ws, strict.HostDone(q, int(them.host-1)))
			}
			if them.lastOp >= 0 {
				ws = append(ws, strict.OpDone(them.lastOp))
			}
		}
		extra[m.HostOff[r]+me.host] = ws
	}
	return withWaits(m, extra)
}

// addRank returns set with r added, making the set when nil.
func addRank(set map[int]bool, r int) map[int]bool {
	if set == nil {
		set = map[int]bool{}
	}
	set[r] = true
	return set
}
