package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadManifest: ReadManifest of any bytes in a checkpoint directory
// never panics, and a manifest it accepts is whole: one shard per world
// rank, the tower (TowerLayer) in world rank 0's shard only and only under
// Layout.Tower, and it reads back the same after a round trip through
// JSON. Seeds: the manifests of real saves, with and without a tower,
// plain and FSDP.
func FuzzReadManifest(f *testing.F) {
	tower := model(1, 11)
	for i := range tower {
		tower[i].Layer = TowerLayer
	}
	for _, l := range []Layout{plainLayout([]int{0, 2, 4}, 2, false), plainLayout([]int{0, 4, 8}, 2, true)} {
		for _, withTower := range []bool{false, true} {
			l.Tower = withTower
			shards := shardsOf(f, model(l.Layers[len(l.Layers)-1][1], 5), l)
			if withTower {
				shards[0].Params = append(shards[0].Params, tower...)
			}
			dir := f.TempDir()
			saveAll(f, dir, l, 1, shards)
			b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte(`{"format":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := ReadManifest(dir)
		if err != nil {
			return
		}
		if len(m.Shards) != m.Layout.World() {
			t.Fatalf("accepted %d shards for %v", len(m.Shards), m.Layout)
		}
		for i, s := range m.Shards {
			for _, l := range s.Layers {
				if l == TowerLayer && (i != 0 || !m.Layout.Tower) {
					t.Fatalf("accepted the tower in shard %d of %v", i, m.Layout)
				}
			}
		}
		_ = m.Layout.String()
		_ = m.Layout.LayersOf(0) // bounded by Check: at most MaxItems layers
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), again, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(dir); err != nil {
			t.Fatalf("an accepted manifest does not read back: %v\n%s", err, again)
		}
	})
}

// TestLayoutBoundsLayers: a layout (as a manifest on disk gives it) whose
// stages hold more than MaxItems layers is refused, so that nothing sized
// by its ranges (LayersOf) can exhaust memory; MaxItems layers are not.
func TestLayoutBoundsLayers(t *testing.T) {
	l := Layout{Ranks: 1, DP: 1, Stages: 2, RankOf: []int{0, 0}, Layers: [][2]int{{0, MaxItems / 2}, {MaxItems / 2, MaxItems}}}
	if err := l.Check(); err != nil {
		t.Fatalf("%d layers: %v", MaxItems, err)
	}
	l.Layers[1][1] = MaxLayer
	if err := l.Check(); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("stages of %d layers: %v, want a refusal", MaxLayer, err)
	}
}
