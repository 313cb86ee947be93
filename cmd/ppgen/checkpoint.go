package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/runtime/checkpoint"
)

// runCheckpoint runs `ppgen checkpoint inspect DIR` and `ppgen checkpoint
// convert -in DIR -out DIR2 -partition BOUNDS [-dp N] [-fsdp]`.
func runCheckpoint(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("checkpoint", flag.ContinueOnError)
	in := fs.String("in", "", "convert: the checkpoint directory to read")
	out := fs.String("out", "", "convert: the directory to write the converted checkpoint into (it must hold no checkpoint; it is created if missing)")
	partition := fs.String("partition", "", "convert: the new layout's stages as layer bounds, one stage per pipeline rank: 0,3,6,8 is three ranks holding layers 0-2, 3-5 and 6-7")
	dp := fs.Int("dp", 1, "convert: the new layout's data-parallel replicas (each holds a copy of its pipeline rank's layers)")
	fsdp := fs.Bool("fsdp", false, "convert: shard each stage over its -dp replicas as runtime/nn's FSDP does (groups named \"stage S\")")
	schedule := fs.String("schedule", "", "convert: the schedule name the new layout records (default: the input's)")
	if len(args) == 0 {
		return usagef("missing action: inspect DIR or convert -in DIR -out DIR2 -partition BOUNDS (see `ppgen checkpoint -h`)")
	}
	action, rest := args[0], args[1:]
	if strings.HasPrefix(action, "-") {
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		return usagef("missing action: inspect DIR or convert")
	}
	switch action {
	case "inspect":
		fs.SetOutput(io.Discard)
		if err := fs.Parse(rest); err != nil {
			return flagError(fs, err)
		}
		if fs.NArg() != 1 {
			return usagef("inspect takes one checkpoint directory, not %d arguments", fs.NArg())
		}
		return inspectCheckpoint(stdout, fs.Arg(0))
	case "convert":
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if *in == "" || *out == "" || *partition == "" {
			return usagef("convert needs -in DIR, -out DIR2 and -partition BOUNDS")
		}
		bounds, err := parseBounds(*partition)
		if err != nil {
			return usagef("-partition %q: %v", *partition, err)
		}
		if *dp < 1 {
			return usagef("-dp %d: want at least 1", *dp)
		}
		return convertCheckpoint(stdout, *in, *out, bounds, *dp, *fsdp, *schedule)
	}
	return usagef("unknown action %q: want inspect or convert", action)
}

