package checkpoint

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// Checkpoint is a checkpoint directory opened for reading: its checked
// manifest, every shard file present with its recorded size.
type Checkpoint struct {
	Dir      string
	Manifest *Manifest
}

// Open reads dir's manifest and checks that every shard it names is
// there with the size it records; an error names the file.
func Open(dir string) (*Checkpoint, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	for _, s := range m.Shards {
		path := filepath.Join(dir, s.File)
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: rank %d's shard: %w", dir, s.Rank, err)
		}
		if st.Size() != s.Bytes {
			return nil, fmt.Errorf("checkpoint %s: shard %s: %w: %d bytes, the manifest says %d (truncated or overwritten)", dir, path, ErrCorrupt, st.Size(), s.Bytes)
		}
	}
	return &Checkpoint{Dir: dir, Manifest: m}, nil
}

// ReadShard reads world rank's shard, keeping what f selects, and checks
// it (format, lengths, CRC-32C, and the CRC-32C and layers the manifest
// records). An error names the file.
func (c *Checkpoint) ReadShard(rank int, f Filter) (*Shard, error) {
	if rank < 0 || rank >= len(c.Manifest.Shards) {
		return nil, fmt.Errorf("checkpoint %s: no shard of rank %d (%d ranks)", c.Dir, rank, len(c.Manifest.Shards))
	}
	info := c.Manifest.Shards[rank]
	path := filepath.Join(c.Dir, info.File)
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: rank %d's shard: %w", c.Dir, rank, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: shard %s: %w", path, err)
	}
	if st.Size() != info.Bytes {
		return nil, fmt.Errorf("checkpoint: shard %s: %w: %d bytes, the manifest says %d (truncated or overwritten)", path, ErrCorrupt, st.Size(), info.Bytes)
	}
	s, crc, err := decode(newFileReader(file), info.Bytes, f)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: shard %s: %w", path, err)
	}
	// decode checked the file's own CRC; the manifest's must be the same.
	if crc != info.CRC32C {
		return nil, fmt.Errorf("checkpoint: shard %s: %w: checksum %08x, the manifest says %08x", path, ErrCorrupt, crc, info.CRC32C)
	}
	if err := c.matches(rank, s, f); err != nil {
		return nil, fmt.Errorf("checkpoint: shard %s: %w", path, err)
	}
	return s, nil
}

// matches checks the decoded shard against the manifest's record.
func (c *Checkpoint) matches(rank int, s *Shard, f Filter) error {
	info := c.Manifest.Shards[rank]
	if f.Layer == nil {
		var got []int
		for _, p := range s.Params {
			got = append(got, p.Layer)
		}
		if got = compactSorted(got); !slices.Equal(got, info.Layers) {
			return fmt.Errorf("%w: holds layers %v, the manifest says %v", ErrCorrupt, got, info.Layers)
		}
	}
	return nil
}

// Verify reads rank's whole shard and checks it as ReadShard does,
// keeping nothing.
func (c *Checkpoint) Verify(rank int) error {
	_, err := c.ReadShard(rank, Filter{Layer: func(int) bool { return false }, Flat: func(string) bool { return false }})
	return err
}

// Layers returns the parameters (values and optimizer state) of the
// layers want, whatever layout wrote the checkpoint: each layer from one
// shard that holds it — among data-parallel copies, preferably replica's
// (replica mod DP), so that replicas spread their reads — or, for a layer
// of an FSDP-sharded stage, gathered from every chunk of its group. The
// result is sorted by layer, each layer's parameters in the order saved.
// A layer no shard holds is an error. TowerLayer among want asks for the
// tower's parameters (world rank 0's shard holds them).
func (c *Checkpoint) Layers(want []int, replica int) ([]Param, error) {
	return c.LayersInto(want, replica, nil)
}

