package pipe

import "testing"

// TestMicrosOfRecompute: a RECOMPUTE op is a Forward call of its chunk, so
// the calls after it keep their micro-batches in a Timeline's trace.
func TestMicrosOfRecompute(t *testing.T) {
	ops := [][]Op{{
		computeOp(OpForward, 0, 0, 0, -1), computeOp(OpForward, 0, 1, 1, -1),
		{Kind: OpRecompute, Stage: 0, Micro: 0, Peer: -1, Slot: 0, Src: -1}, computeOp(OpBackward, 0, 0, 0, -1),
		computeOp(OpForward, 0, 2, 0, -1),
	}}
	m := microsOf(ops)
	for seq, want := range []int{0, 1, 0, 2} {
		if got, ok := m[microKey{0, 0, 'F', seq}]; !ok || got != want {
			t.Errorf("F call %d: micro %d (%v); want %d", seq, got, ok, want)
		}
	}
}
