package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// SaveOptions says what a rank's Save writes besides its shard.
type SaveOptions struct {
	// Rank is this rank's world rank, in [0, Layout.World()).
	Rank int
	// Step is the training step the checkpoint holds.
	Step int64
	// Layout is the layout of the job saving; every rank passes the same.
	Layout Layout
	// State is the manifest's named values (LR schedule, data position);
	// rank 0's is written.
	State map[string]json.RawMessage
	// Barrier returns when every rank of the layout has called it as many
	// times (CommBarrier makes one of a collective.Comm). It may be nil
	// when the layout has one rank.
	Barrier func() error
}

// Save writes s as rank o.Rank's shard of the checkpoint in dir (created
// if missing), a call every rank of o.Layout makes. It returns when the
// manifest naming every rank's shard is in place (rank 0 writes it after
// a barrier; the others check it after a second one). See the package doc
// for why a save killed half-way leaves the previous checkpoint of dir
// loadable.
func Save(dir string, s *Shard, o SaveOptions) error {
	world := o.Layout.World()
	if err := o.Layout.Check(); err != nil {
		return fmt.Errorf("checkpoint: save to %s: %w", dir, err)
	}
	if o.Rank < 0 || o.Rank >= world {
		return fmt.Errorf("checkpoint: save to %s: rank %d outside the layout's %d ranks", dir, o.Rank, world)
	}
	if err := holds(s, o.Layout, o.Rank); err != nil {
		return fmt.Errorf("checkpoint: save to %s: rank %d: %w", dir, o.Rank, err)
	}
	barrier := o.Barrier
	if barrier == nil {
		if world > 1 {
			return fmt.Errorf("checkpoint: save to %s: %d ranks and no Barrier", dir, world)
		}
		barrier = func() error { return nil }
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("checkpoint: save: %w", err)
	}
	gen, err := nextGeneration(dir)
	if err != nil {
		return err
	}
	if err := WriteShard(dir, gen, o.Rank, s); err != nil {
		return err
	}
	if err := barrier(); err != nil {
		return fmt.Errorf("checkpoint: save to %s: barrier after the shards: %w", dir, err)
	}
	if o.Rank == 0 {
		m := Manifest{Step: o.Step, Generation: gen, Layout: o.Layout, State: o.State}
		if err := Commit(dir, m); err != nil {
			return err
		}
	}
	if err := barrier(); err != nil {
		return fmt.Errorf("checkpoint: save to %s: barrier after the manifest: %w", dir, err)
	}
	if o.Rank != 0 {
		m, err := ReadManifest(dir)
		if err != nil {
			return fmt.Errorf("checkpoint: save: rank 0 wrote no manifest: %w", err)
		}
		if m.Generation != gen || m.Step != o.Step {
			return fmt.Errorf("checkpoint: save to %s: the manifest is of save %d step %d, this rank's is save %d step %d: rank 0 failed", dir, m.Generation, m.Step, gen, o.Step)
		}
	}
	return nil
}

// nextGeneration is one more than the generation of dir's manifest, 1
// without one. It refuses to save over a manifest it cannot read.
func nextGeneration(dir string) (int, error) {
	m, err := ReadManifest(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint: will not save over an unreadable manifest (remove it to start afresh): %w", err)
	}
	return m.Generation + 1, nil
}

// ShardFile is the name of rank's shard file of save gen.
func ShardFile(gen, rank int) string { return fmt.Sprintf("shard-%05d.g%d.bin", rank, gen) }

// partFile is the name of rank's shard record of save gen, which Commit
// gathers into the manifest.
func partFile(gen, rank int) string { return fmt.Sprintf("shard-%05d.g%d.json", rank, gen) }

