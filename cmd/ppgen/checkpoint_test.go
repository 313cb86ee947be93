package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/checkpoint"
)

// writeTestCheckpoint saves a checkpoint of 8 layers (a 2×2 weight each)
// under P=4, DP=1 in dir, and returns its parameters; with tower, rank 0's
// shard holds a tower's too (checkpoint.TowerLayer), returned last.
func writeTestCheckpoint(t *testing.T, dir string, tower bool) []checkpoint.Param {
	t.Helper()
	l := checkpoint.Layout{Schedule: "1f1b", Ranks: 4, DP: 1, Stages: 4, RankOf: []int{0, 1, 2, 3}, Layers: [][2]int{{0, 2}, {2, 4}, {4, 6}, {6, 8}}, Tower: tower}
	var towerParams []checkpoint.Param
	var all []checkpoint.Param
	for r := range 4 {
		var ps []checkpoint.Param
		for layer := 2 * r; layer < 2*r+2; layer++ {
			v := float64(layer)
			ps = append(ps, checkpoint.Param{Layer: layer, Name: "0.weight",
				Value:   checkpoint.Tensor{Shape: []int{2, 2}, F64: []float64{v, v + 0.25, v + 0.5, v + 0.75}},
				State:   []checkpoint.NamedTensor{{Name: "m", Tensor: checkpoint.Tensor{Shape: []int{2, 2}, F64: []float64{-v, 0, 0, 1}}}},
				Scalars: map[string]float64{"t": 3}})
		}
		all = append(all, ps...)
		if r == 0 && tower {
			towerParams = []checkpoint.Param{{Layer: checkpoint.TowerLayer, Name: "0.weight",
				Value:   checkpoint.Tensor{Shape: []int{2}, F64: []float64{-1, -2}},
				State:   []checkpoint.NamedTensor{{Name: "m", Tensor: checkpoint.Tensor{Shape: []int{2}, F64: []float64{0.5, 0.25}}}},
				Scalars: map[string]float64{"t": 3}}}
			ps = append(ps, towerParams...)
		}
		if err := checkpoint.WriteShard(dir, 1, r, &checkpoint.Shard{Params: ps}); err != nil {
			t.Fatal(err)
		}
	}
	m := checkpoint.Manifest{Step: 42, Generation: 1, Layout: l, State: map[string]json.RawMessage{"lr": json.RawMessage(`{"step":42}`)}}
	if err := checkpoint.Commit(dir, m); err != nil {
		t.Fatal(err)
	}
	return append(all, towerParams...)
}

