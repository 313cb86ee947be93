package checkpoint

import (
	"strings"
	"testing"
)

// TestTower saves a model and a tower (TowerLayer, in world rank 0's
// shard) under P=4 DP=2 and FSDP DP=2, and reads the tower back under
// every rank of other layouts, bit for bit; AllLayers lists the model's
// layers only. A tower saved by another rank, one without Layout.Tower,
// a Layout.Tower without one, and a request for the tower of a checkpoint
// that holds none are refused, naming what is wrong.
func TestTower(t *testing.T) {
	const layers = 8
	tower := model(1, 11)
	for i := range tower {
		tower[i].Layer = TowerLayer
	}
	for _, from := range []Layout{plainLayout([]int{0, 2, 4, 6, 8}, 2, false), plainLayout([]int{0, 4, 8}, 2, true)} {
		t.Run(from.String(), func(t *testing.T) {
			from.Tower = true
			ps := model(layers, 5)
			shards := shardsOf(t, ps, from)
			shards[0].Params = append(shards[0].Params, tower...)
			dir := t.TempDir()
			saveAll(t, dir, from, 3, shards)
			c, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Manifest.Layout.Tower || !strings.HasSuffix(c.Manifest.Layout.String(), " tower") {
				t.Fatalf("the manifest's layout %v has no tower", c.Manifest.Layout)
			}
			if all := c.AllLayers(); len(all) != layers || all[layers-1] != layers-1 {
				t.Fatalf("AllLayers %v, want 0 to %d", all, layers-1)
			}
			for replica := range 3 {
				got, err := c.Layers([]int{TowerLayer}, replica)
				if err != nil {
					t.Fatal(err)
				}
				equalParams(t, got, tower)
				got, err = c.Layers([]int{6, 7, TowerLayer}, replica)
				if err != nil {
					t.Fatal(err)
				}
				equalParams(t, got, append(ofLayers(ps, 6, 8), tower...))
			}
		})
	}
	l := plainLayout([]int{0, 4, 8}, 1, false)
	for _, tc := range []struct {
		name   string
		tower  bool // Layout.Tower
		holder int  // the rank whose shard holds the tower, -1 none
		want   string
	}{
		{"on rank 1", true, 1, "which only world rank 0's shard holds"},
		{"without Layout.Tower", false, 0, "the layout has no tower"},
		{"Layout.Tower without one", true, -1, "does not hold its parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := l
			l.Tower = tc.tower
			shards := shardsOf(t, model(layers, 5), l)
			if tc.holder >= 0 {
				shards[tc.holder].Params = append(shards[tc.holder].Params, tower...)
			}
			saver := max(tc.holder, 0) // the rank whose Save must refuse
			err := Save(t.TempDir(), shards[saver], SaveOptions{Rank: saver, Layout: l, Barrier: func() error { return nil }})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("saving: %v, want an error saying %q", err, tc.want)
			}
			m := Manifest{Format: FormatName, Version: Version, Layout: l}
			for r := range l.World() {
				m.Shards = append(m.Shards, ShardInfo{File: ShardFile(1, r), Rank: r, Layers: l.LayersOf(r)})
			}
			for r := range min(tc.holder+1, 2) { // on rank 1: rank 0's too, so that rank 1's is the fault
				m.Shards[r].Layers = append(m.Shards[r].Layers, TowerLayer)
			}
			if err := m.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checking the manifest: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	saveAll(t, dir, l, 1, shardsOf(t, model(layers, 5), l))
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Layers([]int{TowerLayer}, 0); err == nil || !strings.Contains(err.Error(), "holds no tower") {
		t.Fatalf("the tower of a checkpoint without one: %v, want an error saying it holds none", err)
	}
}
