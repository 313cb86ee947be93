package transport

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
)

// rawHeader builds a frame header as a peer could send it, valid or not.
func rawHeader(kind, ch, dt uint8, n uint64, dims ...uint64) []byte {
	h := make([]byte, headerBytes(len(dims)))
	putHeader(h, kind, ch, dt, Tag{Stage: 1, Micro: 2}, n)
	for i, d := range dims {
		binary.LittleEndian.PutUint64(h[frameHdrLen+8*i:], d)
	}
	return h
}

// overflowHeader is the frame that used to crash a rank: 2^40 × 2^22
// float64 elements are 2^65 bytes, which wraps to a payload of 0 bytes, so
// the old check (count × size == length, under the cap) passed and the
// reader tried to allocate 2^62 elements.
func overflowHeader() []byte {
	return rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float64, 0, 1<<40, 1<<22)
}

// TestDecodeChallengeOtherVersion: a rank of another protocol version is
// named as such, not as junk.
func TestDecodeChallengeOtherVersion(t *testing.T) {
	for _, msg := range []string{
		`{"proto":"ppgen-tcp/1","purpose":"rendezvous","rank":1,"world":2,"fingerprint":"x","nonce":"AAAA"}`,
		`{"proto":"ppgen-tcp/3","nonce":"AAAAAAAAAAAAAAAAAAAAAA==","mac":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`, // rank 0 of the version before
	} {
		_, err := decodeChallenge([]byte(msg))
		want := fmt.Sprintf(`it speaks protocol %q, this rank speaks "ppgen-tcp/5"`, msg[10:21])
		if !errors.Is(err, errNotPpgen) || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want %q", err, want)
		}
	}
}

