package transport

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"gorgonia.org/tensor"
)

const benchBytes = 4 << 20 // 4 MiB float32 tensors

// BenchmarkTCPThroughput compares moving 4 MiB float32 tensors through the
// TCP transport (frame, vectored write, reader goroutine, fresh receive
// tensor, mailbox) with plain loopback TCP streams carrying the same bytes:
// into a reused buffer (raw), into a fresh buffer per message (raw-alloc),
// and with io.Copy on both ends.
//
//	go test -run '^$' -bench TCPThroughput -benchtime 200x ./runtime/transport/
func BenchmarkTCPThroughput(b *testing.B) {
	b.Run("ppgen", func(b *testing.B) {
		trs := mustWorld(b, 2, nil)
		x := tensor.New(tensor.WithShape(benchBytes/4), tensor.WithBacking(make([]float32, benchBytes/4)))
		done := make(chan error, 1)
		b.SetBytes(benchBytes)
		b.ResetTimer()
		go func() {
			for range b.N {
				if _, _, err := trs[1].Recv(0, abi.ActChannel); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for range b.N {
			if err := trs[0].Send(1, abi.ActChannel, Tag{}, x); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
	b.Run("loopback-raw", func(b *testing.B) {
		c, rc := loopbackPair(b)
		done := make(chan error, 1)
		go func() {
			buf := make([]byte, benchBytes)
			for range b.N {
				if _, err := io.ReadFull(rc, buf); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		src := make([]byte, benchBytes)
		b.SetBytes(benchBytes)
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(src); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
	// As loopback-raw, but the receiver allocates a fresh 4 MiB tensor per
	// message, as a transport must when receivers own what they receive:
	// the share of the gap that is allocation (page faults, zeroing, GC).
	b.Run("loopback-raw-alloc", func(b *testing.B) {
		c, rc := loopbackPair(b)
		done := make(chan error, 1)
		go func() {
			for range b.N {
				_, raw := wire.Alloc(wire.Float32, []int{benchBytes / 4})
				if _, err := io.ReadFull(rc, raw); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		src := make([]byte, benchBytes)
		b.SetBytes(benchBytes)
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(src); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
	b.Run("loopback-io.Copy", func(b *testing.B) {
		c, rc := loopbackPair(b)
		done := make(chan error, 1)
		go func() {
			_, err := io.CopyN(io.Discard, rc, int64(b.N)*benchBytes)
			done <- err
		}()
		src := make([]byte, benchBytes)
		b.SetBytes(benchBytes)
		b.ResetTimer()
		for range b.N {
			if _, err := io.Copy(c, bytes.NewReader(src)); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}

// cpuPerOp starts measuring the process's CPU time (user and system, both
// ends of the connection and the runtime's idle spinning included) and
// returns the function that reports it per op as "cpu-ms/op": the work a
// message costs, which a box with cores to spare hides and a busy one does
// not. Call it after ResetTimer, its result once every op is done.
func cpuPerOp(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if used := cpuTime() - start; start > 0 && b.N > 0 {
			b.ReportMetric(float64(used.Nanoseconds())/1e6/float64(b.N), "cpu-ms/op")
		}
	}
}

// loopbackPair returns both ends of a plain loopback TCP connection.
func loopbackPair(b *testing.B) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	rc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); rc.Close() })
	return c, rc
}

// BenchmarkThroughput4MiB is issue 12's TCP figure: 4 MiB messages over
// loopback between two goroutines, in one run, alternating the paths.
//
//   - raw-reused: a plain net.Conn, 4 MiB writes read with io.ReadFull into
//     one reused buffer (the bound a transport can reach);
//   - raw-alloc: the same into a fresh 4 MiB buffer per message;
//   - ppgen-tcp: DialTCP world 2, Send and Recv of a 4 MiB float32 tensor,
//     the receiver handing each tensor back with Recycle once read (as
//     runtime/pipe does at the end of a chunk's backward);
//   - ppgen-tcp-norecycle: the same without Recycle (a fresh tensor per
//     receive, the transport before issue 12);
//   - ppgen-tcp-plain: ppgen-tcp without frame authentication
//     (PlainFrames), the transport before issue 35.
//
// The ppgen cases report cpu-ms/op (both ends' CPU per message) and, with
// recycling, fresh/op: receive arrays allocated rather than recycled per
// message (the warm-up's few only, in a steady state).
//
// Run with
//
//	go test -run '^$' -bench Throughput4MiB -benchtime 100x -count 5 -benchmem ./runtime/transport/
func BenchmarkThroughput4MiB(b *testing.B) {
	b.Run("raw-reused", func(b *testing.B) { benchRaw(b, benchBytes, false) })
	b.Run("raw-alloc", func(b *testing.B) { benchRaw(b, benchBytes, true) })
	b.Run("ppgen-tcp", func(b *testing.B) { benchPpgenTCP(b, benchBytes, true, false) })
	b.Run("ppgen-tcp-norecycle", func(b *testing.B) { benchPpgenTCP(b, benchBytes, false, false) })
	b.Run("ppgen-tcp-plain", func(b *testing.B) { benchPpgenTCP(b, benchBytes, true, true) })
}

// BenchmarkThroughput64KiB is BenchmarkThroughput4MiB's raw-reused,
// ppgen-tcp and ppgen-tcp-plain with 64 KiB messages: frames of one tagged
// chunk, where a frame's fixed costs weigh most.
//
//	go test -run '^$' -bench Throughput64KiB -benchtime 5000x -count 5 ./runtime/transport/
func BenchmarkThroughput64KiB(b *testing.B) {
	b.Run("raw-reused", func(b *testing.B) { benchRaw(b, 64<<10, false) })
	b.Run("ppgen-tcp", func(b *testing.B) { benchPpgenTCP(b, 64<<10, true, false) })
	b.Run("ppgen-tcp-plain", func(b *testing.B) { benchPpgenTCP(b, 64<<10, true, true) })
}

// benchRaw moves b.N size-byte messages over a plain loopback connection,
// into one reused buffer or (fresh) a new buffer per message.
func benchRaw(b *testing.B, size int, fresh bool) {
	c, rc := loopbackPair(b)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for range b.N {
			if fresh {
				buf = make([]byte, size)
			}
			if _, err := io.ReadFull(rc, buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	src := make([]byte, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	report := cpuPerOp(b)
	for range b.N {
		if _, err := c.Write(src); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	report()
}

// benchPpgenTCP moves b.N size-byte float32 tensors from rank 0 to rank 1 of a
// TCP world, the receiver taking each with Recv and, with recycle, handing
// it back; with plain, frames are not authenticated.
func benchPpgenTCP(b *testing.B, size int, recycle, plain bool) {
	trs := mustWorld(b, 2, func(r int, c *TCPConfig) { c.PlainFrames = plain; c.Logger = quiet })
	b.Cleanup(func() {
		for _, tr := range trs {
			tr.Kill()
		}
	})
	x := tensor.New(tensor.WithShape(size/4), tensor.WithBacking(make([]float32, size/4)))
	// Warm up outside the timer: 8 messages in flight at once, so that with
	// recycling the pool holds the arrays of the steady state (receives
	// allocate until as many are free as the reader ever has ahead of Recv).
	for range 8 {
		if err := trs[0].Send(1, abi.ActChannel, Tag{}, x); err != nil {
			b.Fatal(err)
		}
	}
	for range 8 {
		_, y, err := trs[1].Recv(0, abi.ActChannel)
		if err != nil {
			b.Fatal(err)
		}
		if recycle {
			trs[1].Recycle(y)
		}
	}
	done := make(chan error, 1)
	b.SetBytes(int64(size))
	b.ResetTimer()
	report := cpuPerOp(b)
	go func() {
		for range b.N {
			_, y, err := trs[1].Recv(0, abi.ActChannel)
			if err != nil {
				done <- err
				return
			}
			if recycle {
				trs[1].Recycle(y)
			}
		}
		done <- nil
	}()
	for range b.N {
		if err := trs[0].Send(1, abi.ActChannel, Tag{}, x); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	report()
	if recycle {
		_, fresh, _ := trs[1].pool.Stats()
		b.ReportMetric(float64(fresh)/float64(b.N+8), "fresh/op") // receive arrays allocated, not recycled
	}
}

// BenchmarkFrameTags is the cost of one end's payload tags alone (the GMACs
// of a frame's chunks, sealPayload; the reader computes the same), for the
// CPU arithmetic of BenchmarkThroughput4MiB and 64KiB: an authenticated
// message costs a plain one's CPU plus twice this.
//
//	go test -run '^$' -bench FrameTags ./runtime/transport/
func BenchmarkFrameTags(b *testing.B) {
	for _, size := range []int{64 << 10, benchBytes} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			keys := (&TCP{cfg: TCPConfig{Token: strings.Repeat("ab", 16)}}).frameKeys(make([]byte, 16), make([]byte, 16), true)
			s := &frameSealer{aead: keys.send}
			p := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			report := cpuPerOp(b)
			for range b.N {
				s.sealPayload(p)
			}
			report()
		})
	}
}
