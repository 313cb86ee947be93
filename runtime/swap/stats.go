package swap

// Stats is a snapshot of a tier's accounting.
//
// Resident bytes are the bytes of saved activations that are in the working
// set: those a wrapper declared with Track (and changed with Resize) and has
// not yet released with Untrack, less those offloaded. An offload counts as
// out from the Wait that sees its copy ended (or the Load, when nothing
// waited) until Load brings it back: while the copy runs the tensors are
// still referenced, and counting at the Wait, the schedule's
// SWAP_WAIT_OFFLOAD, rather than when the copy happens to end makes the
// figures depend on the program alone, the same on every run. A chunk is one tracked saved context. Offloads
// of data that was never tracked are counted as offloaded but never make
// the resident figures negative: track every chunk you offload, or none.
type Stats struct {
	ResidentBytes      int64 // tracked bytes not offloaded
	PeakResidentBytes  int64 // the most ResidentBytes has been (since ResetPeak)
	ResidentChunks     int64 // tracked chunks not offloaded
	PeakResidentChunks int64 // the most ResidentChunks has been (since ResetPeak)
	MaxChunkBytes      int64 // the largest size a tracked chunk has had

	OffloadedBytes     int64 // bytes out now: copies ended, not yet loaded
	PeakOffloadedBytes int64
	OffloadedChunks    int64 // handles whose data is out now

	Pending  int64 // copies out still running
	Offloads int64 // copies out that ended without error
	Loads    int64 // loads that brought data back
	Failures int64 // copies out that failed
	BytesOut int64 // total bytes copied out
	BytesIn  int64 // total bytes loaded back
}

// account is the tier's accounting, under Tier.mu.
type account struct {
	trackedBytes, trackedChunks int64
	outBytes, outChunks         int64
	peakRes, peakResChunks      int64
	peakOut, maxChunk           int64
	pending, offloads, loads    int64
	failures, bytesOut, bytesIn int64
}

func (a *account) resident() (bytes, chunks int64) {
	return max(a.trackedBytes-a.outBytes, 0), max(a.trackedChunks-a.outChunks, 0)
}

// note updates the peaks after a change.
func (a *account) note() {
	b, c := a.resident()
	a.peakRes = max(a.peakRes, b)
	a.peakResChunks = max(a.peakResChunks, c)
	a.peakOut = max(a.peakOut, a.outBytes)
}

func (a *account) offloaded(n int64) {
	a.offloads++
	a.bytesOut += n
	a.outBytes += n
	a.outChunks++
	a.note()
}

func (a *account) loaded(n int64) {
	a.loads++
	a.bytesIn += n
	a.lost(n)
}

// lost removes n bytes of one handle from the offloaded figures.
func (a *account) lost(n int64) {
	a.outBytes -= n
	a.outChunks--
	a.note()
}

// Track records that a saved context of n bytes became resident (a
// stage's Forward returned it): one more resident chunk.
func (t *Tier) Track(n int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acct.trackedBytes += n
	t.acct.trackedChunks++
	t.acct.maxChunk = max(t.acct.maxChunk, n)
	t.acct.note()
}

// Resize records that a tracked saved context changed from old to new
// bytes (a backward released some tensors and kept others).
func (t *Tier) Resize(old, new int64) {
	if t == nil || old == new {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acct.trackedBytes += new - old
	t.acct.maxChunk = max(t.acct.maxChunk, new)
	t.acct.note()
}

// Untrack records that a tracked saved context of n bytes was released
// (its last backward ran): one resident chunk less.
func (t *Tier) Untrack(n int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acct.trackedBytes -= n
	t.acct.trackedChunks--
	t.acct.note()
}

// Stats returns a snapshot of the accounting.
func (t *Tier) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	a := &t.acct
	b, c := a.resident()
	return Stats{
		ResidentBytes: b, PeakResidentBytes: a.peakRes,
		ResidentChunks: c, PeakResidentChunks: a.peakResChunks,
		MaxChunkBytes:  a.maxChunk,
		OffloadedBytes: a.outBytes, PeakOffloadedBytes: a.peakOut, OffloadedChunks: a.outChunks,
		Pending: a.pending, Offloads: a.offloads, Loads: a.loads, Failures: a.failures,
		BytesOut: a.bytesOut, BytesIn: a.bytesIn,
	}
}

// ResidentBytes returns the tracked bytes that are not offloaded.
func (t *Tier) ResidentBytes() int64 { return t.Stats().ResidentBytes }

// PeakResidentBytes returns the most ResidentBytes has been since the
// tier was made or ResetPeak last ran.
func (t *Tier) PeakResidentBytes() int64 { return t.Stats().PeakResidentBytes }

// OffloadedBytes returns the bytes that are out now.
func (t *Tier) OffloadedBytes() int64 { return t.Stats().OffloadedBytes }

// ResetPeak sets the peaks to the current values, to measure one
// iteration, say.
func (t *Tier) ResetPeak() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	a := &t.acct
	a.peakRes, a.peakResChunks = a.resident()
	a.peakOut = a.outBytes
}
