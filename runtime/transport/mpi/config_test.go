package mpi

import (
	"encoding/binary"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
	"gorgonia.org/tensor"
)

// mpiHeaderOf is the header a peer would send for dtype dt and dims,
// tagged (1, 2): valid or not, since dims need not fit an int.
func mpiHeaderOf(dt uint8, dims ...uint64) []byte {
	b := make([]byte, mpiHeaderLen)
	binary.LittleEndian.PutUint32(b, mpiMagic)
	b[4], b[5], b[6] = mpiVersion, dt, uint8(len(dims))
	binary.LittleEndian.PutUint32(b[8:], 1)
	binary.LittleEndian.PutUint32(b[12:], 2)
	for i, d := range dims {
		if i < wire.MaxDims {
			binary.LittleEndian.PutUint64(b[16+8*i:], d)
		}
	}
	return b
}

func TestDecodeMPIHeader(t *testing.T) {
	const cap = 1 << 20
	mod := func(b []byte, f func([]byte)) []byte { f(b); return b }
	for _, tc := range []struct {
		name string
		b    []byte
		n    int64  // want payload bytes
		err  string // or an error containing this
		is   error
	}{
		{"scalar", mpiHeaderOf(wire.Float64), 8, "", nil},
		{"float32 matrix", mpiHeaderOf(wire.Float32, 2, 3), 24, "", nil},
		{"empty", mpiHeaderOf(wire.Float64, 0, 4), 0, "", nil},
		{"empty with a dim over the cap", mpiHeaderOf(wire.Float64, 0, 1<<40), 0, "dimensions [0 1099511627776] span over", transport.ErrFrameTooLarge},
		{"at the cap", mpiHeaderOf(wire.Float32, 1<<18), cap, "", nil},
		{"over the cap", mpiHeaderOf(wire.Float32, 1<<18+1), 0, "over this rank's cap of 1048576 bytes (mpi.Config.MaxMessageBytes)", transport.ErrFrameTooLarge},
		{"product overflows", mpiHeaderOf(wire.Float64, 1<<40, 1<<22), 0, "shape overflows", transport.ErrFrameTooLarge},
		{"huge dim", mpiHeaderOf(wire.Float64, 1<<63), 0, "dimension 0 is 9223372036854775808", transport.ErrFrameTooLarge},
		{"short", mpiHeaderOf(wire.Float64)[:20], 0, "header of 20 bytes, want 144", transport.ErrProtocol},
		{"bad magic", mod(mpiHeaderOf(wire.Float64), func(b []byte) { b[0] ^= 1 }), 0, "bad magic", transport.ErrProtocol},
		{"other version", mod(mpiHeaderOf(wire.Float64), func(b []byte) { b[4] = 9 }), 0, "version 9, this build speaks 2", transport.ErrProtocol},
		{"bad dtype", mpiHeaderOf(7, 1), 0, "unknown dtype 7", transport.ErrProtocol},
		{"too many dims", mod(mpiHeaderOf(wire.Float64), func(b []byte) { b[6] = wire.MaxDims + 1 }), 0, "17 dimensions (at most 16)", transport.ErrProtocol},
		{"pad byte", mod(mpiHeaderOf(wire.Float64), func(b []byte) { b[7] = 1 }), 0, "nonzero pad byte 1", transport.ErrProtocol},
		{"stray dim", mod(mpiHeaderOf(wire.Float64, 2), func(b []byte) { b[16+8] = 1 }), 0, "nonzero unused dimension 1", transport.ErrProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := decodeMPIHeader(tc.b, cap)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, tc.is) {
					t.Fatalf("err = %v, want one containing %q wrapping %v", err, tc.err, tc.is)
				}
				return
			}
			if err != nil || h.n != tc.n || h.tag != (transport.Tag{Stage: 1, Micro: 2}) {
				t.Fatalf("header %+v, err %v; want %d payload bytes, tag (1, 2)", h, err, tc.n)
			}
		})
	}
}

// TestMPIHeaderRoundTrip: what encodeMPIHeader writes for a tensor decodes
// to its dtype, shape and byte count.
func TestMPIHeaderRoundTrip(t *testing.T) {
	for _, x := range []*tensor.Dense{
		tensor.New(tensor.FromScalar(float32(1))),
		tensor.New(tensor.WithShape(3, 1, 2), tensor.WithBacking(make([]float64, 6))),
		tensor.New(tensor.WithShape(0), tensor.WithBacking([]float32{})),
	} {
		v, err := wire.PayloadOf(x)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, mpiHeaderLen)
		encodeMPIHeader(b, transport.Tag{Stage: -1, Micro: 5}, v)
		h, err := decodeMPIHeader(b, 1<<20)
		if err != nil || h.dt != v.Dtype || h.n != int64(len(v.Raw)) || h.tag != (transport.Tag{Stage: -1, Micro: 5}) || len(h.dims) != len(v.Dims) {
			t.Fatalf("%v: header %+v, err %v", x.Shape(), h, err)
		}
		for i := range v.Dims {
			if h.dims[i] != v.Dims[i] {
				t.Fatalf("%v: dims %v", x.Shape(), h.dims)
			}
		}
	}
}

