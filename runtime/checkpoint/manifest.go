package checkpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// FormatName is the manifest's "format" field.
const FormatName = "ppgen-checkpoint"

// ManifestFile is the manifest's name in a checkpoint directory.
const ManifestFile = "manifest.json"

// maxManifest bounds the manifest file read by Open.
const maxManifest = 64 << 20

// Layout is how the job that wrote a checkpoint placed the model: the
// fields of its runtime/pipe Spec that say which rank holds which layers,
// and its data-parallel degree. World rank = pipeline rank·DP + replica
// (runtime/mesh).
type Layout struct {
	Schedule string   `json:"schedule,omitempty"`
	Ranks    int      `json:"ranks"`            // P: pipeline ranks
	DP       int      `json:"dp"`               // data-parallel replicas (1 without)
	Stages   int      `json:"stages,omitempty"` // stages of the program
	RankOf   []int    `json:"rank_of,omitempty"`
	Layers   [][2]int `json:"layers,omitempty"` // stage s holds layers Layers[s][0] to Layers[s][1]-1
	Copies   int      `json:"copies,omitempty"` // 2 for dualpipe's two model copies
	FSDP     bool     `json:"fsdp,omitempty"`   // stages are sharded over each DP group (the shards hold Flats)
	// Tower says the job trained a tower (a preprocess replicated on
	// every rank, out of the stages: runtime/train's Config.Tower), whose
	// parameters world rank 0's shard holds as layer TowerLayer.
	Tower bool `json:"tower,omitempty"`
}

// World is Ranks·DP, the number of shards the layout writes.
func (l Layout) World() int { return l.Ranks * max(l.DP, 1) }

// String is e.g. "1f1b P=4 DP=2 stages [0,2) [2,4) [4,6) [6,8)".
func (l Layout) String() string {
	var b strings.Builder
	if l.Schedule != "" {
		b.WriteString(l.Schedule + " ")
	}
	fmt.Fprintf(&b, "P=%d DP=%d", l.Ranks, max(l.DP, 1))
	if l.FSDP {
		b.WriteString(" FSDP")
	}
	if len(l.Layers) > 0 {
		b.WriteString(" stages")
		for _, r := range l.Layers {
			fmt.Fprintf(&b, " [%d,%d)", r[0], r[1])
		}
	}
	if l.Tower {
		b.WriteString(" tower")
	}
	return b.String()
}

// Check checks the layout's degrees and that RankOf and Layers agree with
// Stages.
func (l Layout) Check() error {
	switch {
	case l.Ranks < 1 || l.Ranks > MaxItems:
		return fmt.Errorf("layout: %d pipeline ranks", l.Ranks)
	case l.DP < 0 || l.DP > MaxItems || int64(l.Ranks)*int64(max(l.DP, 1)) > MaxItems:
		return fmt.Errorf("layout: %d replicas of %d ranks", l.DP, l.Ranks)
	case l.RankOf != nil && len(l.RankOf) != l.Stages:
		return fmt.Errorf("layout: %d entries in rank_of for %d stages", len(l.RankOf), l.Stages)
	case l.Layers != nil && len(l.Layers) != l.Stages:
		return fmt.Errorf("layout: %d layer ranges for %d stages", len(l.Layers), l.Stages)
	}
	for s, r := range l.RankOf {
		if r < 0 || r >= l.Ranks {
			return fmt.Errorf("layout: stage %d on rank %d of %d", s, r, l.Ranks)
		}
	}
	held := 0 // the layers the stages hold, with repeats: what LayersOf may list
	for s, r := range l.Layers {
		if r[0] < 0 || r[1] <= r[0] || r[1] > MaxLayer {
			return fmt.Errorf("layout: stage %d holds layers [%d,%d)", s, r[0], r[1])
		}
		if held += r[1] - r[0]; held > MaxItems {
			return fmt.Errorf("layout: the stages hold more than %d layers (stage %d holds [%d,%d)): not a model this format stores", MaxItems, s, r[0], r[1])
		}
	}
	return nil
}

// LayersOf returns the sorted layers pipeline rank r holds under the
// layout (nil without Layers).
func (l Layout) LayersOf(r int) []int {
	var out []int
	for s, rr := range l.RankOf {
		if rr != r || s >= len(l.Layers) {
			continue
		}
		for i := l.Layers[s][0]; i < l.Layers[s][1]; i++ {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// FlatInfo names one FSDP chunk a shard holds: its group, its index, the
// group's size and the layers of its members.
type FlatInfo struct {
	Name   string `json:"name"`
	Index  int    `json:"index"`
	Of     int    `json:"of"`
	Layers []int  `json:"layers"`
}

// ShardInfo is the manifest's record of one shard file.
type ShardInfo struct {
	File   string     `json:"file"`  // name in the checkpoint directory
	Rank   int        `json:"rank"`  // world rank that wrote it
	Bytes  int64      `json:"bytes"` // file size
	CRC32C uint32     `json:"crc32c"`
	Layers []int      `json:"layers,omitempty"` // layers of its parameters (not its flats)
	Flats  []FlatInfo `json:"flats,omitempty"`
	Blobs  []string   `json:"blobs,omitempty"`
}

// Manifest describes a checkpoint: what wrote it and where every layer is.
type Manifest struct {
	Format     string      `json:"format"`
	Version    int         `json:"version"`
	Step       int64       `json:"step"`
	Generation int         `json:"generation"` // the save's number in its directory; shard file names carry it
	Layout     Layout      `json:"layout"`
	Shards     []ShardInfo `json:"shards"`
	// State holds the job's small named values: the LR schedule's state,
	// the data position, RNG seeds — JSON the trainer defines.
	State map[string]json.RawMessage `json:"state,omitempty"`
}

// Check checks the manifest's format, version, layout and shard list: one
// shard per world rank, plain file names.
func (m *Manifest) Check() error {
	if m.Format != FormatName {
		return fmt.Errorf("format %q, want %q", m.Format, FormatName)
	}
	if m.Version != Version {
		return fmt.Errorf("format version %d, this reader knows %d", m.Version, Version)
	}
	if err := m.Layout.Check(); err != nil {
		return err
	}
	if len(m.Shards) != m.Layout.World() {
		return fmt.Errorf("%d shards for a layout of %d ranks (%v)", len(m.Shards), m.Layout.World(), m.Layout)
	}
	for i, s := range m.Shards {
		if s.Rank != i {
			return fmt.Errorf("shard %d is rank %d's", i, s.Rank)
		}
		if s.File == "" || s.File != filepath.Base(s.File) || s.File == "." || s.File == ".." || s.File == ManifestFile {
			return fmt.Errorf("shard %d: file name %q is not a plain name in the directory", i, s.File)
		}
		if s.Bytes < 0 {
			return fmt.Errorf("shard %d: %d bytes", i, s.Bytes)
		}
		for _, f := range s.Flats {
			if f.Of < 1 || f.Index < 0 || f.Index >= f.Of {
				return fmt.Errorf("shard %d: flat %q chunk %d of %d", i, f.Name, f.Index, f.Of)
			}
		}
		if err := checkTower(m.Layout, i, slices.Contains(s.Layers, TowerLayer)); err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
	}
	return nil
}

// ReadManifest reads and checks dir's manifest.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if st.Size() > maxManifest {
		return nil, fmt.Errorf("checkpoint %s: %d bytes, over %d", path, st.Size(), maxManifest)
	}
	var m Manifest
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := m.Check(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return &m, nil
}
