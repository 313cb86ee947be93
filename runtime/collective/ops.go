package collective

// The collectives: each checks its tensor, then runs the engine's
// collective when the Comm has one, else the algorithms of ring.go.

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/transport"
)

// AllReduce replaces x, on every member, with the element-wise sum of the
// members' x (same dtype and element count everywhere), summed in the
// member order (see the package doc).
func (c *Comm) AllReduce(x *tensor.Dense) error {
	const op = "all-reduce"
	f32, f64, L, err := c.start(op, x)
	if err != nil {
		return err
	}
	n := c.Size()
	if n == 1 {
		return nil
	}
	k := ChunkLen(L, n)
	if err := sizeOK(op, n, k); err != nil {
		return err
	}
	if err := c.agree(op, x.Dtype(), L, -1); err != nil {
		return err
	}
	if g, err := c.native(op); err != nil || g != nil {
		if err != nil {
			return err
		}
		if x.Dtype() == tensor.Float32 {
			return nativeAllReduce(c, g, f32, n, k)
		}
		return nativeAllReduce(c, g, f64, n, k)
	}
	if x.Dtype() == tensor.Float32 {
		return allReduce(c, f32, n, k)
	}
	return allReduce(c, f64, n, k)
}

func allReduce[T flat](c *Comm, x []T, n, k int) error {
	buf := padTo(x, n, k)
	if err := reduceScatter(c, opAllReduce, buf, k); err != nil {
		return err
	}
	if err := allGather(c, opAllReduce, n-1, buf, k); err != nil {
		return err
	}
	copy(x, buf)
	return nil
}

// ReduceScatter returns this member's chunk of the element-wise sum of the
// members' x: a 1-D tensor of ChunkLen(len, n) elements, chunk Rank() of the
// sum of x flattened and zero-padded to n·ChunkLen elements. x is not
// changed.
func (c *Comm) ReduceScatter(x *tensor.Dense) (*tensor.Dense, error) {
	const op = "reduce-scatter"
	f32, f64, L, err := c.start(op, x)
	if err != nil {
		return nil, err
	}
	n := c.Size()
	k := ChunkLen(L, n)
	if err := sizeOK(op, n, k); err != nil {
		return nil, err
	}
	if err := c.agree(op, x.Dtype(), L, -1); err != nil {
		return nil, err
	}
	g, err := c.native(op)
	if err != nil {
		return nil, err
	}
	if x.Dtype() == tensor.Float32 {
		return reduceScatterOut(c, g, f32, n, k)
	}
	return reduceScatterOut(c, g, f64, n, k)
}

func reduceScatterOut[T flat](c *Comm, g transport.Group, x []T, n, k int) (*tensor.Dense, error) {
	buf := padded(x, n, k)
	if g != nil {
		out, err := nativeReduceScatter(c, g, "reduce-scatter", buf, k)
		if err != nil {
			return nil, err
		}
		return wrap(out), nil
	}
	if err := reduceScatter(c, opReduceScatter, buf, k); err != nil {
		return nil, err
	}
	r := c.Rank()
	return wrap(buf[r*k : (r+1)*k : (r+1)*k]), nil
}

// ReduceScatterInto is ReduceScatter into a buffer the caller owns: buf has
// n·k elements (k = ChunkLen of the tensor, padding zeroed), is reduced in
// place: chunk Rank() of it holds the result, the other chunks are left as
// they were. It spares the copy of a padded tensor.
func (c *Comm) ReduceScatterInto(buf *tensor.Dense) error {
	const op = "reduce-scatter"
	f32, f64, k, g, err := c.startInto(op, buf)
	if err != nil {
		return err
	}
	if buf.Dtype() == tensor.Float32 {
		if g != nil {
			return reduceScatterNative(c, g, op, f32, k)
		}
		return reduceScatter(c, opReduceScatter, f32, k)
	}
	if g != nil {
		return reduceScatterNative(c, g, op, f64, k)
	}
	return reduceScatter(c, opReduceScatter, f64, k)
}

// reduceScatterNative is reduceScatter on the engine: its result goes to
// a chunk of its own (MPI's input and output may not overlap), copied into
// chunk Rank().
func reduceScatterNative[T flat](c *Comm, g transport.Group, op string, buf []T, k int) error {
	out, err := nativeReduceScatter(c, g, op, buf, k)
	if err != nil {
		return err
	}
	r := c.Rank()
	copy(buf[r*k:(r+1)*k], out)
	return nil
}

