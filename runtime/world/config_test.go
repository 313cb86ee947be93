package world_test

import (
	"context"
	"errors"
	"flag"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/world"
)

// openConfigs opens a TCP world of len(cfgs) ranks from a launcher's
// environment, rank r with Options.Config cfgs[r] and Size sizes[r], as
// that many processes would, and returns each rank's error of Open (the
// worlds that opened are closed).
func openConfigs(t *testing.T, cfgs []map[string]string, sizes []int) []error {
	port := freePort(t)
	n := len(cfgs)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		env := &launch.Env{Rank: r, World: n, MasterAddr: "127.0.0.1", MasterPort: port, Token: "5ec7e75ec7e75ec7e75ec7e75ec7e75e", Timeout: 10 * time.Second, Source: "torchrun"}
		o := world.Options{Size: sizes[r], Env: env, Fingerprint: "fp", RendezvousTimeout: 10 * time.Second, Config: cfgs[r]}
		wg.Go(func() {
			w, err := world.Open(context.Background(), "tcp", o)
			if err == nil {
				w.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	return errs
}

// TestConfigMismatch: ranks whose run configurations differ (a trainer's
// flags, the job's size, the collectives mode) all fail at Open at once
// with a *world.ConfigError naming the setting and the ranks; equal ones
// open.
func TestConfigMismatch(t *testing.T) {
	base := func() map[string]string { return map[string]string{"-seed": "1", "-dp": "2", "-steps": "10"} }
	with := func(k, v string) map[string]string {
		c := base()
		if v == "" {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		cfgs   []map[string]string
		sizes  []int
		key    string
		ranks  []int
		msg    string
		others []string
	}{
		{name: "equal", cfgs: []map[string]string{base(), base(), base(), base()}, sizes: []int{4, 4, 4, 4}},
		{name: "seed", cfgs: []map[string]string{base(), base(), with("-seed", "2"), base()}, sizes: []int{4, 4, 4, 4},
			key: "-seed", ranks: []int{2}, msg: "rank 2 runs -seed 2, rank 0 -seed 1"},
		{name: "dp-and-size", cfgs: []map[string]string{base(), base(), base(), with("-dp", "4")}, sizes: []int{4, 4, 4, 8},
			key: "-dp", ranks: []int{3}, msg: "rank 3 runs -dp 4, rank 0 -dp 2", others: []string{"size"}},
		{name: "two-ranks", cfgs: []map[string]string{base(), with("-steps", "20"), with("-steps", "30"), base()}, sizes: []int{4, 4, 4, 4},
			key: "-steps", ranks: []int{1, 2}, msg: "rank 1 runs -steps 20, rank 0 -steps 10 (ranks differing from rank 0 in -steps: 1, 2)"},
		{name: "unset", cfgs: []map[string]string{base(), with("-seed", ""), base(), base()}, sizes: []int{4, 4, 4, 4},
			key: "-seed", ranks: []int{1}, msg: "rank 1 runs no -seed, rank 0 -seed 1"},
		{name: "quoted", cfgs: []map[string]string{with("-schedule", "a=1"), with("-schedule", "a=1\nb=2"), with("-schedule", "a=1"), with("-schedule", "a=1")}, sizes: []int{4, 4, 4, 4},
			key: "-schedule", ranks: []int{1}, msg: "rank 1 runs -schedule a=1\nb=2, rank 0 -schedule a=1"},
		{name: "size-only", cfgs: []map[string]string{base(), base(), base(), base()}, sizes: []int{8, 8, 8, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			errs := openConfigs(t, tc.cfgs, tc.sizes)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v: the ranks were left waiting", d)
			}
			for r, err := range errs {
				if tc.name == "size-only" {
					if err == nil || !strings.Contains(err.Error(), "WORLD_SIZE=4 but the job needs 8 ranks") {
						t.Errorf("rank %d: %v; want the size refusal", r, err)
					}
					continue
				}
				if tc.key == "" {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
					continue
				}
				var ce *world.ConfigError
				if !errors.As(err, &ce) || ce.Key != tc.key || !slices.Equal(ce.Ranks, tc.ranks) || !slices.Equal(ce.Others, tc.others) || !errors.Is(err, world.ErrConfigMismatch) {
					t.Fatalf("rank %d: %v; want a ConfigError of %s, ranks %v, others %v", r, err, tc.key, tc.ranks, tc.others)
				}
				if !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("rank %d: %v; want it to say %q", r, err, tc.msg)
				}
			}
			if errs[0] != nil {
				t.Logf("rank 0: %v", errs[0])
			}
		})
	}
}

// TestConfigOptions: a configuration over MaxConfigBytes is refused before
// anything starts; in-process worlds (whose ranks share the Options) open.
func TestConfigOptions(t *testing.T) {
	big := map[string]string{"-x": strings.Repeat("y", world.MaxConfigBytes)}
	if _, err := world.Open(context.Background(), "tcp", world.Options{Env: &launch.Env{World: 2}, Config: big}); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("a configuration of %d bytes: %v; want a refusal", world.MaxConfigBytes, err)
	}
	w, err := world.Open(context.Background(), "inproc", world.Options{Size: 3, Config: map[string]string{"-seed": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// TestFlagConfig: every flag, set or default, keyed "-name", but those
// that may differ.
func TestFlagConfig(t *testing.T) {
	fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
	fs.Uint64("seed", 1, "")
	fs.Int("dp", 1, "")
	fs.Duration("timeout", 0, "")
	if err := fs.Parse([]string{"-dp", "2", "-timeout", "3s"}); err != nil {
		t.Fatal(err)
	}
	got := world.FlagConfig(fs, "timeout")
	if want := map[string]string{"-seed": "1", "-dp": "2"}; !maps.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}
