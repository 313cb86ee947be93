package swap

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"gorgonia.org/tensor"
)

// Tier moves saved activations out of the working set and back: to host
// memory (NewHost) or to files (NewFile). Offload copies on a goroutine of
// its own and returns at once; Wait and Load wait for that copy. A Tier also
// keeps the accounting of resident and offloaded bytes (Stats). All methods
// are safe for concurrent use.
type Tier struct {
	m    medium
	dir  string // the file tier's own directory, "" for host
	busy sync.WaitGroup

	mu     sync.Mutex
	closed bool
	nextID uint64
	live   map[*Handle]struct{} // handles not yet loaded
	acct   account
}

// NewHost returns a tier that keeps offloaded tensors in host memory: the
// copy goes into buffers the tier allocates and owns, and the tier keeps no
// reference to the offloaded tensors once the copy is done, so they leave
// the working set as soon as their other users drop them. Load hands the
// buffers to the rebuilt tensors without copying them again.
func NewHost() *Tier { return newTier(newHostMedium(), "") }

// NewFile returns a tier that writes each offload to a file in a new
// directory under dir (which must exist and be writable) and reads it back
// on Load, after checking the file's header and checksums (see the package
// documentation): a damaged or exchanged file fails the Load, naming the
// chunk and the file. Load removes the file; Close removes the directory
// and whatever is left in it. NewFile also removes the ppgen-swap-*
// directories under dir of tiers whose processes died without Close. The
// files go through the operating system's page cache, so the memory they
// free depends on the kernel writing them back.
func NewFile(dir string) (*Tier, error) {
	f, err := newFileMedium(dir)
	if err != nil {
		return nil, err
	}
	return newTier(f, f.dir), nil
}

func newTier(m medium, dir string) *Tier {
	return &Tier{m: m, dir: dir, live: make(map[*Handle]struct{})}
}

// String names the tier ("host tier", "file tier under DIR").
func (t *Tier) String() string {
	if t == nil {
		return "nil swap tier"
	}
	return t.m.String()
}

// Dir returns the directory a file tier writes to (a new directory under
// the one given to NewFile), or "" for a host tier.
func (t *Tier) Dir() string {
	if t == nil {
		return ""
	}
	return t.dir
}

// state is where a Handle is in its life.
type state uint8

const (
	offloading state = iota // the copy is running
	out                     // the copy is done; the data is in the tier
	failed                  // the copy failed; Load reports it
	loading                 // a Load is running
	released                // loaded (or its failure reported): the handle is spent
	dropped                 // the tier closed before it was loaded
)

// Handle stands for the tensors of one Offload until Load returns them.
type Handle struct {
	tier  *Tier
	id    uint64
	tag   string
	plan  plan
	done  chan struct{} // closed when the copy has ended
	err   error         // the copy's error, set before done is closed
	state state         // under tier.mu
	out   bool          // counted as offloaded (under tier.mu): see Stats
}

// Bytes returns the number of bytes the offload moves: the data of its
// distinct tensors.
func (h *Handle) Bytes() int64 {
	if h == nil {
		return 0
	}
	return h.plan.bytes
}

// Tag returns the label given to Offload (or "offload #N" if it was empty).
func (h *Handle) Tag() string {
	if h == nil {
		return ""
	}
	return h.tag
}

