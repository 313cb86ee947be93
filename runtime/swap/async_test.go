package swap

import (
	"errors"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// gateMedium is a host medium whose put waits for the test to open a gate
// and then fails with err (if set): it shows what the tier does while a copy
// is running and when it fails.
type gateMedium struct {
	*hostMedium
	started chan struct{}
	gate    chan struct{}
	err     error
}

func (g *gateMedium) put(id uint64, tag string, metas []meta, src [][]byte) error {
	g.started <- struct{}{}
	<-g.gate
	if g.err != nil {
		return g.err
	}
	return g.hostMedium.put(id, tag, metas, src)
}

func newGate(err error) (*Tier, *gateMedium) {
	g := &gateMedium{hostMedium: newHostMedium(), started: make(chan struct{}, 8), gate: make(chan struct{}), err: err}
	return newTier(g, ""), g
}

func vec(v ...float64) *tensor.Dense {
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))
}

// TestAsync: Offload returns while the copy is still running; until it
// ends the bytes count as resident and pending, and Load waits for it.
func TestAsync(t *testing.T) {
	tier, g := newGate(nil)
	x := vec(1, 2, 3, 4)
	tier.Track(32)
	h, err := tier.Offload([]*tensor.Dense{x}, "stage 1 forward #2")
	if err != nil {
		t.Fatal(err)
	}
	<-g.started // the copy is running, blocked at the gate: Offload returned anyway
	if st := tier.Stats(); st.Pending != 1 || st.ResidentBytes != 32 || st.OffloadedBytes != 0 {
		t.Errorf("during the copy: %+v", st)
	}
	type res struct {
		ts  []*tensor.Dense
		err error
	}
	done := make(chan res)
	go func() {
		ts, err := tier.Load(h)
		done <- res{ts, err}
	}()
	close(g.gate)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := r.ts[0].Float64s(); len(got) != 4 || got[3] != 4 {
		t.Errorf("loaded %v", got)
	}
	st := tier.Stats()
	if st.Pending != 0 || st.ResidentBytes != 32 || st.PeakResidentBytes != 32 || st.Offloads != 1 || st.Loads != 1 {
		t.Errorf("after Load: %+v", st)
	}
	if err := tier.Close(); err != nil {
		t.Error(err)
	}
}

// TestCopyError: a failed copy is reported by Wait and Load on the handle,
// with the tier, the tag and the byte count; the bytes never count as out.
func TestCopyError(t *testing.T) {
	tier, g := newGate(errors.New("disk on fire"))
	close(g.gate)
	tier.Track(16)
	h, err := tier.Offload([]*tensor.Dense{vec(1, 2)}, "stage 3 forward #5")
	if err != nil {
		t.Fatal(err)
	}
	werr := tier.Wait(h)
	for _, want := range []string{"host tier", "stage 3 forward #5", "16 bytes", "disk on fire"} {
		if werr == nil || !strings.Contains(werr.Error(), want) {
			t.Errorf("Wait error %v, want it to mention %q", werr, want)
		}
	}
	if _, err := tier.Load(h); err == nil || err.Error() != werr.Error() {
		t.Errorf("Load error %v, want %v", err, werr)
	}
	if _, err := tier.Load(h); err == nil || !strings.Contains(err.Error(), "already loaded") {
		t.Errorf("second Load: %v", err)
	}
	st := tier.Stats()
	if st.Failures != 1 || st.Offloads != 0 || st.OffloadedBytes != 0 || st.ResidentBytes != 16 {
		t.Errorf("stats: %+v", st)
	}
	if err := tier.Close(); err != nil {
		t.Errorf("Close after the failure was reported: %v", err)
	}
}

// TestClosePending: Close waits for a running copy, drops the data of the
// handles never loaded and says which; later calls fail with ErrClosed.
func TestClosePending(t *testing.T) {
	tier, g := newGate(nil)
	h1, err := tier.Offload([]*tensor.Dense{vec(1)}, "chunk A")
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	closed := make(chan error)
	go func() { closed <- tier.Close() }()
	close(g.gate) // let the copy end; Close waits for it
	err = <-closed
	if err == nil || !strings.Contains(err.Error(), "1 offloaded chunk(s) were never loaded") || !strings.Contains(err.Error(), "chunk A") {
		t.Errorf("Close with a pending offload: %v", err)
	}
	if _, err := tier.Load(h1); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Close: %v, want ErrClosed", err)
	}
	if err := tier.Wait(h1); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after Close: %v, want ErrClosed", err)
	}
	if _, err := tier.Offload([]*tensor.Dense{vec(1)}, "late"); !errors.Is(err, ErrClosed) {
		t.Errorf("Offload after Close: %v, want ErrClosed", err)
	}
	if err := tier.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if st := tier.Stats(); st.OffloadedBytes != 0 || st.OffloadedChunks != 0 {
		t.Errorf("after Close: %+v", st)
	}
}