func TestCheckpointInspectConvert(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.Mkdir(in, 0o777); err != nil {
		t.Fatal(err)
	}
	want := writeTestCheckpoint(t, in, false)
	ppgen := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := run(args, &o, &e)
		return o.String(), e.String(), code
	}
	stdout, stderr, code := ppgen("checkpoint", "inspect", in)
	if code != 0 {
		t.Fatalf("inspect: exit %d, %s", code, stderr)
	}
	for _, s := range []string{"step 42", "layout: 1f1b P=4 DP=1 stages [0,2) [2,4) [4,6) [6,8)", "state: lr", "shard-00003.g1.bin", "6-7", "layers 0-7 in 4 shards", "every checksum verified"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("inspect's output lacks %q:\n%s", s, stdout)
		}
	}

	stdout, stderr, code = ppgen("checkpoint", "convert", "-in", in, "-out", out, "-partition", "0,3,8", "-dp", "2", "-fsdp")
	if code != 0 {
		t.Fatalf("convert: exit %d, %s", code, stderr)
	}
	if !strings.Contains(stdout, "4 shards") {
		t.Errorf("convert's output: %s", stdout)
	}
	c, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Manifest.Step != 42 || c.Manifest.Layout.Ranks != 2 || !c.Manifest.Layout.FSDP || len(c.Manifest.Shards[1].Flats) != 1 {
		t.Fatalf("converted manifest: %+v", c.Manifest)
	}
	got, err := c.Layers([]int{0, 1, 2, 3, 4, 5, 6, 7}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Layer != want[i].Layer || !slices.Equal(got[i].Value.F64, want[i].Value.F64) || !slices.Equal(got[i].State[0].Tensor.F64, want[i].State[0].Tensor.F64) || got[i].Scalars["t"] != 3 {
			t.Fatalf("parameter %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, stderr, code = ppgen("checkpoint", "convert", "-in", in, "-out", out, "-partition", "0,3,8"); code != 2 || !strings.Contains(stderr, "already holds a checkpoint") {
		t.Errorf("convert over a checkpoint: exit %d, %s", code, stderr)
	}
	if _, stderr, code = ppgen("checkpoint", "convert", "-in", in, "-out", out+"2", "-partition", "0,3,9"); code != 2 || !strings.Contains(stderr, "holds 8 layers") {
		t.Errorf("convert with a partition past the layers: exit %d, %s", code, stderr)
	}

	// A flipped byte: inspect still prints the table, then exits 2 naming
	// the file.
	path := filepath.Join(in, checkpoint.ShardFile(1, 2))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-20] ^= 1
	if err := os.WriteFile(path, b, 0o666); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = ppgen("checkpoint", "inspect", in)
	if code != 2 || !strings.Contains(stderr, "shard-00002.g1.bin") || !strings.Contains(stdout, "BAD:") {
		t.Fatalf("inspect of a corrupt checkpoint: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

func TestCheckpointUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"checkpoint"}, "missing action"},
		{[]string{"checkpoint", "frob"}, "unknown action"},
		{[]string{"checkpoint", "inspect"}, "one checkpoint directory"},
		{[]string{"checkpoint", "convert", "-in", "a"}, "needs -in DIR, -out DIR2 and -partition"},
		{[]string{"checkpoint", "convert", "-in", "a", "-out", "b", "-partition", "1,2"}, "first bound"},
		{[]string{"checkpoint", "convert", "-in", "a", "-out", "b", "-partition", "0,2,2"}, "increasing"},
		{[]string{"checkpoint", "inspect", "no-such-dir"}, "no such file"},
	} {
		var o, e bytes.Buffer
		if code := run(tc.args, &o, &e); code != 2 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("ppgen %v: exit %d, stderr %q; want 2 and %q", tc.args, code, e.String(), tc.want)
		}
	}
}

// TestCheckpointTower: inspect shows a tower (checkpoint.TowerLayer) as
// "tower" in its shard's row, and convert carries it, bit for bit, to
// world rank 0's shard of the new layout, plain or FSDP.
func TestCheckpointTower(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.Mkdir(in, 0o777); err != nil {
		t.Fatal(err)
	}
	want := writeTestCheckpoint(t, in, true)
	var o, e bytes.Buffer
	if code := run([]string{"checkpoint", "inspect", in}, &o, &e); code != 0 {
		t.Fatalf("inspect: exit %d, %s", code, e.String())
	}
	for _, s := range []string{"stages [0,2) [2,4) [4,6) [6,8) tower", "0-1 tower", "layers 0-7 and the tower in 4 shards"} {
		if !strings.Contains(o.String(), s) {
			t.Errorf("inspect's output lacks %q:\n%s", s, o.String())
		}
	}
	for i, fsdp := range []bool{false, true} {
		out := filepath.Join(dir, fmt.Sprint("out", i))
		args := []string{"checkpoint", "convert", "-in", in, "-out", out, "-partition", "0,3,8", "-dp", "2"}
		if fsdp {
			args = append(args, "-fsdp")
		}
		o.Reset()
		if code := run(args, &o, &e); code != 0 || !strings.Contains(o.String(), "8 layers and the tower in 4 shards") {
			t.Fatalf("convert: exit %d, %s%s", code, o.String(), e.String())
		}
		c, err := checkpoint.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Manifest.Layout.Tower || !slices.Contains(c.Manifest.Shards[0].Layers, checkpoint.TowerLayer) {
			t.Fatalf("converted manifest: layout %v, shard 0 holds layers %v", c.Manifest.Layout, c.Manifest.Shards[0].Layers)
		}
		got, err := c.Layers([]int{0, 1, 2, 3, 4, 5, 6, 7, checkpoint.TowerLayer}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d parameters, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i].Layer != want[i].Layer || !slices.Equal(got[i].Value.F64, want[i].Value.F64) || !slices.Equal(got[i].State[0].Tensor.F64, want[i].State[0].Tensor.F64) {
				t.Fatalf("parameter %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	}
}
