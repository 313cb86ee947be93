package wire

import (
	"errors"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/dtype"
)

// TestChannelCodes: the wire codes are 0 act, 1 grad, 2 data (what
// ppgen-tcp/3, MPI's tags and NCCL's headers have always sent), and every
// code round-trips.
func TestChannelCodes(t *testing.T) {
	for code, want := range []abi.Channel{abi.ActChannel, abi.GradChannel, abi.DataChannel} {
		if got := ChannelCode(want); int(got) != code {
			t.Errorf("ChannelCode(%s) = %d, want %d", want, got, code)
		}
		if ch, ok := ChannelOf(uint8(code)); !ok || ch != want {
			t.Errorf("ChannelOf(%d) = %s, %v; want %s", code, ch, ok, want)
		}
		if !ValidChannel(want) || int(want) >= ChannelSlots {
			t.Errorf("%s: valid %v, slot %d of %d", want, ValidChannel(want), want, ChannelSlots)
		}
	}
	if _, ok := ChannelOf(Channels); ok {
		t.Errorf("ChannelOf(%d) accepted", Channels)
	}
	if ValidChannel(abi.NoChannel) {
		t.Error("NoChannel is valid")
	}
}

func TestShape(t *testing.T) {
	for _, c := range []struct {
		name    string
		dt      uint8
		dims    []uint64
		payload int64
		want    error
		msg     string
	}{
		{"matrix", Float32, []uint64{2, 3}, 24, nil, ""},
		{"scalar", Float64, nil, 8, nil, ""},
		{"empty", Float64, []uint64{0, 4}, 0, nil, ""},
		{"at the cap", Float32, []uint64{256}, 1024, nil, ""},
		{"over the cap", Float32, []uint64{257}, 0, ErrFrameTooLarge, "1028 bytes, over this rank's cap of 1024 bytes (X)"},
		{"empty spanning the cap", Float32, []uint64{0, 1 << 20}, 0, ErrFrameTooLarge, "span over"},
		{"overflow", Float64, []uint64{1 << 40, 1 << 22}, 0, ErrFrameTooLarge, "shape overflows"},
		{"unknown dtype", 9, nil, 0, ErrProtocol, "unknown dtype 9"},
		{"too many dims", Float32, make([]uint64, MaxDims+1), 0, ErrProtocol, "17 dimensions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			shape, n, err := Shape(c.dt, c.dims, 1024, "X")
			if c.want != nil {
				if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("err %v, want %v with %q", err, c.want, c.msg)
				}
				return
			}
			if err != nil || n != c.payload || len(shape) != len(c.dims) {
				t.Fatalf("%v %d %v, want %d bytes", shape, n, err, c.payload)
			}
		})
	}
}

// TestBytes: PayloadOf, Plain, AsBytes, Elems and Alloc read and make the
// same bytes.
func TestBytes(t *testing.T) {
	x := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 2, 3, 4}))
	p, err := Plain(x)
	if err != nil || p.Dtype != Float32 || p.N != 4 || len(p.Raw) != 16 {
		t.Fatalf("Plain: %+v, %v", p, err)
	}
	if e, ok := Elems[float32](p.Raw); !ok || e[3] != 4 {
		t.Fatalf("Elems: %v %v", e, ok)
	}
	tr := x.Clone().(*tensor.Dense)
	if err := tr.T(); err != nil {
		t.Fatal(err)
	}
	if _, err := Plain(tr); err == nil {
		t.Error("Plain accepted a transpose")
	}
	q, err := PayloadOf(tr)
	if err != nil || q.N != 4 || q.Keep == x {
		t.Fatalf("PayloadOf of a transpose: %+v, %v", q, err)
	}
	y, raw := Alloc(Float64, nil)
	copy(raw, AsBytes([]float64{7}))
	if y.ScalarValue() != 7.0 {
		t.Errorf("Alloc'd scalar %v, want 7", y.ScalarValue())
	}
	if _, ok := Elems[float64](make([]byte, 12)); ok {
		t.Error("Elems accepted 12 bytes as float64s")
	}
}

// TestDtypeCodes: the wire's dtype codes are runtime/dtype's.
func TestDtypeCodes(t *testing.T) {
	if Float32 != uint8(dtype.Float32) || Float64 != uint8(dtype.Float64) {
		t.Fatalf("wire codes %d, %d; runtime/dtype's %d, %d", Float32, Float64, dtype.Float32, dtype.Float64)
	}
	for _, dt := range []uint8{0, Float32, Float64, 9} {
		if ElemSize(dt) != dtype.Dtype(dt).Size() {
			t.Errorf("ElemSize(%d) = %d", dt, ElemSize(dt))
		}
	}
}
