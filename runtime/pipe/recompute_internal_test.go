package pipe

import "testing"

// TestMicrosOfRecompute: a RECOMPUTE op is an R call of its chunk, counted
// apart from the F calls, so that both keep their micro-batches in a
// Timeline's trace.
func TestMicrosOfRecompute(t *testing.T) {
	ops := [][]Op{{
		computeOp(OpForward, 0, 0, 0, -1), computeOp(OpForward, 0, 1, 1, -1),
		{Kind: OpRecompute, Stage: 0, Micro: 0, Peer: -1, Slot: 0, Src: -1}, computeOp(OpBackward, 0, 0, 0, -1),
		computeOp(OpForward, 0, 2, 0, -1),
		{Kind: OpRecompute, Stage: 0, Micro: 1, Peer: -1, Slot: 1, Src: -1},
	}}
	m := microsOf(ops)
	for _, tc := range []struct {
		kind byte
		seq  int
		want int
	}{{'F', 0, 0}, {'F', 1, 1}, {'F', 2, 2}, {'R', 0, 0}, {'R', 1, 1}} {
		if got, ok := m[microKey{0, 0, tc.kind, tc.seq}]; !ok || got != tc.want {
			t.Errorf("%c call %d: micro %d (%v); want %d", tc.kind, tc.seq, got, ok, tc.want)
		}
	}
}
