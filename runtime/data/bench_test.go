package data

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// benchShard writes a shard of n uint16 tokens for a benchmark.
func benchShard(b *testing.B, n int) *Shard {
	b.Helper()
	return writeShard(b, b.TempDir(), "bench.tok", Uint16, 0, ramp(n, 1<<16))
}

// plainRead reads n bytes of path from offset off sequentially through a
// 64 KiB buffer: the baseline a shard read is compared with.
func plainRead(b *testing.B, path string, off, n int64) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, chunkBytes)
	for n > 0 {
		k, err := f.Read(buf[:min(int64(len(buf)), n)])
		if err != nil {
			b.Fatal(err)
		}
		n -= int64(k)
	}
}

// BenchmarkRead: read throughput of a 64 MiB uint16 shard against a plain
// sequential os.File read of the same number of bytes, A/B alternated in
// each iteration (gb/s-plain, gb/s-shard, shard/plain). sequential reads
// the whole shard in windows of 16K tokens (ReadAt, decoded to uint32,
// into one 64 KiB slice);
// sampled reads the Sampler's windows of 1025 tokens (a step of 8·8
// windows per replica, random offsets) through Sampler.Read, and reports
// as gb/s-pread plain os.File.ReadAt calls of the same windows' bytes
// (no decoding), the cost of random access alone.
func BenchmarkRead(b *testing.B) {
	const tokens = 32 << 20
	s := benchShard(b, tokens)
	path := filepath.Clean(s.Path())
	report := func(b *testing.B, plain, shard time.Duration, bytes int64) {
		n := float64(b.N) * float64(bytes)
		b.ReportMetric(n/plain.Seconds()/1e9, "gb/s-plain")
		b.ReportMetric(n/shard.Seconds()/1e9, "gb/s-shard")
		b.ReportMetric(plain.Seconds()/shard.Seconds(), "shard/plain")
	}
	b.Run("sequential", func(b *testing.B) {
		dst := make([]uint32, 16<<10) // 64 KiB: in cache, as the plain read's buffer
		bytes := int64(tokens) * 2
		b.SetBytes(bytes)
		var plain, shard time.Duration
		for b.Loop() {
			t0 := time.Now()
			plainRead(b, path, HeaderSize, bytes)
			t1 := time.Now()
			for off := int64(0); off < tokens; off += int64(len(dst)) {
				if err := s.ReadAt(dst, off); err != nil {
					b.Fatal(err)
				}
			}
			plain, shard = plain+t1.Sub(t0), shard+time.Since(t1)
		}
		report(b, plain, shard, bytes)
	})
	b.Run("sampled", func(b *testing.B) {
		sm, err := NewSampler([]*Shard{s}, Config{Seed: 1, SeqLen: 1024, Batch: 8, Micro: 8, Replicas: 1})
		if err != nil {
			b.Fatal(err)
		}
		const steps = 64
		bytes := int64(steps * 8 * 8 * 1025 * 2)
		b.SetBytes(bytes)
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		raw := make([]byte, 1025*2)
		var plain, shard, pread time.Duration
		step := int64(0)
		for b.Loop() {
			b.StopTimer()
			var ws []Window // the same windows, for the raw preads
			for k := range int64(steps) {
				for m := range 8 {
					ws, _ = sm.Windows(ws, step+k, m, 0)
				}
			}
			b.StartTimer()
			t0 := time.Now()
			plainRead(b, path, HeaderSize, bytes)
			plain += time.Since(t0)
			readShard := func() {
				t := time.Now()
				for k := range int64(steps) {
					if _, err := sm.Read(step+k, 0); err != nil {
						b.Fatal(err)
					}
				}
				shard += time.Since(t)
			}
			readRaw := func() {
				t := time.Now()
				for _, w := range ws {
					if _, err := f.ReadAt(raw, HeaderSize+2*w.Offset); err != nil {
						b.Fatal(err)
					}
				}
				pread += time.Since(t)
			}
			// The second to read the windows finds them in the CPU's
			// cache: alternate which goes first.
			if step/steps%2 == 0 {
				readShard()
				readRaw()
			} else {
				readRaw()
				readShard()
			}
			step += steps
		}
		report(b, plain, shard, bytes)
		b.ReportMetric(float64(b.N)*float64(bytes)/pread.Seconds()/1e9, "gb/s-pread")
	})
}
