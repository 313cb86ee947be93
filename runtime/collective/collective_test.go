package collective_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/transport"
)

// tcpWorld starts n TCP ranks on loopback as goroutines.
func tcpWorld(t testing.TB, n int, timeout time.Duration) []transport.Transport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]transport.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := transport.TCPConfig{Rank: r, World: n, MasterAddr: ln.Addr().String(), Token: "5ec7e75ec7e75ec7e75ec7e75ec7e75e",
			RendezvousTimeout: 20 * time.Second, Timeout: timeout, Logger: slog.New(slog.DiscardHandler)}
		if r == 0 {
			cfg.Listener = ln
		}
		wg.Go(func() {
			tr, err := transport.DialTCP(context.Background(), cfg)
			if err == nil {
				trs[r] = tr
			}
			errs[r] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tr := range trs {
			tr.Abort(errors.New("test over"))
		}
	})
	return trs
}

func worlds(t *testing.T, n int) map[string][]transport.Transport {
	return map[string][]transport.Transport{
		"inproc": transport.NewInProc(n, transport.InProcTimeout(20*time.Second)),
		"tcp":    tcpWorld(t, n, 20*time.Second),
	}
}

// inputs returns member m's input of L float64 values (seeded).
func inputs(n, L int, seed uint64) [][]float64 {
	out := make([][]float64, n)
	for m := range out {
		rng := rand.New(rand.NewPCG(seed, uint64(m)))
		out[m] = make([]float64, L)
		for i := range out[m] {
			// Mixed magnitudes, so that the association order shows in the bits.
			out[m][i] = (rng.Float64()*2 - 1) * math.Pow(10, float64(rng.IntN(12)-6))
		}
	}
	return out
}

// refSum is the documented order: every element summed over the members
// in member order, left to right.
func refSum(xs [][]float64, L int) []float64 {
	out := make([]float64, L)
	for i := range L {
		acc := xs[0][i]
		for m := 1; m < len(xs); m++ {
			acc += xs[m][i]
		}
		out[i] = acc
	}
	return out
}

// run runs f on every member of trs at once.
func run(trs []transport.Transport, f func(c *collective.Comm) error) []error {
	errs := make([]error, len(trs))
	var wg sync.WaitGroup
	for r, tr := range trs {
		c, err := collective.New(tr, abi.ActChannel)
		if err != nil {
			errs[r] = err
			continue
		}
		wg.Go(func() { errs[r] = f(c) })
	}
	wg.Wait()
	return errs
}

func vec64(v []float64) *tensor.Dense {
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(append([]float64(nil), v...)))
}

func TestCollectivesAgainstReference(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		for name, trs := range worlds(t, n) {
			for _, L := range []int{1, 5, 12, 37} {
				t.Run(fmt.Sprintf("%s/n%d/L%d", name, n, L), func(t *testing.T) {
					xs := inputs(n, L, uint64(7*L+n))
					want := refSum(xs, L)
					k := collective.ChunkLen(L, n)
					got := make([][]float64, n)
					gotRS := make([][]float64, n)
					gotAG := make([][]float64, n)
					gotBC := make([][]float64, n)
					root := n - 1
					errs := run(trs, func(c *collective.Comm) error {
						r := c.Rank()
						x := vec64(xs[r])
						if err := c.AllReduce(x); err != nil {
							return err
						}
						got[r] = x.Float64s()
						rs, err := c.ReduceScatter(vec64(xs[r]))
						if err != nil {
							return err
						}
						gotRS[r] = rs.Float64s()
						shard := make([]float64, k)
						copy(shard, xs[r][min(r*k, L):min((r+1)*k, L)])
						ag, err := c.AllGather(vec64(shard))
						if err != nil {
							return err
						}
						gotAG[r] = ag.Float64s()
						b := vec64(make([]float64, L))
						if r == root {
							b = vec64(xs[r])
						}
						if err := c.Broadcast(b, root); err != nil {
							return err
						}
						gotBC[r] = b.Float64s()
						return nil
					})
					if err := errors.Join(errs...); err != nil {
						t.Fatal(err)
					}
					for r := range n {
						for i := range L {
							if math.Float64bits(got[r][i]) != math.Float64bits(want[i]) {
								t.Fatalf("all-reduce: member %d element %d = %v, want %v (the documented order)", r, i, got[r][i], want[i])
							}
							if gotBC[r][i] != xs[root][i] {
								t.Fatalf("broadcast: member %d element %d = %v, want %v", r, i, gotBC[r][i], xs[root][i])
							}
						}
						if len(gotRS[r]) != k {
							t.Fatalf("reduce-scatter: member %d got %d elements, want %d", r, len(gotRS[r]), k)
						}
						for i := range k {
							j := r*k + i
							w := 0.0
							if j < L {
								w = want[j]
							}
							if math.Float64bits(gotRS[r][i]) != math.Float64bits(w) {
								t.Fatalf("reduce-scatter: member %d element %d = %v, want %v", r, i, gotRS[r][i], w)
							}
						}
						if len(gotAG[r]) != n*k {
							t.Fatalf("all-gather: member %d got %d elements, want %d", r, len(gotAG[r]), n*k)
						}
						for j := range n * k {
							w := 0.0
							if j < L && j/k < n {
								w = xs[j/k][j]
							}
							if gotAG[r][j] != w {
								t.Fatalf("all-gather: member %d element %d = %v, want %v", r, j, gotAG[r][j], w)
							}
						}
					}
				})
			}
		}
	}
}

