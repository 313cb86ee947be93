package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"gorgonia.org/tensor"
)

func f64(shape []int, vals ...float64) *tensor.Dense {
	if len(shape) == 0 {
		return tensor.New(tensor.FromScalar(vals[0]))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(vals))
}

func f32(shape []int, vals ...float32) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(vals))
}

func sameTensor(a, b *tensor.Dense) error {
	if a.Dtype() != b.Dtype() {
		return fmt.Errorf("dtype %v != %v", a.Dtype(), b.Dtype())
	}
	if !a.Shape().Eq(b.Shape()) || len(a.Shape()) != len(b.Shape()) {
		return fmt.Errorf("shape %v != %v", a.Shape(), b.Shape())
	}
	va, _ := wire.PayloadOf(a)
	vb, _ := wire.PayloadOf(b)
	if string(va.Raw) != string(vb.Raw) {
		return fmt.Errorf("data %v != %v", a.Data(), b.Data())
	}
	return nil
}

// testTensors covers dtypes and shapes: scalar, empty, 1-D, 3-D, a transposed view.
func testTensors() []*tensor.Dense {
	tr := f64([]int{2, 3}, 1, 2, 3, 4, 5, 6)
	tr.T() // a transposed view: must travel as its logical (3, 2) layout
	return []*tensor.Dense{
		f64(nil, 3.5),
		f32([]int{0, 4}),
		f32([]int{5}, 1, -2, 3.25, 4, 1e-30),
		f64([]int{2, 2, 2}, 1, 2, 3, 4, 5, 6, 7, 8),
		tr,
	}
}

