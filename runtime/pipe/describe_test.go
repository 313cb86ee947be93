package pipe_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// TestSpecDescribe: Describe names the schedule, P, V (or S) and M, and is
// always a TCPConfig.Schedule the transport takes (bounded, printable),
// whatever the Spec's name holds.
func TestSpecDescribe(t *testing.T) {
	for _, tc := range []struct {
		spec pipe.Spec
		want string
	}{
		{pipe.Spec{Schedule: "zbv", Ranks: 4, Stages: 8, Micro: 8}, "zbv (P=4, V=2, M=8)"},
		{pipe.Spec{Schedule: "1f1b", Ranks: 4, Stages: 4, Micro: 8, ForwardOnly: true}, "1f1b (P=4, V=1, M=8, forward-only)"},
		{pipe.Spec{Schedule: "imported", Ranks: 2, Stages: 3, Micro: 4}, "imported (P=2, S=3, M=4)"},
		{pipe.Spec{Ranks: 2, Stages: 2, Micro: 2}, "unnamed (P=2, V=1, M=2)"},
		{pipe.Spec{Schedule: "a\x1b[2Jb\n", Ranks: 2, Stages: 2, Micro: 2}, "a?[2Jb? (P=2, V=1, M=2)"},
		{pipe.Spec{Schedule: strings.Repeat("é", 40), Ranks: 2, Stages: 2, Micro: 2}, strings.Repeat("é", 32) + ".. (P=2, V=1, M=2)"},
	} {
		got := tc.spec.Describe()
		if got != tc.want {
			t.Errorf("Describe(%q) = %q, want %q", tc.spec.Schedule, got, tc.want)
		}
		if len(got) > transport.MaxScheduleLen {
			t.Errorf("Describe(%q) has %d bytes, more than %d", tc.spec.Schedule, len(got), transport.MaxScheduleLen)
		}
		tr, err := transport.DialTCP(context.Background(), transport.TCPConfig{Rank: 0, World: 1, Schedule: got})
		if err != nil {
			t.Errorf("a TCPConfig with Schedule %q: %v", got, err)
			continue
		}
		tr.Close()
	}
}
