package long

import "testing"

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		val  string
		want bool
	}{{"", false}, {"0", false}, {"true", false}, {"1", true}} {
		t.Setenv(Var, c.val)
		if got := Enabled(); got != c.want {
			t.Errorf("%s=%q: Enabled() = %v, want %v", Var, c.val, got, c.want)
		}
	}
}

func TestSkip(t *testing.T) {
	t.Setenv(Var, "")
	ran := false
	t.Run("off", func(t *testing.T) {
		Skip(t, "x")
		ran = true
	})
	if ran {
		t.Error("Skip did not skip with the switch off")
	}
	t.Setenv(Var, "1")
	t.Run("on", func(t *testing.T) {
		Skip(t, "x")
		ran = true
	})
	if !ran {
		t.Error("Skip skipped with the switch on")
	}
}
