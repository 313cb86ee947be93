package checkpoint

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkThroughput compares Save and Open+LayersInto (into tensors made
// once, as a resuming rank restores into its model) of one rank's shard of
// 64 MiB of float32 parameters (16 layers of 1 Mi elements) with a plain
// sequential write (create, one write, fsync, close) and read (open, one
// read into a buffer made once) of as many bytes in one file, alternating
// them in every iteration. It reports each one's GB/s, the ratios
// save/write and load/read (the target is at least 0.8), and Layers'
// (allocating its tensors) GB/s.
func BenchmarkThroughput(b *testing.B) {
	const layers, elems = 16, 1 << 20
	s := &Shard{}
	for l := range layers {
		v := make([]float32, elems)
		for i := range v {
			v[i] = float32(i%1000) * 0.001
		}
		s.Params = append(s.Params, Param{Layer: l, Name: "0.weight", Value: Tensor{Shape: []int{1024, 1024}, F32: v}})
	}
	l := Layout{Ranks: 1, DP: 1}
	dir := b.TempDir()
	ckDir, plain := filepath.Join(dir, "ck"), filepath.Join(dir, "plain.bin")
	if err := Save(ckDir, s, SaveOptions{Layout: l}); err != nil {
		b.Fatal(err)
	}
	c, err := Open(ckDir)
	if err != nil {
		b.Fatal(err)
	}
	size := c.Manifest.Shards[0].Bytes
	data, err := os.ReadFile(filepath.Join(ckDir, c.Manifest.Shards[0].File))
	if err != nil {
		b.Fatal(err)
	}
	readBuf := make([]byte, size)
	all := make([]int, layers)
	for i := range all {
		all[i] = i
	}
	dst := map[int]Tensor{}
	for l := range layers {
		dst[l] = Tensor{Shape: []int{1024, 1024}, F32: make([]float32, elems)}
	}
	into := func(layer int, _, _ string) Tensor { return dst[layer] }
	var tSave, tWrite, tLoad, tRead, tAlloc time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := Save(ckDir, s, SaveOptions{Step: int64(i), Layout: l}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := plainWrite(plain, data); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		c, err := Open(ckDir)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.LayersInto(all, 0, into); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if err := plainRead(plain, readBuf); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		if _, err := c.Layers(all, 0); err != nil {
			b.Fatal(err)
		}
		t5 := time.Now()
		tSave, tWrite, tLoad, tRead, tAlloc = tSave+t1.Sub(t0), tWrite+t2.Sub(t1), tLoad+t3.Sub(t2), tRead+t4.Sub(t3), tAlloc+t5.Sub(t4)
	}
	gbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e9 }
	b.ReportMetric(gbs(tSave), "save-GB/s")
	b.ReportMetric(gbs(tWrite), "write-GB/s")
	b.ReportMetric(gbs(tLoad), "load-GB/s")
	b.ReportMetric(gbs(tRead), "read-GB/s")
	b.ReportMetric(gbs(tAlloc), "load-alloc-GB/s")
	b.ReportMetric(tWrite.Seconds()/tSave.Seconds(), "save/write")
	b.ReportMetric(tRead.Seconds()/tLoad.Seconds(), "load/read")
}

func plainWrite(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func plainRead(path string, buf []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.ReadFull(f, buf)
	return err
}

// BenchmarkLoad is BenchmarkThroughput's load alone (Open+LayersInto
// against a plain read of as many bytes, alternated in every iteration),
// so that many iterations fit in a short run on a loaded machine: it
// reports both GB/s, the ratio of the sums, the median of the
// iterations' ratios (steadier when other work comes and goes), and the
// CPU time (user and system, every thread's) of the reads over the
// loads': what the load costs a machine whose cores are all busy, where
// no wall time can be hidden on a free core.
func BenchmarkLoad(b *testing.B) { benchLoad(b, false) }

// BenchmarkLoadCold is BenchmarkLoad from the disk: before each load and
// each read it drops the file's pages from the page cache
// (POSIX_FADV_DONTNEED on the two files alone: both were fsynced, so
// their pages are clean), as a job resuming after a restart reads its
// checkpoint. Linux only.
func BenchmarkLoadCold(b *testing.B) { benchLoad(b, true) }

// benchLoad is BenchmarkLoad, from the disk when cold.
func benchLoad(b *testing.B, cold bool) {
	if cold {
		if err := dropCache(os.Args[0]); err != nil {
			b.Skipf("cannot drop a file's pages from the page cache here: %v", err)
		}
	}
	const layers, elems = 16, 1 << 20
	s := &Shard{}
	dst := map[int]Tensor{}
	for l := range layers {
		v := make([]float32, elems)
		for i := range v {
			v[i] = float32(i%1000) * 0.001
		}
		s.Params = append(s.Params, Param{Layer: l, Name: "0.weight", Value: Tensor{Shape: []int{1024, 1024}, F32: v}})
		dst[l] = Tensor{Shape: []int{1024, 1024}, F32: make([]float32, elems)}
	}
	dir := b.TempDir()
	ckDir, plain := filepath.Join(dir, "ck"), filepath.Join(dir, "plain.bin")
	if err := Save(ckDir, s, SaveOptions{Layout: Layout{Ranks: 1, DP: 1}}); err != nil {
		b.Fatal(err)
	}
	c, err := Open(ckDir)
	if err != nil {
		b.Fatal(err)
	}
	size := c.Manifest.Shards[0].Bytes
	data, err := os.ReadFile(filepath.Join(ckDir, c.Manifest.Shards[0].File))
	if err != nil {
		b.Fatal(err)
	}
	if err := plainWrite(plain, data); err != nil {
		b.Fatal(err)
	}
	readBuf := make([]byte, size)
	all := make([]int, layers)
	for i := range all {
		all[i] = i
	}
	into := func(layer int, _, _ string) Tensor { return dst[layer] }
	var tLoad, tRead, cpuLoad, cpuRead time.Duration
	var ratios []float64
	shard := filepath.Join(ckDir, c.Manifest.Shards[0].File)
	drop := func(path string) { // the page cache's copy of path, when cold, outside the timer
		if !cold {
			return
		}
		b.StopTimer()
		if err := dropCache(path); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		drop(shard)
		c0, _ := cpuTime()
		t0 := time.Now()
		c, err := Open(ckDir)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.LayersInto(all, 0, into); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		c1, _ := cpuTime()
		drop(plain)
		c1b, _ := cpuTime()
		t1b := time.Now()
		if err := plainRead(plain, readBuf); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		c2, _ := cpuTime()
		tLoad, tRead = tLoad+t1.Sub(t0), tRead+t2.Sub(t1b)
		cpuLoad, cpuRead = cpuLoad+c1-c0, cpuRead+c2-c1b
		ratios = append(ratios, t2.Sub(t1b).Seconds()/t1.Sub(t0).Seconds())
	}
	slices.Sort(ratios)
	gbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e9 }
	b.ReportMetric(gbs(tLoad), "load-GB/s")
	b.ReportMetric(gbs(tRead), "read-GB/s")
	b.ReportMetric(tRead.Seconds()/tLoad.Seconds(), "load/read")
	b.ReportMetric(ratios[len(ratios)/2], "median-load/read")
	if _, ok := cpuTime(); ok && cpuLoad > 0 {
		b.ReportMetric(cpuRead.Seconds()/cpuLoad.Seconds(), "cpu-read/load")
	}
}