// Offload starts moving ts out of the working set and returns a handle for
// them at once; the copy runs on a goroutine. The tensors must be float32
// or float64, not masked, and must not change until Wait or Load on the
// handle has returned (the copy reads them). A tensor listed twice is moved
// once and Load returns it twice as one tensor; nil entries stay nil. Once
// the copy is done the tier holds no reference to ts. tag labels the
// offload in errors, e.g. "stage 2 forward #5". A tensor that cannot be
// swapped (its dtype, a masked tensor) makes Offload fail at once, with
// nothing started; errors of the copy itself are reported by Wait and Load.
func (t *Tier) Offload(ts []*tensor.Dense, tag string) (*Handle, error) {
	if t == nil {
		return nil, fmt.Errorf("swap: Offload %s: nil *Tier", tag)
	}
	p, src, err := planOf(ts)
	if err != nil {
		return nil, fmt.Errorf("swap: %s: offload %s: %w", t.m, tagOr(tag, "of tensors"), err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("swap: %s: offload %s: %w", t.m, tagOr(tag, "of tensors"), ErrClosed)
	}
	t.nextID++
	h := &Handle{tier: t, id: t.nextID, tag: tagOr(tag, fmt.Sprintf("offload #%d", t.nextID)), plan: p, done: make(chan struct{}), state: offloading}
	t.live[h] = struct{}{}
	t.acct.pending++
	t.busy.Add(1)
	t.mu.Unlock()
	go t.copyOut(h, src)
	return h, nil
}

func tagOr(tag, alt string) string {
	if tag == "" {
		return alt
	}
	return tag
}

// copyOut runs on the offload's goroutine. src is the only reference it
// keeps to the tensors; it is dropped when the copy ends.
func (t *Tier) copyOut(h *Handle, src []*tensor.Dense) {
	defer t.busy.Done()
	bufs := make([][]byte, len(src))
	for i, s := range src {
		bufs[i] = dataBytes(s, h.plan.metas[i].n)
	}
	err := t.m.put(h.id, h.tag, h.plan.metas, bufs)
	clear(src)
	clear(bufs)
	t.mu.Lock()
	t.acct.pending--
	if err != nil {
		h.err = fmt.Errorf("swap: %s: offload of %s (%d bytes in %d tensors): %w", t.m, h.tag, h.plan.bytes, len(h.plan.metas), err)
		h.state = failed
		t.acct.failures++
	} else {
		h.state = out
	}
	t.mu.Unlock()
	close(h.done)
}

// ErrClosed is the error of calls on a closed tier.
var ErrClosed = errors.New("the tier is closed")

// own checks that h is a live handle of t and returns its state.
func (t *Tier) own(op string, h *Handle) error {
	switch {
	case t == nil:
		return fmt.Errorf("swap: %s: nil *Tier", op)
	case h == nil:
		return fmt.Errorf("swap: %s: %s: nil handle", t.m, op)
	case h.tier == nil || h.done == nil:
		return fmt.Errorf("swap: %s: %s: unknown handle (not returned by Offload)", t.m, op)
	case h.tier != t:
		return fmt.Errorf("swap: %s: %s %s: the handle belongs to another tier (%s)", t.m, op, h.tag, h.tier.m)
	}
	return nil
}

// spent returns the error for a call on h in state s, or nil if h can be
// waited for or loaded. Called under t.mu.
func (t *Tier) spent(op string, h *Handle) error {
	switch h.state {
	case loading:
		return fmt.Errorf("swap: %s: %s %s: a Load of it is running", t.m, op, h.tag)
	case released:
		return fmt.Errorf("swap: %s: %s %s: already loaded (a handle is loaded once)", t.m, op, h.tag)
	case dropped:
		return fmt.Errorf("swap: %s: %s %s: %w before it was loaded; its data is dropped", t.m, op, h.tag, ErrClosed)
	}
	return nil
}

// Wait blocks until h's copy out has ended and returns its error. After a
// nil error the tensors are out of the working set (as far as the tier is
// concerned: it holds no reference to them). Wait does not consume the
// handle; Load still has to bring the data back.
func (t *Tier) Wait(h *Handle) error {
	if err := t.own("Wait", h); err != nil {
		return err
	}
	t.mu.Lock()
	err := t.spent("Wait", h)
	t.mu.Unlock()
	if err != nil {
		return err
	}
	<-h.done
	if h.err == nil {
		t.mu.Lock()
		t.countOut(h)
		t.mu.Unlock()
	}
	return h.err
}

// countOut counts h's bytes as offloaded, once: when the schedule first
// sees its copy end (Wait, or Load without a Wait). Counting there rather
// than when the copy goroutine finishes makes the resident figures a
// function of the program order alone, as the verifier's swap bound is, and
// the same on every run. Called under t.mu.
func (t *Tier) countOut(h *Handle) {
	if !h.out {
		h.out = true
		t.acct.offloaded(h.plan.bytes)
	}
}

// Load waits for h's copy out, if it is still running, then brings the
// tensors back and returns them in the order given to Offload, with equal
// shapes, dtypes and bit-identical values. Load itself is synchronous: when
// it returns the data is in the working set again. It consumes the handle:
// the tier forgets the data (the file tier removes its file), and a second
// Load is an error. If the copy out failed, Load returns that error.
func (t *Tier) Load(h *Handle) ([]*tensor.Dense, error) {
	if err := t.own("Load", h); err != nil {
		return nil, err
	}
	t.mu.Lock()
	if err := t.spent("Load", h); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("swap: %s: Load %s: %w", t.m, h.tag, ErrClosed)
	}
	h.state = loading
	t.busy.Add(1)
	t.mu.Unlock()
	defer t.busy.Done()

	<-h.done
	if h.err != nil {
		t.finish(h, false)
		return nil, h.err
	}
	bufs, err := t.m.get(h.id, h.tag, h.plan.metas)
	if err != nil {
		t.finish(h, true)
		return nil, fmt.Errorf("swap: %s: load of %s (%d bytes in %d tensors): %w", t.m, h.tag, h.plan.bytes, len(h.plan.metas), err)
	}
	distinct := make([]*tensor.Dense, len(bufs))
	for i, b := range bufs {
		distinct[i] = build(h.plan.metas[i], b)
	}
	outs := make([]*tensor.Dense, len(h.plan.index))
	for i, k := range h.plan.index {
		if k >= 0 {
			outs[i] = distinct[k]
		}
	}
	t.mu.Lock()
	t.countOut(h)
	t.acct.loaded(h.plan.bytes)
	t.mu.Unlock()
	t.finish(h, false)
	return outs, nil
}

// finish marks h spent. lost says its data left the tier without a load
// (a failed read): it no longer counts as offloaded.
func (t *Tier) finish(h *Handle, lost bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h.state = released
	delete(t.live, h)
	if lost && h.out {
		t.acct.lost(h.plan.bytes)
	}
}

// Close waits for the copies and loads that are running, drops the data of
// every handle not yet loaded (the file tier removes its directory) and
// makes further calls fail with ErrClosed. It returns an error if any
// offloaded data was never loaded, naming the handles, or if the cleanup
// failed. Close can be called more than once; later calls return nil.
func (t *Tier) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	t.busy.Wait()

	t.mu.Lock()
	var tags []string
	var errs []error
	for h := range t.live {
		if h.state == out && h.out {
			t.acct.lost(h.plan.bytes)
		}
		h.state = dropped
		tags = append(tags, h.tag)
		if err := t.m.drop(h.id); err != nil {
			errs = append(errs, err)
		}
	}
	clear(t.live)
	t.mu.Unlock()
	if err := t.m.close(); err != nil {
		errs = append(errs, err)
	}
	if len(tags) > 0 {
		errs = append([]error{fmt.Errorf("%d offloaded chunk(s) were never loaded; their data is dropped: %s", len(tags), list(tags, 5))}, errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("swap: close %s: %w", t.m, err)
	}
	return nil
}

// list joins up to n of xs, sorted, and says how many more there are.
func list(xs []string, n int) string {
	slices.Sort(xs)
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(xs[:n], ", "), len(xs)-n)
}
