package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	ps := model(3, 7)
	ps[0].Value = Tensor{Shape: []int{2, 2}, F32: []float32{1, -2, 3.5, 4}}
	ps[0].State = []NamedTensor{{"velocity", Tensor{Shape: []int{2, 2}, F32: []float32{0, 1, 0, 1}}}}
	flat, err := SplitFlat("stage 0", ofLayers(ps, 1, 3), 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	s := &Shard{Params: ps[:2], Flats: []Flat{flat}, Blobs: map[string][]byte{"rng": {1, 2, 3}, "empty": {}}}
	var buf bytes.Buffer
	n, _, err := Encode(&buf, s)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Encode says %d bytes, wrote %d", n, buf.Len())
	}
	got, err := Decode(bytes.NewReader(buf.Bytes()), n, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, got.Params, s.Params)
	if len(got.Flats) != 1 || !sameTensor(got.Flats[0].Value, flat.Value) || !sameMembers(got.Flats[0].Members, flat.Members) {
		t.Fatalf("flats %+v, want %+v", got.Flats, s.Flats)
	}
	if string(got.Blobs["rng"]) != "\x01\x02\x03" || got.Blobs["empty"] == nil {
		t.Fatalf("blobs %v", got.Blobs)
	}
	// A filter keeps only what it selects, still checking every byte.
	got, err = Decode(bytes.NewReader(buf.Bytes()), n, Filter{Layer: func(l int) bool { return l == 0 }, Flat: func(string) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Params) != 2 || len(got.Flats) != 0 {
		t.Fatalf("filtered: %d params, %d flats; want 2, 0", len(got.Params), len(got.Flats))
	}
}

func TestEncodeRefusesBadShards(t *testing.T) {
	good := func() Param {
		return Param{Layer: 1, Name: "w", Value: Tensor{Shape: []int{2}, F64: []float64{1, 2}}}
	}
	for _, tc := range []struct {
		name string
		edit func(*Shard)
		want string
	}{
		{"shape", func(s *Shard) { s.Params[0].Value.Shape = []int{3} }, "holds 2"},
		{"negative layer", func(s *Shard) { s.Params[0].Layer = -1 }, "out of range"},
		{"twice", func(s *Shard) { s.Params = append(s.Params, good()) }, "twice"},
		{"state shape", func(s *Shard) {
			s.Params[0].State = []NamedTensor{{"m", Tensor{Shape: []int{1}, F64: []float64{1}}}}
		}, "optimizer tensor"},
		{"long name", func(s *Shard) { s.Params[0].Name = strings.Repeat("x", MaxName+1) }, "over"},
		{"both dtypes", func(s *Shard) { s.Params[0].Value.F32 = []float32{1, 2} }, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Shard{Params: []Param{good()}}
			tc.edit(s)
			_, _, err := Encode(&bytes.Buffer{}, s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Encode: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeRefusesCorruption(t *testing.T) {
	var buf bytes.Buffer
	n, _, err := Encode(&buf, &Shard{Params: model(2, 1)})
	if err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return b }), "bad magic"},
		{"version", edit(func(b []byte) []byte { b[8] = 9; return b }), "format version 9"},
		{"flipped data byte", edit(func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }), "checksum mismatch"},
		{"flipped checksum", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum mismatch"},
		{"truncated", good[:len(good)-9], ""},
		{"empty", nil, "shorter than"},
		{"huge count", edit(func(b []byte) []byte {
			// The first record's name length (after kind and layer).
			b[12+1+4], b[12+1+4+1] = 0xff, 0xff
			return b
		}), "over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(tc.b), int64(len(tc.b)), Filter{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode: %v, want ErrCorrupt containing %q", err, tc.want)
			}
		})
	}
	// A size that disagrees with the bytes is refused too.
	if _, err := Decode(bytes.NewReader(good), n+8, Filter{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode with a longer size: %v, want ErrCorrupt", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []*Shard{
		{},
		{Params: model(1, 3)},
		{Blobs: map[string][]byte{"rng": []byte("state")}},
	} {
		var buf bytes.Buffer
		if _, _, err := Encode(&buf, s); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	flat, err := SplitFlat("g", model(2, 4), 0, 2)
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if _, _, err := Encode(&buf, &Shard{Flats: []Flat{flat}}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzDecode(t, b)
		// The same bytes with a right checksum, so that the fuzzer reaches
		// the checks after it.
		if len(b) >= 4 {
			b = bytes.Clone(b)
			binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
			fuzzDecode(t, b)
		}
	})
}

// fuzzDecode decodes b; what decodes must encode and decode again.
func fuzzDecode(t *testing.T, b []byte) {
	s, err := Decode(bytes.NewReader(b), int64(len(b)), Filter{})
	if err != nil {
		return
	}
	var out bytes.Buffer
	if _, _, err := Encode(&out, s); err != nil {
		t.Fatalf("a decoded shard does not encode: %v", err)
	}
	if _, err := Decode(bytes.NewReader(out.Bytes()), int64(out.Len()), Filter{}); err != nil {
		t.Fatalf("a re-encoded shard does not decode: %v", err)
	}
}

