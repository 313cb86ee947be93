package main

import (
	"io"
	"strings"
	"testing"
)

// TestTowerTrainsAsSequential: every ownership mode and tower kind trains
// to the sequential run's losses and parameters (run's -check), and the
// flags' bad values are refused.
func TestTowerTrainsAsSequential(t *testing.T) {
	for _, owners := range []string{"min", "full"} {
		for _, tower := range []string{"owner", "first", "frozen", "none"} {
			var out strings.Builder
			if err := run(&out, owners, tower, 3, true); err != nil {
				t.Errorf("-owners %s -tower %s: %v", owners, tower, err)
				continue
			}
			if !strings.Contains(out.String(), "check: equal to sequential training") {
				t.Errorf("-owners %s -tower %s: no check line in\n%s", owners, tower, out.String())
			}
		}
	}
	for _, tc := range []struct {
		owners, tower string
		iters         int
		want          string
	}{
		{"all", "owner", 1, "-owners"}, {"min", "vision", 1, "-tower"}, {"min", "owner", 0, "-iters"},
	} {
		if err := run(io.Discard, tc.owners, tc.tower, tc.iters, false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%s, %s, %d) = %v, want an error naming %s", tc.owners, tc.tower, tc.iters, err, tc.want)
		}
	}
}
