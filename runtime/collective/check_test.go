package collective_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/transport"
)

func vec32(n int) *tensor.Dense {
	return tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))
}

// TestMismatch: members that disagree on a collective's op, dtype, element
// count, root, sequence number or mode fail on every member with a
// *collective.MismatchError naming the field, instead of combining.
func TestMismatch(t *testing.T) {
	const n = 4
	allReduce := func(c *collective.Comm) error { return c.AllReduce(vec64(make([]float64, 8))) }
	cases := []struct {
		name  string
		odd   int                            // the member that differs
		opts  []collective.Option            // every member's options
		oddOp []collective.Option            // the odd member's options (mode cases)
		f     func(c *collective.Comm) error // every member but odd
		g     func(c *collective.Comm) error // odd
		pre   bool                           // one agreed all-reduce first; odd then runs on a fresh Comm
		field string
		msg   string                       // on member 0
		world func() []transport.Transport // nil: in-process
	}{
		{name: "root", odd: 2,
			f:     func(c *collective.Comm) error { return c.Broadcast(vec64(make([]float64, 8)), 0) },
			g:     func(c *collective.Comm) error { return c.Broadcast(vec64(make([]float64, 8)), 1) },
			field: "root", msg: "broadcast #1: member 2 broadcasts from root 1, this member from root 0"},
		{name: "count", odd: 3, f: allReduce,
			g:     func(c *collective.Comm) error { return c.AllReduce(vec64(make([]float64, 7))) },
			field: "count", msg: "all-reduce #1: member 3 sends 7 elements, this member 8"},
		{name: "op", odd: 1, f: allReduce,
			g:     func(c *collective.Comm) error { return c.Broadcast(vec64(make([]float64, 8)), 0) },
			field: "op", msg: "all-reduce #1: member 1 runs broadcast, this member all-reduce"},
		{name: "dtype", odd: 0, f: allReduce,
			g:     func(c *collective.Comm) error { return c.AllReduce(vec32(8)) },
			field: "dtype", msg: "all-reduce #1: member 1 sends float64, this member float32"},
		{name: "all-gather-count", odd: 1,
			f:     func(c *collective.Comm) error { _, err := c.AllGather(vec64(make([]float64, 2))); return err },
			g:     func(c *collective.Comm) error { return c.AllGatherInto(vec64(make([]float64, 4*3))) },
			field: "count", msg: "all-gather #1: member 1 sends 3 elements, this member 2"},
		{name: "sequence", odd: 3, f: allReduce, g: allReduce, pre: true,
			field: "sequence", msg: "all-reduce #2: member 3 is at collective #1, this member #2"},
		{name: "mode", odd: 1, f: allReduce, g: allReduce, world: func() []transport.Transport { return fakeWorld(n) },
			oddOp: []collective.Option{collective.SendRecv()},
			field: "mode", msg: "all-reduce #1: member 1 runs send/recv collectives, this member native"},
		{name: "member-order", odd: 2, f: allReduce, g: allReduce, world: func() []transport.Transport { return fakeWorld(n) },
			oddOp: []collective.Option{collective.MemberOrder()},
			field: "mode", msg: "all-reduce #1: member 2 runs member-order collectives, this member native"},
	}
	for _, tc := range cases {
		worlds := map[string]func() []transport.Transport{"native": tc.world}
		if tc.world == nil {
			worlds = map[string]func() []transport.Transport{
				"inproc": func() []transport.Transport { return transport.NewInProc(n, transport.InProcTimeout(10*time.Second)) },
				"tcp":    func() []transport.Transport { return tcpWorld(t, n, 10*time.Second) },
			}
		}
		for wname, mk := range worlds {
			t.Run(tc.name+"/"+wname, func(t *testing.T) {
				world := mk()
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r, tr := range world {
					opts := tc.opts
					if r == tc.odd && tc.oddOp != nil {
						opts = tc.oddOp
					}
					c, err := collective.New(tr, abi.ActChannel, opts...)
					if err != nil {
						t.Fatal(err)
					}
					wg.Go(func() {
						if tc.pre {
							if errs[r] = allReduce(c); errs[r] != nil {
								return
							}
							if r == tc.odd {
								c, _ = collective.New(tr, abi.ActChannel, opts...)
							}
						}
						if r == tc.odd {
							errs[r] = tc.g(c)
						} else {
							errs[r] = tc.f(c)
						}
					})
				}
				wg.Wait()
				for r, err := range errs {
					var me *collective.MismatchError
					var ce *collective.Error
					if !errors.As(err, &me) || me.Field != tc.field || !errors.Is(err, collective.ErrMismatch) || !errors.As(err, &ce) || ce.Rank != r {
						t.Fatalf("member %d: %v; want a collective.Error of member %d wrapping a MismatchError of field %s", r, err, r, tc.field)
					}
					if want := tc.odd; r != tc.odd && me.Member != want {
						t.Errorf("member %d blames member %d, want %d", r, me.Member, want)
					}
				}
				if !strings.Contains(errs[0].Error(), tc.msg) {
					t.Errorf("member 0: %v; want it to say %q", errs[0], tc.msg)
				}
				t.Logf("member 0: %v", errs[0])
			})
		}
	}
}