// nativeReduceScatter returns this member's chunk (k elements) of the sum
// of buf (n·k) over the members, on the engine: its own reduce-scatter, or
// with MemberOrder its all-to-all and the member-order sum.
func nativeReduceScatter[T flat](c *Comm, g transport.Group, op string, buf []T, k int) ([]T, error) {
	out := make([]T, k)
	if !c.ordered {
		if err := g.ReduceScatterSum(wrap(buf), wrap(out)); err != nil {
			return nil, c.nativeErr(op, err)
		}
		return out, nil
	}
	n := c.Size()
	recv := make([]T, n*k) // chunk m: member m's copy of this member's chunk
	if err := g.AllToAll(wrap(buf), wrap(recv)); err != nil {
		return nil, c.nativeErr(op, err)
	}
	copy(out, recv[:k])
	for m := 1; m < n; m++ {
		part := recv[m*k : (m+1)*k]
		for i := range out {
			out[i] += part[i]
		}
	}
	return out, nil
}

// nativeAllReduce is AllReduce on the engine: its own all-reduce in place,
// or with MemberOrder nativeReduceScatter then its all-gather.
func nativeAllReduce[T flat](c *Comm, g transport.Group, x []T, n, k int) error {
	const op = "all-reduce"
	if !c.ordered {
		return c.nativeErr(op, g.AllReduceSum(wrap(x)))
	}
	buf := padTo(x, n, k)
	if err := reduceScatterNative(c, g, op, buf, k); err != nil {
		return err
	}
	if err := g.AllGather(wrap(buf)); err != nil {
		return c.nativeErr(op, err)
	}
	copy(x, buf)
	return nil
}

// AllGather returns the members' shards concatenated in member order: a
// 1-D tensor of n·k elements, k the elements of shard (equal on every
// member).
func (c *Comm) AllGather(shard *tensor.Dense) (*tensor.Dense, error) {
	const op = "all-gather"
	f32, f64, k, err := c.start(op, shard)
	if err != nil {
		return nil, err
	}
	if k == 0 {
		return nil, fmt.Errorf("collective: %s: empty shard %v; want at least one element", op, shard.Shape())
	}
	n := c.Size()
	if err := sizeOK(op, n, k); err != nil {
		return nil, err
	}
	if err := c.agree(op, shard.Dtype(), k, -1); err != nil {
		return nil, err
	}
	g, err := c.native(op)
	if err != nil {
		return nil, err
	}
	if shard.Dtype() == tensor.Float32 {
		return allGatherOut(c, g, f32, n, k)
	}
	return allGatherOut(c, g, f64, n, k)
}

func allGatherOut[T flat](c *Comm, g transport.Group, x []T, n, k int) (*tensor.Dense, error) {
	buf := make([]T, n*k)
	copy(buf[c.Rank()*k:], x)
	if g != nil {
		if err := g.AllGather(wrap(buf)); err != nil {
			return nil, c.nativeErr("all-gather", err)
		}
		return wrap(buf), nil
	}
	if err := allGather(c, opAllGather, 0, buf, k); err != nil {
		return nil, err
	}
	return wrap(buf), nil
}

// AllGatherInto is AllGather into a buffer the caller owns: buf has n·k
// elements, chunk Rank() holding this member's shard; the other chunks are
// filled in.
func (c *Comm) AllGatherInto(buf *tensor.Dense) error {
	const op = "all-gather"
	f32, f64, k, g, err := c.startInto(op, buf)
	if err != nil {
		return err
	}
	if g != nil {
		if buf.Dtype() == tensor.Float32 {
			return c.nativeErr(op, g.AllGather(wrap(f32)))
		}
		return c.nativeErr(op, g.AllGather(wrap(f64)))
	}
	if buf.Dtype() == tensor.Float32 {
		return allGather(c, opAllGather, 0, f32, k)
	}
	return allGather(c, opAllGather, 0, f64, k)
}

// Broadcast copies root's x into every member's x (same dtype and element
// count everywhere).
func (c *Comm) Broadcast(x *tensor.Dense, root int) error {
	const op = "broadcast"
	if err := c.begin(op); err != nil {
		return err
	}
	n := c.Size()
	if root < 0 || root >= n {
		return fmt.Errorf("collective: %s: root %d outside [0, %d)", op, root, n)
	}
	f32, f64, L, err := elems(op, x)
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	if err := c.agree(op, x.Dtype(), L, root); err != nil {
		return err
	}
	if g, err := c.native(op); err != nil || g != nil {
		if err != nil {
			return err
		}
		if x.Dtype() == tensor.Float32 {
			return c.nativeErr(op, g.Broadcast(wrap(f32), root))
		}
		return c.nativeErr(op, g.Broadcast(wrap(f64), root))
	}
	if x.Dtype() == tensor.Float32 {
		return broadcast(c, f32, L, root)
	}
	return broadcast(c, f64, L, root)
}