// WriteShard writes s as rank's shard of save gen in dir (temporary file,
// fsync, rename), then its ShardInfo beside it, for Commit, and syncs the
// directory.
// Save calls it; a tool that writes every rank's shard itself (ppgen
// checkpoint convert) calls it for each, then Commit.
func WriteShard(dir string, gen, rank int, s *Shard) error {
	name := ShardFile(gen, rank)
	var n int64
	var crc uint32
	err := writeAtomic(dir, name, true, func(f *os.File) (err error) {
		n, crc, err = Encode(newFileWriter(f), s)
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint: rank %d: %w", rank, err)
	}
	info := ShardInfo{File: name, Rank: rank, Bytes: n, CRC32C: crc}
	for _, p := range s.Params {
		info.Layers = append(info.Layers, p.Layer)
	}
	info.Layers = compactSorted(info.Layers)
	for _, f := range s.Flats {
		fi := FlatInfo{Name: f.Name, Index: f.Index, Of: f.Of}
		for _, m := range f.Members {
			fi.Layers = append(fi.Layers, m.Layer)
		}
		fi.Layers = compactSorted(fi.Layers)
		info.Flats = append(info.Flats, fi)
	}
	for name := range s.Blobs {
		info.Blobs = append(info.Blobs, name)
	}
	info.Blobs = compactSorted(info.Blobs)
	b, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("checkpoint: rank %d: %w", rank, err)
	}
	// The record only carries the shard's ShardInfo to Commit, which puts
	// it in the manifest: it needs no fsync.
	if err := writeAtomic(dir, partFile(gen, rank), false, func(f *os.File) error { _, err := f.Write(b); return err }); err != nil {
		return fmt.Errorf("checkpoint: rank %d: %w", rank, err)
	}
	return syncDir(dir)
}

// Commit writes dir's manifest m (Format and Version filled in, Shards
// from the records WriteShard left for m.Generation), atomically, syncs
// the directory, then removes the files of other saves and the records.
func Commit(dir string, m Manifest) error {
	m.Format, m.Version = FormatName, Version
	m.Shards = nil
	for r := range m.Layout.World() {
		b, err := os.ReadFile(filepath.Join(dir, partFile(m.Generation, r)))
		if err != nil {
			return fmt.Errorf("checkpoint: commit: rank %d's shard is not written: %w", r, err)
		}
		var info ShardInfo
		if err := json.Unmarshal(b, &info); err != nil {
			return fmt.Errorf("checkpoint: commit: rank %d's shard record: %w", r, err)
		}
		m.Shards = append(m.Shards, info)
	}
	if err := m.Check(); err != nil {
		return fmt.Errorf("checkpoint: commit to %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: commit: %w", err)
	}
	b = append(b, '\n')
	if err := writeAtomic(dir, ManifestFile, true, func(f *os.File) error { _, err := f.Write(b); return err }); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return removeStale(dir, &m)
}

// removeStale removes dir's shard files and records that m does not name,
// and temporary files: what earlier saves, finished or killed, left.
func removeStale(dir string, m *Manifest) error {
	keep := map[string]bool{}
	for _, s := range m.Shards {
		keep[s.File] = true
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range ents {
		n := e.Name()
		stale := strings.HasPrefix(n, "shard-") && !keep[n] && (strings.HasSuffix(n, ".bin") || strings.HasSuffix(n, ".json"))
		if stale || strings.Contains(n, ".tmp-") {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("checkpoint: removing an earlier save's file: %w", err)
			}
		}
	}
	return nil
}

// writeAtomic writes dir/name through write on a temporary file of dir,
// synced (with sync) and closed, then renamed to name.
func writeAtomic(dir, name string, sync bool, write func(*os.File) error) error {
	f, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = write(f)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// syncDir makes dir's renames durable (a no-op on Windows, which cannot
// sync a directory).
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("checkpoint: syncing %s: %w", dir, err)
	}
	return nil
}

func compactSorted[T int | string](s []T) []T {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// holds checks that s holds only layers of rank's pipeline rank under l,
// when l says which (Layers and RankOf), and the tower (TowerLayer) where
// l puts it.
func holds(s *Shard, l Layout, rank int) error {
	layers := s.Layers()
	if err := checkTower(l, rank, slices.Contains(layers, TowerLayer)); err != nil {
		return fmt.Errorf("the shard %w", err)
	}
	if l.Layers == nil || l.RankOf == nil {
		return nil
	}
	mine := map[int]bool{TowerLayer: l.Tower && rank == towerRank}
	for _, layer := range l.LayersOf(rank / max(l.DP, 1)) {
		mine[layer] = true
	}
	for _, layer := range layers {
		if !mine[layer] {
			return fmt.Errorf("the shard holds layer %d, which the layout places on another pipeline rank (this one holds %v)", layer, l.LayersOf(rank/max(l.DP, 1)))
		}
	}
	return nil
}