// exerciseWorld sends, from every rank to every other, a sequence of tensors
// interleaved over channels, and checks FIFO per (peer, channel) and contents.
func exerciseWorld(t *testing.T, trs []Transport) {
	t.Helper()
	world := len(trs)
	tensors := testTensors()
	var wg sync.WaitGroup
	errs := make(chan error, world*world*8)
	for r := range trs {
		wg.Go(func() {
			for p := range world {
				if p == r {
					continue
				}
				for i, x := range tensors {
					for ch := abi.ActChannel; ch <= abi.DataChannel; ch++ {
						tag := Tag{Stage: int32(r), Micro: int32(100*int(ch) + i)}
						if err := trs[r].Send(p, ch, tag, x); err != nil {
							errs <- err
							return
						}
					}
				}
			}
		})
		wg.Go(func() {
			for p := range world {
				if p == r {
					continue
				}
				// Receive channels in reverse order: FIFO holds per channel only.
				for ch := abi.DataChannel; ch >= abi.ActChannel; ch-- {
					for i, want := range tensors {
						tag, got, err := trs[r].Recv(p, ch)
						if err != nil {
							errs <- err
							return
						}
						if wt := (Tag{Stage: int32(p), Micro: int32(100*int(ch) + i)}); tag != wt {
							errs <- fmt.Errorf("rank %d from %d on %s: tag %v, want %v", r, p, ch, tag, wt)
							return
						}
						if err := sameTensor(got, want); err != nil {
							errs <- fmt.Errorf("rank %d from %d on %s #%d: %v", r, p, ch, i, err)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestInProcRoundTrip(t *testing.T) {
	exerciseWorld(t, NewInProc(3))
}

func TestInProcSendCopies(t *testing.T) {
	trs := NewInProc(2)
	x := f64([]int{2}, 1, 2)
	if err := trs[0].Send(1, abi.ActChannel, Tag{}, x); err != nil {
		t.Fatal(err)
	}
	x.Float64s()[0] = 99
	_, got, err := trs[1].Recv(0, abi.ActChannel)
	if err != nil {
		t.Fatal(err)
	}
	if got.Float64s()[0] != 1 {
		t.Fatalf("receiver saw the sender's later write: %v", got.Data())
	}
}

func TestInProcCloseAbortTimeout(t *testing.T) {
	trs := NewInProc(3, InProcTimeout(200*time.Millisecond))
	x := f64([]int{1}, 1)
	if err := trs[1].Send(0, abi.GradChannel, Tag{}, x); err != nil {
		t.Fatal(err)
	}
	trs[1].Close()
	if _, _, err := trs[0].Recv(1, abi.GradChannel); err != nil {
		t.Fatalf("message sent before Close lost: %v", err)
	}
	_, _, err := trs[0].Recv(1, abi.GradChannel)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "rank 1 closed the connection") {
		t.Fatalf("recv after peer close: %v", err)
	}
	// Timeout names the silent peer.
	start := time.Now()
	_, _, err = trs[0].Recv(2, abi.ActChannel)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 2") || time.Since(start) > 10*time.Second {
		t.Fatalf("timeout: %v after %v", err, time.Since(start))
	}
	// Abort wakes a pending receive on a peer.
	done := make(chan error)
	go func() { _, _, err := trs[0].Recv(2, abi.ActChannel); done <- err }()
	time.Sleep(20 * time.Millisecond)
	trs[2].Abort(errors.New("stage 5 exploded"))
	err = <-done
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "rank 2 aborted: stage 5 exploded") {
		t.Fatalf("recv after peer abort: %v", err)
	}
}

// world starts n TCP ranks as goroutines on 127.0.0.1 and returns their
// transports (nil where DialTCP failed) and errors.
func world(t testing.TB, n int, mod func(r int, c *TCPConfig)) ([]*TCP, []error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*TCP, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := TCPConfig{Rank: r, World: n, MasterAddr: ln.Addr().String(), Token: testToken, Fingerprint: "sha256:abc",
			RendezvousTimeout: 10 * time.Second, Timeout: 10 * time.Second, Logger: quiet}
		if r == 0 {
			cfg.Listener = ln
		}
		if mod != nil {
			mod(r, &cfg)
		}
		wg.Go(func() { trs[r], errs[r] = DialTCP(context.Background(), cfg) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, tr := range trs {
			if tr != nil {
				tr.Kill()
			}
		}
	})
	return trs, errs
}

// quiet discards logs (refused connections are logged as warnings).
var quiet = slog.New(slog.DiscardHandler)

// withoutAddrs removes " at host:port" from an error message, so that
// expected messages need not know the ephemeral ports.
func withoutAddrs(s string) string {
	return regexp.MustCompile(` at [0-9a-f.:\[\]]+:[0-9]+`).ReplaceAllString(s, "")
}

func mustWorld(t testing.TB, n int, mod func(r int, c *TCPConfig)) []*TCP {
	t.Helper()
	trs, errs := world(t, n, mod)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return trs
}

func asTransports(trs []*TCP) []Transport {
	out := make([]Transport, len(trs))
	for i, t := range trs {
		out[i] = t
	}
	return out
}

func TestTCPRoundTrip(t *testing.T) {
	trs := mustWorld(t, 3, nil)
	exerciseWorld(t, asTransports(trs))
	var wg sync.WaitGroup
	for _, tr := range trs {
		wg.Go(func() {
			if err := tr.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func TestTCPSingleRank(t *testing.T) {
	tr, err := DialTCP(context.Background(), TCPConfig{Rank: 0, World: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
}

func TestTCPHandshakeRefusals(t *testing.T) {
	cases := []struct {
		name string
		mod  func(r int, c *TCPConfig)
		want []string // every failing rank's error contains one of these
	}{
		{"fingerprint", func(r int, c *TCPConfig) {
			if r == 2 {
				c.Fingerprint = "sha256:xyz"
			}
		}, []string{"rank 2 runs schedule fingerprint sha256:xyz, this rank (0) runs sha256:abc: " + wire.SameScheduleHelp,
			"rank 0 runs schedule fingerprint sha256:abc, this rank (2) runs sha256:xyz: " + wire.SameScheduleHelp}},
		// With the schedules described (TCPConfig.Schedule), the
		// message names the schedule each side runs, and what to do.
		{"schedule", func(r int, c *TCPConfig) {
			c.Schedule = "1f1b (P=3, V=1, M=6)"
			if r == 2 {
				c.Schedule, c.Fingerprint = "zbv (P=3, V=2, M=6)", "sha256:0123456789abcdef0123"
			}
		}, []string{"rank 2 runs schedule zbv (P=3, V=2, M=6), fingerprint sha256:0123456789ab..; this rank (0) runs schedule 1f1b (P=3, V=1, M=6), fingerprint sha256:abc: " +
			"every rank must run the same generated schedule: build every rank from the same generated code (go generate ./... and rebuild, then start that one binary on every rank), or pass the same -schedule to every rank",
			"rank 0 runs schedule 1f1b (P=3, V=1, M=6), fingerprint sha256:abc; this rank (2) runs schedule zbv (P=3, V=2, M=6), fingerprint sha256:0123456789ab..: " +
				"every rank must run the same generated schedule: build every rank from the same generated code (go generate ./... and rebuild, then start that one binary on every rank), or pass the same -schedule to every rank"}},
		// The same schedule, another program: other flags or another
		// ppgen generated it.
		{"same schedule, other program", func(r int, c *TCPConfig) {
			c.Schedule = "1f1b (P=3, V=1, M=6)"
			if r == 2 {
				c.Fingerprint = "sha256:xyz"
			}
		}, []string{"rank 2 runs schedule 1f1b (P=3, V=1, M=6), fingerprint sha256:xyz; this rank (0) runs schedule 1f1b (P=3, V=1, M=6), fingerprint sha256:abc: " +
			"the same schedule generated differently (other ppgen flags, or another ppgen version): generate it once (go generate ./...) and rebuild every rank from that code",
			"rank 0 runs schedule 1f1b (P=3, V=1, M=6), fingerprint sha256:abc; this rank (2) runs schedule 1f1b (P=3, V=1, M=6), fingerprint sha256:xyz: the same schedule generated differently"}},
		// A rank with another token is refused as an outsider would be:
		// it fails at once ("rank 0 failed authentication"), the others
		// wait for it until the rendezvous times out and say why.
		{"token", func(r int, c *TCPConfig) {
			c.RendezvousTimeout = 2 * time.Second
			if r == 1 {
				c.Token = "deadbeefdeadbeefdeadbeefdeadbeef"
			}
		}, []string{"refused this rank: failed authentication: the shared token differs",
			"ranks [1] did not join within 2s; 1 connection(s) were refused in the handshake, the last from 127.0.0.1"}},
		{"world", func(r int, c *TCPConfig) {
			if r == 2 {
				c.World = 4
			}
		}, []string{"rank 2 runs with world size 4, this rank (0) with 3: " + sameWorldHelp, "rank 0 runs with world size 3, this rank (2) with 4: " + sameWorldHelp}},
		{"world, schedules named", func(r int, c *TCPConfig) {
			c.Schedule = "1f1b (P=3, V=1, M=6)"
			if r == 2 {
				c.World, c.Schedule = 4, "1f1b (P=4, V=1, M=6)"
			}
		}, []string{"rank 2 runs with world size 4, this rank (0) with 3 (rank 2 runs schedule 1f1b (P=4, V=1, M=6), fingerprint sha256:abc; this rank runs schedule 1f1b (P=3, V=1, M=6), fingerprint sha256:abc): " +
			"every rank must be started with the same WORLD_SIZE, the schedule's ranks (times the data-parallel replicas): start the job with one launcher command (ppgen launch -n N, torchrun, srun), and every rank from the same binary and flags",
			"rank 0 runs with world size 3, this rank (2) with 4 (rank 0 runs schedule 1f1b (P=3, V=1, M=6), fingerprint sha256:abc; this rank runs schedule 1f1b (P=4, V=1, M=6), fingerprint sha256:abc): every rank must be started with the same WORLD_SIZE"}},
		{"duplicate rank", func(r int, c *TCPConfig) {
			c.AbortLinger = time.Second // rank 2 never comes: rank 0 lingers for it
			if r == 2 {
				c.Rank = 1
			}
		}, []string{"two processes claim rank 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, errs := world(t, 3, tc.mod)
			if time.Since(start) > 8*time.Second {
				t.Errorf("refusal took %v", time.Since(start))
			}
			for r, err := range errs {
				if err == nil {
					t.Errorf("rank %d: rendezvous succeeded", r)
					continue
				}
				ok := false
				for _, w := range tc.want {
					ok = ok || strings.Contains(withoutAddrs(err.Error()), w)
				}
				if !ok {
					t.Errorf("rank %d: %v\nwant one of %q", r, err, tc.want)
				}
			}
		})
	}
}

func TestTCPRendezvousTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = DialTCP(context.Background(), TCPConfig{Rank: 0, World: 3, Listener: ln, Token: testToken, RendezvousTimeout: 300 * time.Millisecond})
	if err == nil || !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "ranks [1 2] did not join") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
	// A worker whose master cannot be reached. Port 1 is privileged and
	// unused on test machines; a port freed by this test could be taken by
	// another test package running in parallel.
	_, err = DialTCP(context.Background(), TCPConfig{Rank: 1, World: 2, MasterAddr: "127.0.0.1:1", Token: testToken, RendezvousTimeout: 300 * time.Millisecond})
	if err == nil || !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "cannot reach rank 0") {
		t.Fatalf("unreachable master: err = %v", err)
	}
	// A worker whose master accepts the connection (the kernel does, from
	// the backlog) but never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_, err = DialTCP(context.Background(), TCPConfig{Rank: 1, World: 2, MasterAddr: silent.Addr().String(), Token: testToken, RendezvousTimeout: 300 * time.Millisecond})
	if err == nil || !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "did not finish the handshake in time") {
		t.Fatalf("silent master: err = %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestTCPIgnoresJunkConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	defer c.Close()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() {
			cfg := TCPConfig{Rank: r, World: 2, MasterAddr: ln.Addr().String(), Token: testToken, RendezvousTimeout: 5 * time.Second, Logger: quiet}
			if r == 0 {
				cfg.Listener = ln
			}
			tr, err := DialTCP(context.Background(), cfg)
			errs[r] = err
			if err == nil {
				defer tr.Kill()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestTCPFrameCap(t *testing.T) {
	const capBytes = 1 << 10
	trs := mustWorld(t, 2, func(r int, c *TCPConfig) {
		if r == 1 {
			c.MaxFrameBytes = capBytes
		} else {
			c.MaxFrameBytes = 1 << 20
		}
	})
	big := f32([]int{512}, make([]float32, 512)...) // 2 KiB + header
	// Sender side: rank 1's own cap refuses before writing; the transport survives.
	err := trs[1].Send(0, abi.ActChannel, Tag{}, big)
	if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "over the cap of 1024 bytes") {
		t.Fatalf("send over cap: %v", err)
	}
	if err := trs[1].Send(0, abi.ActChannel, Tag{}, f32([]int{2}, 1, 2)); err != nil {
		t.Fatalf("small send after refused big one: %v", err)
	}
	if _, _, err := trs[0].Recv(1, abi.ActChannel); err != nil {
		t.Fatal(err)
	}
	// Receiver side: rank 0 (cap 1 MiB) sends 2 KiB to rank 1 (cap 1 KiB).
	if err := trs[0].Send(1, abi.ActChannel, Tag{}, big); err != nil {
		t.Fatal(err)
	}
	_, _, err = trs[1].Recv(0, abi.ActChannel)
	if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "rank 0 sent a tensor of shape [512], 2048 bytes, over this rank's cap of 1024 bytes") {
		t.Fatalf("recv over cap: %v", err)
	}
}

func TestTCPGracefulClose(t *testing.T) {
	trs := mustWorld(t, 2, nil)
	for i := range 3 {
		if err := trs[1].Send(0, abi.ActChannel, Tag{Micro: int32(i)}, f64([]int{1}, float64(i))); err != nil {
			t.Fatal(err)
		}
	}
	go trs[1].Close()
	for i := range 3 {
		tag, x, err := trs[0].Recv(1, abi.ActChannel)
		if err != nil || tag.Micro != int32(i) || x.Float64s()[0] != float64(i) {
			t.Fatalf("message %d: %v %v %v", i, tag, x, err)
		}
	}
	_, _, err := trs[0].Recv(1, abi.ActChannel)
	if !errors.Is(err, ErrPeerClosed) || !strings.Contains(err.Error(), "rank 1 closed the connection") {
		t.Fatalf("recv after close: %v", err)
	}
	if err := trs[0].Send(1, abi.ActChannel, Tag{}, f64([]int{1}, 1)); !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("send after peer close: %v", err)
	}
	trs[0].Close()
}

// expectPeerFailure waits for a pending Recv on every survivor to fail with
// an error naming dead, within limit.
func expectPeerFailure(t *testing.T, trs []*TCP, dead int, limit time.Duration, kill func(), wantSub string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(trs))
	started := make(chan struct{}, len(trs))
	for r, tr := range trs {
		if r == dead {
			continue
		}
		wg.Go(func() {
			started <- struct{}{}
			_, _, errs[r] = tr.Recv(dead, abi.ActChannel)
		})
	}
	for range len(trs) - 1 {
		<-started
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	kill()
	wg.Wait()
	if d := time.Since(start); d > limit {
		t.Errorf("failure detected after %v, want < %v", d, limit)
	}
	for r, err := range errs {
		if r == dead {
			continue
		}
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Peer != dead || !strings.Contains(err.Error(), wantSub) {
			t.Errorf("rank %d: %v, want a PeerError naming rank %d (%q)", r, err, dead, wantSub)
		}
		// Later operations fail too.
		if err := trs[r].Send((r+1)%len(trs), abi.GradChannel, Tag{}, f64([]int{1}, 1)); err == nil && (r+1)%len(trs) != dead {
			t.Errorf("rank %d: send after failure succeeded", r)
		}
	}
}

// The peer-failure tests run with a progress timeout of a minute, and
// bound the detection at 20 s: far from both the mechanism's time and the
// timeout, however loaded the machine.
const (
	peerTimeout = time.Minute
	detectLimit = 20 * time.Second
)

func TestTCPKilledPeer(t *testing.T) {
	trs := mustWorld(t, 3, func(r int, c *TCPConfig) { c.Timeout = peerTimeout })
	expectPeerFailure(t, trs, 1, detectLimit, trs[1].Kill, "rank 1 closed the connection")
}

// TestTCPHungPeer: a peer that stops sending anything, heartbeats
// included, is caught by HeartbeatTimeout. Its 2 s (and the interval's
// 250 ms) leave the live ranks' heartbeats room on a loaded machine.
func TestTCPHungPeer(t *testing.T) {
	trs := mustWorld(t, 3, func(r int, c *TCPConfig) {
		c.Timeout = peerTimeout
		c.HeartbeatInterval = 250 * time.Millisecond
		c.HeartbeatTimeout = 2 * time.Second
	})
	time.Sleep(600 * time.Millisecond) // heartbeats keep idle connections alive
	// Rank 2 stops sending anything, but its sockets stay open.
	expectPeerFailure(t, trs, 2, detectLimit, func() { trs[2].hbPaused.Store(true) }, "rank 2 sent nothing for 2s")
}

func TestTCPDefaultsDetectDeathWithin10s(t *testing.T) {
	var c TCPConfig
	c.World = 1
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatTimeout+c.HeartbeatInterval > 10*time.Second {
		t.Fatalf("default heartbeat timeout %v + interval %v exceeds 10 s", c.HeartbeatTimeout, c.HeartbeatInterval)
	}
}

func TestTCPAbort(t *testing.T) {
	trs := mustWorld(t, 3, func(r int, c *TCPConfig) { c.Timeout = peerTimeout })
	expectPeerFailure(t, trs, 0, detectLimit, func() { trs[0].Abort(errors.New("stage 0 exploded")) }, "rank 0 aborted: stage 0 exploded")
}

// TestAbortRelaysOrigin: a rank that aborts because of another rank's
// failure passes on the original attribution.
func TestAbortRelaysOrigin(t *testing.T) {
	for _, kind := range []string{"inproc", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			var trs []Transport
			if kind == "inproc" {
				trs = NewInProc(3)
			} else {
				trs = asTransports(mustWorld(t, 3, nil))
			}
			cause := fmt.Errorf("recv grad from rank 2: %w", &PeerError{Peer: 2, Reason: "closed the connection (EOF)", Err: ErrPeerClosed})
			trs[1].Abort(cause)
			_, _, err := trs[0].Recv(1, abi.ActChannel)
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Peer != 2 || !pe.Relayed || pe.Via != 1 || !errors.Is(err, ErrPeerClosed) ||
				!strings.Contains(err.Error(), "rank 2 closed the connection (EOF) (reported by rank 1)") {
				t.Fatalf("err = %v (%+v)", err, pe)
			}
			// Relaying again keeps the first observer.
			trs[0].Abort(err)
			_, _, err = trs[2].Recv(0, abi.ActChannel)
			if !errors.As(err, &pe) || pe.Peer != 2 || pe.Via != 1 {
				t.Fatalf("second relay: %v", err)
			}
		})
	}
}

// TestTCPCloseIsPromptAndLossless: ranks closing one after another in one
// process take a round trip each, not the linger timeout, and a large
// message sent right before Close still arrives whole.
func TestTCPCloseIsPromptAndLossless(t *testing.T) {
	trs := mustWorld(t, 3, nil)
	big := f32([]int{2 << 20}, make([]float32, 2<<20)...) // 8 MiB
	big.Float32s()[len(big.Float32s())-1] = 7
	if err := trs[2].Send(0, abi.GradChannel, Tag{Micro: 9}, big); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	trs[2].Close()
	trs[1].Close()
	if d := time.Since(start); d >= lingerTimeout {
		t.Errorf("two sequential Closes took %v: one waited the linger timeout (%v)", d, lingerTimeout)
	}
	tag, got, err := trs[0].Recv(2, abi.GradChannel)
	if err != nil || tag.Micro != 9 || got.Float32s()[len(got.Float32s())-1] != 7 {
		t.Fatalf("message sent before Close: %v %v", tag, err)
	}
	trs[0].Close()
}
