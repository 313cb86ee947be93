package transport

import (
	"errors"
	"testing"
	"time"

	"github.com/ppgen/ppgen/abi"
)

// TestBatchFallback: on a transport without its own Batcher, Batch sends
// first and then receives, so two ranks that each send to and receive from
// the other in one batch complete, FIFO per (peer, channel), and the
// received tags and tensors are set.
func TestBatchFallback(t *testing.T) {
	trs := NewInProc(2, InProcTimeout(5*time.Second))
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			other := 1 - r
			ops := []BatchOp{
				{Peer: other, Ch: abi.ActChannel},
				{Peer: other, Ch: abi.ActChannel, Send: true, Tag: Tag{Stage: int32(r), Micro: 0}, T: f64([]int{2}, float64(r), 1)},
				{Peer: other, Ch: abi.ActChannel, Send: true, Tag: Tag{Stage: int32(r), Micro: 1}, T: f64([]int{2}, float64(r), 2)},
				{Peer: other, Ch: abi.ActChannel},
			}
			if err := Batch(trs[r], ops); err != nil {
				errs <- err
				return
			}
			for i, micro := range map[int]int32{0: 0, 3: 1} {
				op := ops[i]
				if op.Tag != (Tag{Stage: int32(other), Micro: micro}) || op.T == nil {
					errs <- errors.New("rank " + string(rune('0'+r)) + ": wrong tag or nil tensor")
					return
				}
				want := f64([]int{2}, float64(other), float64(micro+1))
				if err := sameTensor(op.T, want); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatchNamesFailingOp: a receive that cannot complete names its op.
func TestBatchNamesFailingOp(t *testing.T) {
	trs := NewInProc(2, InProcTimeout(50*time.Millisecond))
	err := Batch(trs[0], []BatchOp{{Peer: 1, Ch: abi.GradChannel}})
	if err == nil || !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if want := "batch op 0 (recv grad from rank 1)"; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("err = %q, want it to start with %q", err, want)
	}
}