// parseBounds reads "0,3,6,8": increasing layer bounds from 0.
func parseBounds(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a layer number", f)
		}
		if len(out) == 0 && n != 0 {
			return nil, fmt.Errorf("the first bound is %d, want 0", n)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("bound %d after %d: want increasing bounds", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	if len(out) < 2 {
		return nil, errors.New("want at least two bounds (0 and the number of layers)")
	}
	return out, nil
}

// inspectCheckpoint prints the manifest's summary and a row per shard,
// reading every shard to verify its checksum; a bad shard is an error
// after the table.
func inspectCheckpoint(w io.Writer, dir string) error {
	m, err := checkpoint.ReadManifest(dir)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %s: step %d (save %d, format version %d)\n", dir, m.Step, m.Generation, m.Version)
	fmt.Fprintf(&b, "layout: %v\n", m.Layout)
	if len(m.State) > 0 {
		fmt.Fprintf(&b, "state: %s\n", strings.Join(slices.Sorted(maps.Keys(m.State)), ", "))
	}
	c := &checkpoint.Checkpoint{Dir: dir, Manifest: m}
	fmt.Fprintf(&b, "%-4s  %-22s  %12s  %-8s  %-12s  %s\n", "RANK", "FILE", "BYTES", "CRC32C", "LAYERS", "CHECK")
	var total int64
	var bad []string
	for r, s := range m.Shards {
		var held []string
		model := slices.DeleteFunc(slices.Clone(s.Layers), func(l int) bool { return l == checkpoint.TowerLayer })
		if len(model) > 0 {
			held = append(held, ranges(model))
		}
		if len(model) < len(s.Layers) {
			held = append(held, "tower")
		}
		for _, f := range s.Flats {
			held = append(held, fmt.Sprintf("%s (FSDP %d/%d: %s)", f.Name, f.Index, f.Of, ranges(f.Layers)))
		}
		layers := cmp.Or(strings.Join(held, " "), "-")
		check := "ok"
		if err := c.Verify(r); err != nil {
			check = "BAD: " + err.Error()
			bad = append(bad, s.File)
		}
		total += s.Bytes
		fmt.Fprintf(&b, "%-4d  %-22s  %12d  %08x  %-12s  %s\n", r, s.File, s.Bytes, s.CRC32C, layers, check)
	}
	tower := ""
	if m.Layout.Tower {
		tower = " and the tower"
	}
	fmt.Fprintf(&b, "layers %s%s in %d shards, %d bytes", ranges(c.AllLayers()), tower, len(m.Shards), total)
	if len(bad) == 0 {
		b.WriteString("; every checksum verified\n")
	} else {
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("checkpoint %s: %d of %d shards are corrupt or missing: %s", dir, len(bad), len(m.Shards), strings.Join(bad, ", "))
	}
	return nil
}

// convertCheckpoint reads the checkpoint in, regroups its layers by
// bounds over dp replicas (FSDP-sharded with fsdp), and writes it to out;
// a tower (checkpoint.TowerLayer) goes to world rank 0's shard, as a job
// saves it.
func convertCheckpoint(w io.Writer, in, out string, bounds []int, dp int, fsdp bool, schedule string) error {
	c, err := checkpoint.Open(in)
	if err != nil {
		return err
	}
	all := c.AllLayers()
	if n := len(all); n == 0 || all[0] != 0 || all[n-1] != n-1 {
		return fmt.Errorf("checkpoint %s holds layers %s, not 0 to N-1", in, ranges(all))
	}
	if last := bounds[len(bounds)-1]; last != len(all) {
		return usagef("-partition ends at %d but the checkpoint holds %d layers", last, len(all))
	}
	if _, err := checkpoint.ReadManifest(out); err == nil {
		return usagef("-out %s already holds a checkpoint", out)
	}
	if abs1, err1 := filepath.Abs(in); err1 == nil {
		if abs2, err2 := filepath.Abs(out); err2 == nil && abs1 == abs2 {
			return usagef("-in and -out are the same directory")
		}
	}
	if schedule == "" {
		schedule = c.Manifest.Layout.Schedule
	}
	var tower []checkpoint.Param // world rank 0's shard carries it over
	if c.Manifest.Layout.Tower {
		if tower, err = c.Layers([]int{checkpoint.TowerLayer}, 0); err != nil {
			return err
		}
	}
	l := checkpoint.Layout{Schedule: schedule, Ranks: len(bounds) - 1, DP: dp, Stages: len(bounds) - 1, FSDP: fsdp, Tower: len(tower) > 0}
	for s := range l.Stages {
		l.RankOf = append(l.RankOf, s)
		l.Layers = append(l.Layers, [2]int{bounds[s], bounds[s+1]})
	}
	if err := os.MkdirAll(out, 0o777); err != nil {
		return err
	}
	const gen = 1
	for pp := range l.Ranks {
		var want []int
		for i := bounds[pp]; i < bounds[pp+1]; i++ {
			want = append(want, i)
		}
		ps, err := c.Layers(want, 0)
		if err != nil {
			return err
		}
		for d := range dp {
			s := &checkpoint.Shard{Params: ps}
			if fsdp {
				f, err := checkpoint.SplitFlat(fmt.Sprintf("stage %d", pp), ps, d, dp)
				if err != nil {
					return err
				}
				s = &checkpoint.Shard{Flats: []checkpoint.Flat{f}}
			}
			if pp == 0 && d == 0 && len(tower) > 0 {
				s.Params = append(slices.Clone(s.Params), tower...)
			}
			if err := checkpoint.WriteShard(out, gen, pp*dp+d, s); err != nil {
				return err
			}
		}
	}
	m := checkpoint.Manifest{Step: c.Manifest.Step, Generation: gen, Layout: l, State: c.Manifest.State}
	if err := checkpoint.Commit(out, m); err != nil {
		return err
	}
	carried := ""
	if len(tower) > 0 {
		carried = " and the tower"
	}
	_, err = fmt.Fprintf(w, "converted %s (%v) to %s (%v): step %d, %d layers%s in %d shards; per-rank blobs are not carried over\n",
		in, c.Manifest.Layout, out, l, m.Step, len(all), carried, l.World())
	return err
}

// ranges prints sorted layers as "0-3,6".
func ranges(ls []int) string {
	if len(ls) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(ls); {
		j := i
		for j+1 < len(ls) && ls[j+1] == ls[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ls[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ls[i], ls[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