func TestDecodeHeader(t *testing.T) {
	lim := frameLimits{maxFrame: 1 << 20}
	tooMany := rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float32, 4)
	tooMany[3] = wire.MaxDims + 1
	badMagic := rawHeader(frameHeartbeat, 0, 0, 0)
	badMagic[12] ^= 0xff
	cases := []struct {
		name string
		b    []byte
		want error  // nil: valid
		msg  string // substring of the error
		size int64  // valid: the whole frame's bytes
	}{
		{"float32 2x3", rawHeader(frameData, wire.ChannelCode(abi.GradChannel), wire.Float32, 24, 2, 3), nil, "", 24 + 16 + 24},
		{"scalar float64", rawHeader(frameData, wire.ChannelCode(abi.DataChannel), wire.Float64, 8), nil, "", 24 + 8},
		{"empty 0x4", rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float32, 0, 0, 4), nil, "", 24 + 16},
		{"heartbeat", rawHeader(frameHeartbeat, 0, 0, 0), nil, "", 24},
		{"abort with reason", rawHeader(frameAbort, 0, 0, 100), nil, "", 124},
		{"count x size overflows 64 bits", overflowHeader(), ErrFrameTooLarge, "shape overflows", 0},
		{"dimension 2^64-1", rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float32, 4, math.MaxUint64), ErrFrameTooLarge, "shape overflows", 0},
		{"negative dimension as int64", rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float64, 8, uint64(1<<63)), ErrFrameTooLarge, "shape overflows", 0},
		{"empty frame with huge other dims", rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float32, 0, 0, 1<<30, 1<<30), ErrFrameTooLarge, "span over", 0},
		{"over the cap", rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float32, 4<<20, 1<<20), ErrFrameTooLarge, "over this rank's cap of 1048576 bytes", 0},
		{"payload length disagrees with dims", rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float32, 12, 2), ErrProtocol, "payload of 12 bytes for dims [2]", 0},
		{"too many dims", tooMany[:frameHdrLen], ErrProtocol, "17 dims", 0},
		{"dims missing", rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float32, 8, 2)[:frameHdrLen], ErrProtocol, "truncated", 0},
		{"unknown dtype", rawHeader(frameData, wire.ChannelCode(abi.ActChannel), 9, 8, 2), ErrProtocol, "dtype 9", 0},
		{"unknown channel", rawHeader(frameData, 7, wire.Float32, 8, 2), ErrProtocol, "channel 7", 0},
		{"unknown kind", rawHeader(99, 0, 0, 0), ErrProtocol, "unknown kind 99", 0},
		{"bad magic", badMagic, ErrProtocol, "bad magic", 0},
		{"heartbeat with payload", rawHeader(frameHeartbeat, 0, 0, 1), ErrProtocol, "malformed control frame", 0},
		{"abort reason too long", rawHeader(frameAbort, 0, 0, maxAbortMsgLen+1), ErrProtocol, "4097-byte reason", 0},
		{"short", make([]byte, 5), ErrProtocol, "truncated frame header (5 bytes", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := decodeHeader(tc.b, lim)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if h.size != tc.size {
					t.Fatalf("size %d, want %d", h.size, tc.size)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
}

// FuzzDecodeHeader: any bytes either fail with a protocol or size error, or
// describe a frame the reader can allocate: within the cap, with a payload
// of exactly element size × ∏dims bytes.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(overflowHeader())
	f.Add(rawHeader(frameData, wire.ChannelCode(abi.GradChannel), wire.Float32, 24, 2, 3))
	f.Add(rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float64, 0, 0, 1<<40))
	f.Add(rawHeader(frameAbort, 2, 0, 17))
	f.Add(rawHeader(frameHeartbeat, 0, 0, 0))
	const maxFrame = 1 << 20
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b, frameLimits{maxFrame: maxFrame})
		if err != nil {
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("error wraps neither ErrProtocol nor ErrFrameTooLarge: %v", err)
			}
			return
		}
		if h.size < frameHdrLen || h.size > maxFrame {
			t.Fatalf("accepted a frame of %d bytes (cap %d)", h.size, maxFrame)
		}
		if h.kind != frameData {
			return
		}
		want, nonzero := big.NewInt(int64(wire.ElemSize(h.dt))), big.NewInt(int64(wire.ElemSize(h.dt)))
		for _, d := range h.dims {
			if d < 0 {
				t.Fatalf("negative dimension in %v", h.dims)
			}
			want.Mul(want, big.NewInt(int64(d)))
			if d > 0 {
				nonzero.Mul(nonzero, big.NewInt(int64(d)))
			}
		}
		if !want.IsUint64() || want.Uint64() != h.n || nonzero.Cmp(big.NewInt(maxFrame)) > 0 {
			t.Fatalf("dims %v of dtype %d accepted with payload %d", h.dims, h.dt, h.n)
		}
		if int64(headerBytes(len(h.dims)))+int64(h.n) != h.size {
			t.Fatalf("size %d for %d dims and %d bytes", h.size, len(h.dims), h.n)
		}
		_, raw := wire.Alloc(h.dt, h.dims) // must not panic, and be the payload's size
		if uint64(len(raw)) != h.n {
			t.Fatalf("allocated %d bytes for a %d-byte payload", len(raw), h.n)
		}
	})
}