// TestAllReduceFloat32 checks float32 against a float64 sum within float32
// rounding, and that every member has the same bits.
func TestAllReduceFloat32(t *testing.T) {
	const n, L = 3, 50
	trs := transport.NewInProc(n)
	xs := inputs(n, L, 3)
	got := make([][]float32, n)
	errs := run(trs, func(c *collective.Comm) error {
		v := make([]float32, L)
		for i, x := range xs[c.Rank()] {
			v[i] = float32(x)
		}
		x := tensor.New(tensor.WithShape(5, 10), tensor.WithBacking(v))
		err := c.AllReduce(x)
		got[c.Rank()] = v
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range L {
		var want float64
		for m := range n {
			want += float64(float32(xs[m][i]))
		}
		if d := math.Abs(float64(got[0][i]) - want); d > 1e-6*math.Abs(want)+1e-12 {
			t.Errorf("element %d: %v, want %v", i, got[0][i], want)
		}
		for r := 1; r < n; r++ {
			if math.Float32bits(got[r][i]) != math.Float32bits(got[0][i]) {
				t.Errorf("element %d: member %d has %v, member 0 %v", i, r, got[r][i], got[0][i])
			}
		}
	}
}

// TestFailedMemberNamed: a member that aborts fails the others' collective
// with an error naming it (a *transport.PeerError), and a member that never
// joins fails the others after the progress timeout.
func TestFailedMemberNamed(t *testing.T) {
	for name, mk := range map[string]func(n int, d time.Duration) []transport.Transport{
		"inproc": func(n int, d time.Duration) []transport.Transport {
			return transport.NewInProc(n, transport.InProcTimeout(d))
		},
		"tcp": func(n int, d time.Duration) []transport.Transport { return tcpWorld(t, n, d) },
	} {
		t.Run(name+"/abort", func(t *testing.T) {
			trs := mk(3, 20*time.Second)
			trs[2].Abort(errors.New("member 2 ran out of memory"))
			errs := run(trs[:2], func(c *collective.Comm) error { return c.AllReduce(vec64(make([]float64, 9))) })
			for r, err := range errs {
				var pe *transport.PeerError
				var ce *collective.Error
				if !errors.As(err, &pe) || pe.Peer != 2 || !errors.As(err, &ce) || ce.Op != "all-reduce" {
					t.Errorf("member %d: %v; want a collective.Error wrapping a PeerError naming rank 2", r, err)
				}
			}
		})
		t.Run(name+"/timeout", func(t *testing.T) {
			trs := mk(2, 300*time.Millisecond)
			c, err := collective.New(trs[0], abi.ActChannel)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = c.AllReduce(vec64(make([]float64, 4)))
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrTimeout) || !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "member 1") {
				t.Fatalf("%v; want a timeout naming member 1", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	c, err := collective.New(transport.NewInProc(2)[0], abi.ActChannel)
	if err != nil {
		t.Fatal(err)
	}
	ints := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2}))
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", c.AllReduce(nil), "nil tensor"},
		{"ints", c.AllReduce(ints), "want float32 or float64"},
		{"root", c.Broadcast(vec64([]float64{1}), 5), "root 5 outside [0, 2)"},
		{"gather into", c.AllGatherInto(vec64([]float64{1, 2, 3})), "not a positive multiple"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.name, tc.err, tc.want)
		}
	}
	if _, err := collective.New(nil, abi.ActChannel); err == nil {
		t.Error("New(nil) succeeded")
	}
}

func TestAsyncOrder(t *testing.T) {
	trs := transport.NewInProc(2)
	out := make([][]float64, 2)
	errs := run(trs, func(c *collective.Comm) error {
		var a collective.Async
		x, y := vec64([]float64{1, 2}), vec64([]float64{10, 20})
		p1 := a.Go(func() error { return c.AllReduce(x) })
		p2 := a.Go(func() error { return c.AllReduce(y) })
		if err := p2.Wait(); err != nil {
			return err
		}
		if !p1.Done() {
			return errors.New("the second collective ended before the first")
		}
		out[c.Rank()] = append(x.Float64s(), y.Float64s()...)
		return a.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out[0]) != "[2 4 20 40]" || fmt.Sprint(out[1]) != fmt.Sprint(out[0]) {
		t.Fatalf("got %v", out)
	}
}
