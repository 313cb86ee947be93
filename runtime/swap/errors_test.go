package swap_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/swap"
)

func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one mentioning %q", what, parts)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not mention %q", what, err, p)
		}
	}
}

// TestNewFileErrors: a file tier needs an existing, writable directory; the
// errors name the path.
func TestNewFileErrors(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(base, "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dir string
		want      []string
		skip      bool
	}{
		{"empty", "", []string{"empty directory name"}, false},
		{"missing", filepath.Join(base, "nope"), []string{filepath.Join(base, "nope"), "no such file"}, false},
		{"not a directory", file, []string{file, "not a directory"}, false},
		// root may write anywhere: it gets /proc, where no directory can be made
		{"unwritable", ro, []string{ro, "cannot create a directory under", "permission denied"}, os.Geteuid() == 0},
		{"unwritable as root", "/proc", []string{"cannot create a directory under /proc"}, os.Geteuid() != 0 || !isDir("/proc")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.skip {
				t.Skip("not applicable to this user or system")
			}
			tier, err := swap.NewFile(c.dir)
			if tier != nil {
				t.Errorf("got a tier %v", tier)
			}
			wantErr(t, "NewFile", err, c.want...)
		})
	}
}

// TestFileWriteError: when the tier's directory disappears, the copy fails
// and Load reports it with the tier, the tag, the byte count and the path.
func TestFileWriteError(t *testing.T) {
	tier, err := swap.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(tier.Dir()); err != nil {
		t.Fatal(err)
	}
	h, err := tier.Offload([]*tensor.Dense{tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 2, 3, 4}))}, "stage 0 forward #1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tier.Load(h)
	wantErr(t, "Load", err, "file tier under", "stage 0 forward #1", "16 bytes", tier.Dir())
	if st := tier.Stats(); st.Failures != 1 || st.OffloadedBytes != 0 {
		t.Errorf("stats: %+v", st)
	}
	if err := tier.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestFileReadError: a file that changed behind the tier's back is
// reported, naming it.
func TestFileReadError(t *testing.T) {
	tier, err := swap.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	h, err := tier.Offload([]*tensor.Dense{tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{1, 2, 3}))}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Wait(h); err != nil {
		t.Fatal(err)
	}
	fs := chunkFiles(t, tier.Dir())
	if len(fs) != 1 {
		t.Fatalf("the tier's directory holds %v, want 1 chunk file", fs)
	}
	p := fs[0]
	if err := os.Truncate(p, 5); err != nil {
		t.Fatal(err)
	}
	_, err = tier.Load(h)
	// 61 header bytes (16 fixed, 8 tier, 8 id, 2+1 tag "x", 4 count, 1+1+8
	// for one tensor of one dimension, 8 payload length, 4 checksum), 24 of
	// data, 4 of data checksum.
	wantErr(t, "Load", err, p, "holds 5 bytes, want 89")
	if st := tier.Stats(); st.OffloadedBytes != 0 || st.Loads != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// TestMisuse: bad handles, bad tensors and a nil tier give errors, never
// panics.
func TestMisuse(t *testing.T) {
	x := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))
	for _, tc := range tiers {
		t.Run(tc.name, func(t *testing.T) {
			tier := tc.make(t)
			other := swap.NewHost()
			defer other.Close()
			h, err := tier.Offload([]*tensor.Dense{x}, "mine")
			if err != nil {
				t.Fatal(err)
			}
			oh, err := other.Offload([]*tensor.Dense{x}, "theirs")
			if err != nil {
				t.Fatal(err)
			}
			_, err = tier.Load(nil)
			wantErr(t, "Load(nil)", err, "nil handle")
			_, err = tier.Load(&swap.Handle{})
			wantErr(t, "Load(made-up handle)", err, "unknown handle")
			_, err = tier.Load(oh)
			wantErr(t, "Load(handle of another tier)", err, "another tier")
			wantErr(t, "Wait(nil)", tier.Wait(nil), "nil handle")
			if _, err := tier.Load(h); err != nil {
				t.Fatal(err)
			}
			_, err = tier.Load(h)
			wantErr(t, "second Load", err, "mine", "already loaded")
			wantErr(t, "Wait after Load", tier.Wait(h), "already loaded")
			_, err = tier.Offload([]*tensor.Dense{x, tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2}))}, "ints")
			wantErr(t, "Offload(int tensor)", err, "ints", "tensor 1", "dtype not supported")
			_, err = tier.Offload([]*tensor.Dense{new(tensor.Dense)}, "zero")
			wantErr(t, "Offload(zero Dense)", err, "tensor 0", "no dtype")
			_, err = tier.Offload([]*tensor.Dense{tensor.New(tensor.FromScalar(1.5))}, "scalar")
			wantErr(t, "Offload(scalar)", err, "scalars are not supported")
			if err := tier.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Load(oh); err != nil {
				t.Errorf("the other tier's handle: %v", err)
			}
		})
	}
	var nilTier *swap.Tier
	if _, err := nilTier.Offload(nil, "x"); err == nil {
		t.Error("nil tier Offload: no error")
	}
	if _, err := nilTier.Load(nil); err == nil {
		t.Error("nil tier Load: no error")
	}
	if err := nilTier.Close(); err != nil {
		t.Error(err)
	}
	nilTier.Track(1)
	if st := nilTier.Stats(); st != (swap.Stats{}) {
		t.Errorf("nil tier stats %+v", st)
	}
	if err := swap.NewHost().Close(); errors.Is(err, swap.ErrClosed) {
		t.Error(err)
	}
}

// chunkFiles returns the chunk files in a file tier's directory.
func chunkFiles(t *testing.T, dir string) []string {
	t.Helper()
	fs, err := filepath.Glob(filepath.Join(dir, "*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
