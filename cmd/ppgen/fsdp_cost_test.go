package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestFSDPCollectiveCost: -cost param=SIZE,bw=RATE,dp=N charges each UNSHARD
// and REDUCE_GRAD the ring cost (N-1)·comm + (N-1)/N·SIZE/RATE, so it
// simulates like the explicit unshard= and reduce= of that figure, grows
// with the DP group, and -fsdp-prefetch hides part of it.
func TestFSDPCollectiveCost(t *testing.T) {
	sched := []string{"sim", "-schedule", "interleaved", "-ranks", "2", "-virtual", "2", "-micro", "4", "-fsdp", "2"}
	ms := func(extra ...string) float64 {
		out := cliMust(t, append(sched[:len(sched):len(sched)], extra...)...)
		_, rest, _ := strings.Cut(out, "makespan ")
		v, _, _ := strings.Cut(rest, " ")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("no makespan in:\n%s", out)
		}
		return f
	}
	// dp=4, param=2, bw=1: 3/4·2/1 = 1.5 per collective.
	derived := ms("-cost", "param=2,bw=1,dp=4")
	explicit := ms("-cost", "unshard=1.5,reduce=1.5")
	if derived != explicit {
		t.Errorf("param=2,bw=1,dp=4: makespan %v; the explicit unshard=1.5,reduce=1.5 gives %v", derived, explicit)
	}
	if plain := ms(); derived <= plain {
		t.Errorf("param=2,bw=1,dp=4: makespan %v, not above the free collectives' %v", derived, plain)
	}
	if two := ms("-cost", "param=2,bw=1,dp=2"); two >= derived {
		t.Errorf("dp=2 (0.5·2/1 = 1 per collective): makespan %v, not below dp=4's %v", two, derived)
	}
	if pre := ms("-cost", "param=2,bw=1,dp=4", "-fsdp-prefetch", "1"); pre >= derived {
		t.Errorf("-fsdp-prefetch 1: makespan %v, not below %v", pre, derived)
	}
	t.Logf("makespans: free %v, dp=4 %v, prefetched %v", ms(), derived, ms("-cost", "param=2,bw=1,dp=4", "-fsdp-prefetch", "1"))
}