// FuzzHandshake: the handshake decoders never panic, and what they accept
// re-encodes to a message they accept again, unchanged.
func FuzzHandshake(f *testing.F) {
	seeds := []any{
		challenge{Proto: protoName, Nonce: bytes.Repeat([]byte{7}, nonceLen)},
		proof{MAC: bytes.Repeat([]byte{1}, macLen)},
		proof{Err: "failed authentication"},
		hello{Proto: protoName, Purpose: purposeRendezvous, Rank: 3, World: 4, Fingerprint: "sha256:abc", Addr: "10.0.0.7:4711"},
		hello{Proto: protoName, Purpose: purposePeer, Rank: -1, World: 1 << 40},
		hello{Proto: protoName, Purpose: purposePeer, Rank: 1, World: 2, PlainFrames: true},
		verdict{Addrs: []string{"", "[::1]:5000", "host:1"}},
		verdict{Err: "rendezvous aborted by rank 0: ..."},
	}
	for _, s := range seeds {
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Add([]byte(`{"proto":"ppgen-tcp/3","nonce":"AAAAAAAAAAAAAAAAAAAAAA=="} {}`))
	f.Add([]byte(`{"proto":"ppgen-tcp/5","nonce":"AAAAAAAAAAAAAAAAAAAAAA==","mac":"AAAA"}`))
	f.Add([]byte(`{"proto":"ppgen-tcp/3","purpose":"peer","rank":0,"world":2,"fingerprint":"f","schedule":"zbv (P=2, V=2, M=4)"}`))
	roundTrip := func(t *testing.T, what string, v any, decode func([]byte) (any, error)) {
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: accepted %#v but cannot encode it: %v", what, v, err)
		}
		w, err := decode(enc)
		if err != nil {
			t.Fatalf("%s: accepted %#v, refused its encoding %s: %v", what, v, enc, err)
		}
		enc2, _ := json.Marshal(w)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("%s: %s re-encoded as %s", what, enc, enc2)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := decodeChallenge(b); err == nil {
			roundTrip(t, "challenge", c, func(b []byte) (any, error) { return decodeChallenge(b) })
		} else if !errors.Is(err, errNotPpgen) {
			t.Fatalf("challenge: %v", err)
		}
		if p, err := decodeProof(b); err == nil {
			roundTrip(t, "proof", p, func(b []byte) (any, error) { return decodeProof(b) })
		}
		if h, err := decodeHello(b); err == nil {
			if h.Rank < 0 || h.Rank >= h.World || h.World > maxWorld || len(h.Fingerprint) > maxFieldLen ||
				len(h.Schedule) > MaxScheduleLen || !wire.Printable(h.Schedule) || !wire.Printable(h.Fingerprint) {
				t.Fatalf("hello out of range accepted: %+v", h)
			}
			roundTrip(t, "hello", h, func(b []byte) (any, error) { return decodeHello(b) })
		}
		if v, err := decodeVerdict(b); err == nil {
			if len(v.Addrs) > maxWorld {
				t.Fatalf("verdict with %d addresses accepted", len(v.Addrs))
			}
			roundTrip(t, "verdict", v, func(b []byte) (any, error) { return decodeVerdict(b) })
		}
	})
}

// TestDecodeHelloSchedule: the schedule a peer's hello describes is
// printed in this rank's messages, so it is bounded and printable text;
// so is the fingerprint. A rank's own TCPConfig is held to the same rules.
func TestDecodeHelloSchedule(t *testing.T) {
	for _, tc := range []struct {
		name, schedule, fingerprint string
		want                        string // "" accepted, else in the error
	}{
		{"described", "zbv (P=4, V=2, M=8)", "sha256:ab", ""},
		{"none", "", "sha256:ab", ""},
		{"at the bound", strings.Repeat("é", MaxScheduleLen/2), "sha256:ab", ""},
		{"too long", strings.Repeat("x", MaxScheduleLen+1), "sha256:ab", "schedule description of 201 bytes, at most 200"},
		{"terminal escape", "zbv\x1b[2J", "sha256:ab", "is not printable text"},
		{"newline", "zbv\nrank 0: all good", "sha256:ab", "is not printable text"},
		{"fingerprint escape", "zbv", "sha256:\x1b]0;x\x07", "fingerprint"},
	} {
		b, err := json.Marshal(hello{Proto: protoName, Purpose: purposePeer, Rank: 1, World: 2, Fingerprint: tc.fingerprint, Schedule: tc.schedule})
		if err != nil {
			t.Fatal(err)
		}
		h, err := decodeHello(b)
		switch {
		case tc.want == "" && (err != nil || h.Schedule != tc.schedule):
			t.Errorf("%s: %q, %v; want it accepted", tc.name, h.Schedule, err)
		case tc.want != "" && (err == nil || !errors.Is(err, errNotPpgen) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
		cfg := TCPConfig{World: 1, Schedule: tc.schedule, Fingerprint: tc.fingerprint}
		if err := cfg.fill(); (err == nil) != (tc.want == "") {
			t.Errorf("%s: TCPConfig.fill: %v", tc.name, err)
		}
	}
	// JSON carries no invalid UTF-8 (the decoder replaces it); a
	// configuration could.
	cfg := TCPConfig{World: 1, Schedule: "zbv\xff"}
	if err := cfg.fill(); err == nil || !strings.Contains(err.Error(), "printable text") {
		t.Errorf("TCPConfig.fill with invalid UTF-8: %v", err)
	}
}