func TestSaveOpenLayers(t *testing.T) {
	dir := t.TempDir()
	ps := model(8, 1)
	l := plainLayout([]int{0, 2, 4, 6, 8}, 2, false)
	saveAll(t, dir, l, 100, shardsOf(t, ps, l))
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Manifest
	var lr bytes.Buffer
	if err := json.Compact(&lr, m.State["lr"]); err != nil {
		t.Fatal(err)
	}
	if m.Step != 100 || m.Generation != 1 || len(m.Shards) != 8 || lr.String() != `{"step":100}` {
		t.Fatalf("manifest step %d generation %d, %d shards, state %s", m.Step, m.Generation, len(m.Shards), m.State["lr"])
	}
	for r := range m.Shards {
		if err := c.Verify(r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Layers([]int{0, 1, 2, 3, 4, 5, 6, 7}, 1)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, got, ps)
	s, err := c.ReadShard(5, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Blobs["rng"]) != "rank 5" {
		t.Fatalf("rank 5's blob %q", s.Blobs["rng"])
	}
	if _, err := c.Layers([]int{8}, 0); err == nil || !strings.Contains(err.Error(), "layer 8 is in no shard") {
		t.Fatalf("a missing layer: %v", err)
	}

	// A second save into the same directory replaces the first whole and
	// removes its files.
	ps2 := model(8, 2)
	saveAll(t, dir, l, 200, shardsOf(t, ps2, l))
	c, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Manifest.Generation != 2 || c.Manifest.Step != 200 {
		t.Fatalf("after the second save: generation %d step %d", c.Manifest.Generation, c.Manifest.Step)
	}
	got, err = c.Layers([]int{0, 1, 2, 3, 4, 5, 6, 7}, 0)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, got, ps2)
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1+8 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("files left: %v, want the manifest and 8 shards", names)
	}
}

func TestSaveRefusesAnotherRanksLayers(t *testing.T) {
	l := plainLayout([]int{0, 2, 4}, 1, false)
	err := Save(t.TempDir(), &Shard{Params: ofLayers(model(4, 1), 2, 3)}, SaveOptions{Rank: 0, Layout: l, Barrier: func() error { return nil }})
	if err == nil || !strings.Contains(err.Error(), "holds layer 2") {
		t.Fatalf("Save of layer 2 on rank 0: %v", err)
	}
}

// TestSaveKilledBeforeManifest: a save that wrote its shards but not its
// manifest leaves the previous checkpoint whole.
func TestSaveKilledBeforeManifest(t *testing.T) {
	dir := t.TempDir()
	ps := model(4, 1)
	l := plainLayout([]int{0, 2, 4}, 1, false)
	saveAll(t, dir, l, 10, shardsOf(t, ps, l))
	// The next save: every rank's shard written, no manifest.
	for r, s := range shardsOf(t, model(4, 2), l) {
		if err := WriteShard(dir, 2, r, s); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Manifest.Step != 10 {
		t.Fatalf("step %d, want the previous checkpoint's 10", c.Manifest.Step)
	}
	got, err := c.Layers([]int{0, 1, 2, 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, got, ps)
	// The save after it reuses generation 2 and cleans up.
	saveAll(t, dir, l, 30, shardsOf(t, model(4, 3), l))
	if c, err = Open(dir); err != nil || c.Manifest.Step != 30 {
		t.Fatalf("after a later save: %v", err)
	}
}

// TestEveryFlippedByteRefused flips each byte of a shard in turn (every
// 7th): the load fails, naming the file, whatever field the byte was in.
func TestEveryFlippedByteRefused(t *testing.T) {
	dir := t.TempDir()
	l := plainLayout([]int{0, 1}, 1, false)
	saveAll(t, dir, l, 1, shardsOf(t, model(1, 1), l))
	path := filepath.Join(dir, ShardFile(1, 0))
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(good); i += 7 {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		if err := os.WriteFile(path, b, 0o666); err != nil {
			t.Fatal(err)
		}
		_, err := c.ReadShard(0, Filter{})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), ShardFile(1, 0)) {
			t.Fatalf("byte %d of %d flipped: %v, want ErrCorrupt naming the file", i, len(good), err)
		}
	}
}

func TestCorruptShardRefusedNamingTheFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(path string) error
		openErr bool // Open refuses (a size check) rather than the read
		want    string
	}{
		{"flipped data byte", func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)-30] ^= 0x01 // in the last optimizer tensor's elements
			return os.WriteFile(p, b, 0o666)
		}, false, "checksum mismatch"},
		{"truncated", func(p string) error {
			st, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.Truncate(p, st.Size()-3)
		}, true, "truncated"},
		{"missing", os.Remove, true, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := plainLayout([]int{0, 2, 4}, 1, false)
			saveAll(t, dir, l, 1, shardsOf(t, model(4, 1), l))
			path := filepath.Join(dir, ShardFile(1, 1))
			if err := tc.damage(path); err != nil {
				t.Fatal(err)
			}
			c, err := Open(dir)
			if !tc.openErr {
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.Layers([]int{0, 1, 2, 3}, 0)
			}
			if err == nil || !strings.Contains(err.Error(), ShardFile(1, 1)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s and saying %q", err, ShardFile(1, 1), tc.want)
			}
		})
	}
}
