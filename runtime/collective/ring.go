package collective

// The package's own algorithms over Send and Recv (see the package doc):
// the pairwise reduce-scatter, the ring all-gather and the chain broadcast,
// and the exchange of one step.

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/transport"
)

// exchange sends out to member next and receives from member prev, at once (a batch on
// a transport.Batcher, else the send on its own goroutine: so a transport
// with rendezvous sends completes it too), checking the received tag and
// length. It returns the member an error is blamed on.
func exchange[T flat](c *Comm, op, step, next, prev int, out []T, want int) ([]T, int, error) {
	tag := c.tag(op, step)
	var gotTag transport.Tag
	var got *tensor.Dense
	if b, ok := c.t.(transport.Batcher); ok {
		ops := []transport.BatchOp{
			{Peer: next, Ch: c.ch, Send: true, Tag: tag, T: wrap(out)},
			{Peer: prev, Ch: c.ch},
		}
		if err := b.Batch(ops); err != nil {
			return nil, prev, err
		}
		gotTag, got = ops[1].Tag, ops[1].T
	} else {
		sent := make(chan error, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					sent <- fmt.Errorf("send to member %d %w: %v", next, transport.ErrPanicked, p)
				}
			}()
			sent <- c.t.Send(next, c.ch, tag, wrap(out))
		}()
		var rerr error
		gotTag, got, rerr = c.t.Recv(prev, c.ch)
		if serr := <-sent; serr != nil {
			return nil, next, serr
		}
		if rerr != nil {
			return nil, prev, rerr
		}
	}
	if gotTag != tag {
		return nil, prev, fmt.Errorf("received %s, want %s: the members disagree on the sequence of collectives (%w)", describe(gotTag), describe(tag), transport.ErrProtocol)
	}
	in, ok := data[T](got)
	if !ok || len(in) != want {
		return nil, prev, fmt.Errorf("received %v %v, want %d elements of this collective's dtype (%w)", dtypeOf(got), shapeOf(got), want, transport.ErrProtocol)
	}
	return in, prev, nil
}

func describe(t transport.Tag) string {
	return fmt.Sprintf("%s #%d step %d", opNames[int(t.Micro>>24)], t.Stage, t.Micro&0xffffff)
}

func dtypeOf(t *tensor.Dense) any {
	if t == nil {
		return "nil"
	}
	return t.Dtype()
}

func shapeOf(t *tensor.Dense) any {
	if t == nil {
		return "[]"
	}
	return t.Shape()
}

// wrap makes a 1-D tensor over s (no copy; the transports do not keep it).
func wrap[T flat](s []T) *tensor.Dense {
	return tensor.New(tensor.WithShape(len(s)), tensor.WithBacking(s))
}

func data[T flat](t *tensor.Dense) ([]T, bool) {
	if t == nil {
		return nil, false
	}
	var v any
	switch t.Dtype() {
	case tensor.Float32:
		v = t.Float32s()
	case tensor.Float64:
		v = t.Float64s()
	}
	s, ok := v.([]T)
	return s, ok
}

// reduceScatter runs the pairwise reduce-scatter on buf (n·k elements,
// chunk c at [c·k, (c+1)·k)): afterwards chunk Rank() of buf holds the sum
// over the members, in member order. The other chunks are left as they were.
func reduceScatter[T flat](c *Comm, op int, buf []T, k int) error {
	n, r := c.Size(), c.Rank()
	parts := make([][]T, n) // parts[m]: member m's chunk r
	own := buf[r*k : (r+1)*k]
	parts[r] = own
	for s := 1; s < n; s++ {
		to, from := (r+s)%n, mod(r-s, n)
		in, peer, err := exchange(c, op, s-1, to, from, buf[to*k:(to+1)*k], k)
		if err != nil {
			return c.fail(opNames[op], s-1, peer, err)
		}
		parts[from] = in
	}
	for i := range own {
		v := parts[0][i]
		for m := 1; m < n; m++ {
			v += parts[m][i]
		}
		own[i] = v
	}
	return nil
}

// allGather runs the ring all-gather on buf: chunk Rank() is this member's,
// the others are filled in. step0 numbers the steps after those of a
// reduce-scatter of the same collective.
func allGather[T flat](c *Comm, op, step0 int, buf []T, k int) error {
	n, r := c.Size(), c.Rank()
	for s := range n - 1 {
		send := mod(r-s, n)
		recv := mod(r-s-1, n)
		in, peer, err := exchange(c, op, step0+s, (r+1)%n, mod(r-1, n), buf[send*k:(send+1)*k], k)
		if err != nil {
			return c.fail(opNames[op], step0+s, peer, err)
		}
		copy(buf[recv*k:(recv+1)*k], in)
	}
	return nil
}

func mod(a, n int) int { return ((a % n) + n) % n }

// padTo returns x when it has n·k elements, else padded(x, n, k).
func padTo[T flat](x []T, n, k int) []T {
	if len(x) == n*k {
		return x
	}
	return padded(x, n, k)
}

// padded returns x copied into a zero-padded buffer of n·k elements.
func padded[T flat](x []T, n, k int) []T {
	buf := make([]T, n*k)
	copy(buf, x)
	return buf
}

// broadcast: member i = (r-root) mod n of the chain receives each chunk from
// its predecessor (unless it is the root) and forwards it to its successor
// (unless it is the last).
func broadcast[T flat](c *Comm, x []T, L, root int) error {
	n, r := c.Size(), c.Rank()
	pos := mod(r-root, n)
	k := ChunkLen(L, n)
	next, prev := (r+1)%n, (r-1+n)%n
	for j := range n {
		lo, hi := min(j*k, L), min((j+1)*k, L)
		if lo == hi {
			break // the chunks past L are empty on every member
		}
		if pos > 0 {
			tag, got, err := c.t.Recv(prev, c.ch)
			if err != nil {
				return c.fail("broadcast", j, prev, err)
			}
			if want := c.tag(opBroadcast, j); tag != want {
				return c.fail("broadcast", j, prev, fmt.Errorf("received %s, want %s: the members disagree on the sequence of collectives (%w)", describe(tag), describe(want), transport.ErrProtocol))
			}
			in, ok := data[T](got)
			if !ok || len(in) != hi-lo {
				return c.fail("broadcast", j, prev, fmt.Errorf("received %v %v, want %d elements (%w)", dtypeOf(got), shapeOf(got), hi-lo, transport.ErrProtocol))
			}
			copy(x[lo:hi], in)
		}
		if pos < n-1 {
			if err := c.t.Send(next, c.ch, c.tag(opBroadcast, j), wrap(x[lo:hi])); err != nil {
				return c.fail("broadcast", j, next, err)
			}
		}
	}
	return nil
}