// TestMPINewsRoundTrip: abort news keeps the rank at fault, the sentinel
// and the reason; a relayed one names the rank that sent it; bad ranks
// and lengths are refused.
func TestMPINewsRoundTrip(t *testing.T) {
	b := make([]byte, mpiNewsLen)
	encodeMPINews(b, &transport.PeerError{Peer: 2, Reason: "aborted: boom", Err: transport.ErrAborted})
	if e := decodeMPINews(b, 2, 4); e.Peer != 2 || e.Relayed || e.Error() != "rank 2 aborted: boom" || !errors.Is(e, transport.ErrAborted) {
		t.Fatalf("own news: %v (%+v)", e, e)
	}
	encodeMPINews(b, &transport.PeerError{Peer: 1, Reason: "did not read act", Err: transport.ErrTimeout, Relayed: true, Via: 0})
	if e := decodeMPINews(b, 0, 4); e.Error() != "rank 1 did not read act (reported by rank 0)" || !errors.Is(e, transport.ErrTimeout) {
		t.Fatalf("relayed news: %v", e)
	}
	long := strings.Repeat("x", 2*mpiNewsLen)
	encodeMPINews(b, &transport.PeerError{Peer: 0, Reason: long, Err: transport.ErrAborted})
	if e := decodeMPINews(b, 0, 1); len(e.Reason) != mpiNewsLen-12 {
		t.Fatalf("a long reason is kept at %d bytes, want %d", len(e.Reason), mpiNewsLen-12)
	}
	binary.LittleEndian.PutUint32(b, 9)
	if e := decodeMPINews(b, 3, 4); e.Peer != 3 || !errors.Is(e, transport.ErrProtocol) {
		t.Fatalf("news naming rank 9 of 4: %v", e)
	}
	// What was received, not the receive buffer: a 12-byte notice that
	// claims a 200-byte reason is refused, not printed from the buffer.
	n := encodeMPINews(b, &transport.PeerError{Peer: 1, Reason: "boom", Err: transport.ErrAborted})
	if n != 16 {
		t.Fatalf("news of a 4-byte reason is %d bytes, want 16", n)
	}
	if e := decodeMPINews(b[:n], 1, 4); e.Error() != "rank 1 boom" || !errors.Is(e, transport.ErrAborted) {
		t.Fatalf("news of its own length: %v", e)
	}
	copy(b[12:], strings.Repeat("secret", 40))
	binary.LittleEndian.PutUint16(b[10:], 200)
	e := decodeMPINews(b[:12], 1, 4)
	if !errors.Is(e, transport.ErrProtocol) || strings.Contains(e.Error(), "secret") || len(e.Error()) > 120 {
		t.Fatalf("a 12-byte notice claiming 200 bytes: %v", e)
	}
	for _, short := range []int{0, 11} {
		if e := decodeMPINews(b[:short], 1, 4); !errors.Is(e, transport.ErrProtocol) {
			t.Fatalf("%d bytes of news: %v", short, e)
		}
	}
}

// FuzzDecodeMPIHeader: no header crashes the decoder or passes with a
// payload size other than element size × ∏dims within the cap.
func FuzzDecodeMPIHeader(f *testing.F) {
	f.Add(mpiHeaderOf(wire.Float64, 2, 3), int64(1<<20))
	f.Add(mpiHeaderOf(wire.Float64, 1<<40, 1<<22), int64(1<<30))
	f.Add(mpiHeaderOf(wire.Float32), int64(4))
	f.Fuzz(func(t *testing.T, b []byte, cap int64) {
		if cap < 0 || cap > MaxMessageBytes {
			return
		}
		h, err := decodeMPIHeader(b, cap)
		if err != nil {
			return
		}
		n := big.NewInt(int64(wire.ElemSize(h.dt)))
		for _, d := range h.dims {
			n.Mul(n, big.NewInt(int64(d)))
		}
		if !n.IsInt64() || n.Int64() != h.n || h.n > cap || len(h.dims) > wire.MaxDims {
			t.Fatalf("accepted %d payload bytes for dtype %d dims %v (cap %d)", h.n, h.dt, h.dims, cap)
		}
	})
}

// TestMPIConfigSchedule: Config.Schedule, which the fingerprint refusal
// prints, is bounded and printable, as TCPConfig.Schedule is.
func TestMPIConfigSchedule(t *testing.T) {
	for _, tc := range []struct {
		name, schedule, err string
	}{
		{"empty", "", ""},
		{"a description", "zbv (P=4, V=2, M=8)", ""},
		{"at the bound", strings.Repeat("x", transport.MaxScheduleLen), ""},
		{"too long", strings.Repeat("x", transport.MaxScheduleLen+1), "want at most 200 bytes of printable text"},
		{"a control byte", "zbv\x1b[2J", "want at most 200 bytes of printable text"},
	} {
		c := Config{Schedule: tc.schedule}
		err := c.fill()
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: fill() = %v, want an error containing %q", tc.name, err, tc.err)
		}
	}
}