// LayersInto is Layers reading into the memory into gives (Filter.Into):
// a resuming rank's own parameter and optimizer tensors. Parameters
// gathered from FSDP chunks are copied into it.
func (c *Checkpoint) LayersInto(want []int, replica int, into func(layer int, name, state string) Tensor) ([]Param, error) {
	want = compactSorted(want)
	m := c.Manifest
	dp := max(m.Layout.DP, 1)
	replica = ((replica % dp) + dp) % dp
	uncovered := map[int]bool{}
	for _, l := range want {
		uncovered[l] = true
	}
	// Plain parameters: a greedy cover, the shard holding the most
	// uncovered layers first (then the replica's, then the lowest rank).
	plan := map[int][]int{} // rank -> layers read from it
	for {
		best, bestN := -1, 0
		for r, s := range m.Shards {
			n := 0
			for _, l := range s.Layers {
				if uncovered[l] {
					n++
				}
			}
			better := n > bestN || (n == bestN && n > 0 && r%dp == replica && best%dp != replica)
			if better {
				best, bestN = r, n
			}
		}
		if best < 0 {
			break
		}
		for _, l := range m.Shards[best].Layers {
			if uncovered[l] {
				plan[best] = append(plan[best], l)
				delete(uncovered, l)
			}
		}
	}
	var out []Param
	for _, r := range slices.Sorted(maps.Keys(plan)) {
		set := map[int]bool{}
		for _, l := range plan[r] {
			set[l] = true
		}
		s, err := c.ReadShard(r, Filter{Layer: func(l int) bool { return set[l] }, Flat: func(string) bool { return false }, Into: into})
		if err != nil {
			return nil, err
		}
		out = append(out, s.Params...)
	}
	// FSDP groups for what is left.
	for len(uncovered) > 0 {
		l := slices.Min(slices.Collect(maps.Keys(uncovered)))
		name, of, ok := c.flatGroup(l)
		if !ok && l == TowerLayer {
			return nil, fmt.Errorf("checkpoint %s holds no tower (layer %d): the job that saved it (%v) trained none", c.Dir, TowerLayer, m.Layout)
		}
		if !ok {
			return nil, fmt.Errorf("checkpoint %s: layer %d is in no shard (the checkpoint holds layers %v)", c.Dir, l, c.AllLayers())
		}
		params, err := c.gather(name, of)
		if err != nil {
			return nil, err
		}
		for _, p := range params {
			if !uncovered[p.Layer] {
				continue
			}
			if into != nil {
				if err := copyInto(&p, into); err != nil {
					return nil, fmt.Errorf("checkpoint %s: FSDP group %q: %w", c.Dir, name, err)
				}
			}
			out = append(out, p)
		}
		for _, p := range params {
			delete(uncovered, p.Layer)
		}
	}
	slices.SortStableFunc(out, func(a, b Param) int { return cmp.Compare(a.Layer, b.Layer) })
	return out, nil
}

// AllLayers returns every model layer the checkpoint holds, sorted: not
// the tower (TowerLayer), which Layers returns when asked for it.
func (c *Checkpoint) AllLayers() []int {
	var all []int
	for _, s := range c.Manifest.Shards {
		for _, l := range s.Layers {
			if l != TowerLayer {
				all = append(all, l)
			}
		}
		for _, f := range s.Flats {
			all = append(all, f.Layers...)
		}
	}
	return compactSorted(all)
}

// flatGroup finds an FSDP group holding layer l.
func (c *Checkpoint) flatGroup(l int) (name string, of int, ok bool) {
	for _, s := range c.Manifest.Shards {
		for _, f := range s.Flats {
			if slices.Contains(f.Layers, l) {
				return f.Name, f.Of, true
			}
		}
	}
	return "", 0, false
}

// gather reads the chunks 0..of-1 of FSDP group name and joins them into
// its parameters.
func (c *Checkpoint) gather(name string, of int) ([]Param, error) {
	chunks := make([]*Flat, of)
	for r, s := range c.Manifest.Shards {
		for _, f := range s.Flats {
			if f.Name != name || f.Of != of || chunks[f.Index] != nil {
				continue
			}
			sh, err := c.ReadShard(r, Filter{Layer: func(int) bool { return false }, Flat: func(n string) bool { return n == name }})
			if err != nil {
				return nil, err
			}
			for i := range sh.Flats {
				if fl := &sh.Flats[i]; fl.Index == f.Index && fl.Of == of {
					chunks[f.Index] = fl
				}
			}
			if chunks[f.Index] == nil {
				return nil, fmt.Errorf("checkpoint %s: shard %s: %w: no chunk %d of FSDP group %q, which the manifest lists", c.Dir, s.File, ErrCorrupt, f.Index, name)
			}
		}
	}
	for i, ch := range chunks {
		if ch == nil {
			return nil, fmt.Errorf("checkpoint %s: FSDP group %q: chunk %d of %d is in no shard", c.Dir, name, i, of)
		}
	}
	ps, err := JoinFlat(chunks)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", c.Dir, err)
	}
	return ps, nil
}

// copyInto moves p's tensors into the memory into gives, where it gives
// some.
func copyInto(p *Param, into func(layer int, name, state string) Tensor) error {
	move := func(t *Tensor, state string) error {
		dst := into(p.Layer, p.Name, state)
		if dst.F32 == nil && dst.F64 == nil {
			return nil
		}
		if dst.DType() != t.DType() || dst.Len() != t.Len() {
			return fmt.Errorf("layer %d parameter %q %q: saved as %v %v, the destination is %v of %d elements", p.Layer, p.Name, state, t.DType(), t.Shape, dst.DType(), dst.Len())
		}
		copy(dst.F32, t.F32)
		copy(dst.F64, t.F64)
		t.F32, t.F64 = dst.F32, dst.F64
		return nil
	}
	if err := move(&p.Value, ""); err != nil {
		return err
	}
	for i := range p.State {
		if err := move(&p.State[i].Tensor, p.State[i].Name); err != nil {
			return err
		}
	}
	return nil
}
