package pipe_test

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
)

func TestFingerprints(t *testing.T) {
	for _, tt := range []struct {
		fps  []string
		want string
	}{
		{nil, ""},
		{[]string{"sha256:aa"}, "sha256:aa"},
		{[]string{"sha256:bb", "sha256:aa"}, "sha256:aa+sha256:bb"},
		{[]string{"sha256:aa", "sha256:bb"}, "sha256:aa+sha256:bb"},
		{[]string{"sha256:bb", "sha256:aa", "sha256:bb"}, "sha256:aa+sha256:bb"},
	} {
		if got := pipe.Fingerprints(tt.fps...); got != tt.want {
			t.Errorf("Fingerprints(%q) = %q, want %q", tt.fps, got, tt.want)
		}
	}
}

// TestNewAcceptsCombinedFingerprint: a transport that checked the
// combination of two programs' fingerprints serves an Exec of either, and
// refuses one of a program outside it.
func TestNewAcceptsCombinedFingerprint(t *testing.T) {
	trs := tcpWorld(t, 2, pipe.Fingerprints("sha256:eval", twoRankSpec.Fingerprint), nil)
	x, err := pipe.New(pipe.Config{Rank: 1, Spec: twoRankSpec, Stages: map[int]pipe.Stage{1: &affine{}}, Loss: mse{}, Data: &data{}, Transport: trs[1]})
	if err != nil {
		t.Fatalf("New under the combined fingerprint: %v", err)
	}
	x.Close()
	eval := twoRankSpec
	eval.Fingerprint = "sha256:eval"
	x, err = pipe.New(pipe.Config{Rank: 1, Spec: eval, Stages: map[int]pipe.Stage{1: &affine{}}, Loss: mse{}, Data: &data{}, Transport: trs[1]})
	if err != nil {
		t.Fatalf("New of the second program under the combined fingerprint: %v", err)
	}
	x.Close()
	other := twoRankSpec
	other.Fingerprint = "sha256:other"
	_, err = pipe.New(pipe.Config{Rank: 1, Spec: other, Stages: map[int]pipe.Stage{1: &affine{}}, Loss: mse{}, Data: &data{}, Transport: trs[1]})
	if err == nil || !strings.Contains(err.Error(), `Spec has "sha256:other"`) {
		t.Fatalf("New of a program outside the combination: err = %v", err)
	}
}
