package collective_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/transport"
)

// BenchmarkAllReduce16MiB all-reduces 16 MiB of float32 over 4 members:
// through a Comm on the in-process and the TCP transport, and through a
// plain ring all-reduce over raw loopback TCP sockets (reused buffers, no
// framing, no checks): the floor the transport-based collectives are held
// against, measured in the same run. Throughput is the tensor's bytes per
// second (b.SetBytes), as NCCL's "algorithm bandwidth".
//
//	nice -n 19 go test -run '^$' -bench AllReduce16MiB -benchtime 5x -count 3 ./runtime/collective/
func BenchmarkAllReduce16MiB(b *testing.B) {
	const n, bytes = 4, 16 << 20
	const elems = bytes / 4
	b.Run("inproc", func(b *testing.B) {
		benchComm(b, transport.NewInProc(n), elems)
	})
	b.Run("tcp", func(b *testing.B) {
		benchComm(b, tcpWorld(b, n, time.Minute), elems)
	})
	b.Run("raw-ring", func(b *testing.B) {
		benchRawRing(b, n, elems)
	})
}

// BenchmarkAllReduceSmall all-reduces 16 float32 over 4 members on the
// in-process and TCP transports: latency-bound, where the header exchange
// before every collective (its n-1 small steps) costs most.
//
//	nice -n 19 go test -run '^$' -bench AllReduceSmall -count 5 ./runtime/collective/
func BenchmarkAllReduceSmall(b *testing.B) {
	const n, elems = 4, 16
	b.Run("inproc", func(b *testing.B) {
		benchComm(b, transport.NewInProc(n), elems)
	})
	b.Run("tcp", func(b *testing.B) {
		benchComm(b, tcpWorld(b, n, time.Minute), elems)
	})
}

func benchComm(b *testing.B, trs []transport.Transport, elems int) {
	n := len(trs)
	comms := make([]*collective.Comm, n)
	bufs := make([]*tensor.Dense, n)
	for r := range n {
		comms[r], _ = collective.New(trs[r], abi.ActChannel)
		v := make([]float32, elems)
		for i := range v {
			v[i] = float32(r)
		}
		bufs[r] = tensor.New(tensor.WithShape(elems), tensor.WithBacking(v))
	}
	b.SetBytes(int64(elems) * 4)
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range n {
			wg.Go(func() { errs[r] = comms[r].AllReduce(bufs[r]) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRawRing: n goroutines in a ring of loopback TCP connections, each
// running reduce-scatter then all-gather with one reused receive buffer.
func benchRawRing(b *testing.B, n, elems int) {
	lns := make([]net.Listener, n)
	for r := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns[r] = ln
		defer ln.Close()
	}
	out := make([]net.Conn, n) // to r+1
	in := make([]net.Conn, n)  // from r-1
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, err := lns[r].Accept()
			if err != nil {
				b.Error(err)
				return
			}
			in[r] = c
		})
	}
	for r := range n {
		c, err := net.Dial("tcp", lns[(r+1)%n].Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		out[r] = c
	}
	wg.Wait()
	defer func() {
		for r := range n {
			out[r].Close()
			if in[r] != nil {
				in[r].Close()
			}
		}
	}()
	k := elems / n
	data, recv := make([][]float32, n), make([][]float32, n)
	for r := range data {
		data[r], recv[r] = make([]float32, elems), make([]float32, k)
	}
	b.SetBytes(int64(elems) * 4)
	b.ResetTimer()
	for range b.N {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() { errs[r] = rawAllReduce(data[r], recv[r], r, n, k, out[r], in[r]) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
}

// rawAllReduce is the ring all-reduce on raw bytes: each step writes the
// chunk's memory as it is (native byte order, no copy) and reads into one
// receive buffer, reused, viewed as float32.
func rawAllReduce(x []float32, recv []float32, r, n, k int, out, in net.Conn) error {
	recvBytes := asBytes(recv)
	step := func(send, got int, add bool) error {
		done := make(chan error, 1)
		go func() { _, err := out.Write(asBytes(x[send*k : (send+1)*k])); done <- err }()
		if _, err := io.ReadFull(in, recvBytes); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
		dst := x[got*k : (got+1)*k]
		if add {
			for i := range dst {
				dst[i] += recv[i]
			}
		} else {
			copy(dst, recv)
		}
		return nil
	}
	mod := func(a int) int { return ((a % n) + n) % n }
	for s := range n - 1 {
		if err := step(mod(r-s-1), mod(r-s-2), true); err != nil {
			return fmt.Errorf("reduce-scatter step %d: %w", s, err)
		}
	}
	for s := range n - 1 {
		if err := step(mod(r-s), mod(r-s-1), false); err != nil {
			return fmt.Errorf("all-gather step %d: %w", s, err)
		}
	}
	return nil
}

func asBytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}
