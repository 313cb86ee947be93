package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
)

func TestTCPRequiresToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = DialTCP(context.Background(), TCPConfig{Rank: 0, World: 2, Listener: ln})
	for _, want := range []string{"transport: rank 0: no shared token", "set PPGEN_TOKEN to the same random secret on every rank, e.g. PPGEN_TOKEN=$(openssl rand -hex 16)",
		"ppgen launch and ppgen template generate one", "PPGEN_ALLOW_NO_TOKEN=1 opts out"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("world 2 without a token: err = %v, want it to contain %q", err, want)
		}
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the refused rank's listener is still open")
	}
	// A single rank needs no token.
	tr, err := DialTCP(context.Background(), TCPConfig{Rank: 0, World: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	// The explicit opt-out works, with a warning through cfg.Logger.
	var logs logBuf
	trs := mustWorld(t, 2, func(r int, c *TCPConfig) { c.Token, c.AllowNoToken, c.Logger = "", true, logs.logger() })
	exerciseWorld(t, asTransports(trs))
	if got := strings.Count(logs.String(), "no shared token (AllowNoToken, PPGEN_ALLOW_NO_TOKEN=1)"); got != 2 {
		t.Errorf("%d no-token warnings, want one per rank:\n%s", got, logs.String())
	}
}

// TestTCPRefusesWeakToken: a token below 128 bits is refused before
// anything listens, with advice.
func TestTCPRefusesWeakToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = DialTCP(context.Background(), TCPConfig{Rank: 0, World: 2, Listener: ln, Token: "summer2024"})
	if err == nil || !strings.Contains(err.Error(), "transport: rank 0: the shared token (PPGEN_TOKEN) is too weak: 10 base64 characters hold about 60 bits") ||
		!strings.Contains(err.Error(), "openssl rand -hex 16") {
		t.Fatalf("err = %v", err)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the refused rank's listener is still open")
	}
}

// TestTCPPlainFrames: the opt-out of frame authentication works when every
// rank sets it, with a warning per rank; a rank that differs is refused.
func TestTCPPlainFrames(t *testing.T) {
	var logs logBuf
	trs := mustWorld(t, 2, func(r int, c *TCPConfig) { c.PlainFrames, c.Logger = true, logs.logger() })
	if trs[0].conns[1].seal != nil || trs[1].conns[0].open != nil {
		t.Error("PlainFrames, but the frames are sealed")
	}
	exerciseWorld(t, asTransports(trs))
	if got := strings.Count(logs.String(), "frames are not authenticated (PlainFrames, PPGEN_PLAIN_FRAMES=1)"); got != 2 {
		t.Errorf("%d warnings, want one per rank:\n%s", got, logs.String())
	}
	addr, r0 := rank0(t, 2, nil)
	bad := wait(t, worker(t, addr, 1, 2, func(c *TCPConfig) { c.PlainFrames = true }), "rank 1 with plain frames")
	want := "this rank (1) sends frames without authentication (PPGEN_PLAIN_FRAMES=1): set PPGEN_PLAIN_FRAMES the same on every rank"
	if bad.err == nil || !strings.Contains(bad.err.Error(), "sends authenticated frames, "+want) {
		t.Errorf("rank 1: %v, want %q", bad.err, want)
	}
	if d := wait(t, r0, "rank 0"); d.err == nil {
		t.Error("rank 0 accepted a rank with plain frames")
	}
}

// sealed returns raw as rank 1's connection c would send it, sealed with
// its frame key and next frame number, when raw begins with a frame header
// (a frame of an insider, who holds the key: only decoding can refuse it);
// other bytes unchanged. The caller holds c.wmu.
func sealed(c *tcpConn, raw []byte) []byte {
	if len(raw) < frameHdrLen || binary.LittleEndian.Uint32(raw[12:]) != frameMagic || c.seal == nil {
		return raw
	}
	n := headerBytes(dimsOf(raw))
	if len(raw) < n {
		return raw
	}
	out := append(append([]byte{}, raw[:n]...), c.seal.sealHead(raw[:n])...)
	out = append(append(out, raw[n:]...), c.seal.sealPayload(raw[n:])...)
	c.seal.seq++
	return out
}

// TestTCPPayloadForged: a frame whose header is authentic but whose payload
// or payload tags were changed on the way (by one who cannot compute tags)
// is refused before Recv hands it out, the error naming the chunk; frames
// of one chunk (tagged inline) and of several (tagged beside the copy) alike.
func TestTCPPayloadForged(t *testing.T) {
	const big = 600 << 10 // three chunks: 256, 256 and 88 KiB
	cases := []struct {
		name    string
		payload int // bytes of float64
		flip    int // the byte changed, from the payload's start (past it: the tags)
		want    string
	}{
		{"a byte of a one-chunk payload", 64, 3, "rank 1 sent frame number 0 whose payload fails authentication at bytes 0..64 (forged or corrupted)"},
		{"the tag of a one-chunk payload", 64, 64 + 15, "at bytes 0..64 (forged"},
		{"a byte of the first chunk", big, 100, "at bytes 0..262144 (forged"},
		{"a byte of the last chunk", big, big - 1, "at bytes 524288..614400 (forged"},
		{"a byte of the second chunk's tag", big, big + frameTagLen + 1, "at bytes 262144..524288 (forged"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			trs, c := established(t, nil)
			trs[1].hbPaused.Store(true) // no heartbeat may interleave with the bytes
			sc := trs[1].conns[0]
			sc.wmu.Lock()
			h := rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float64, uint64(tc.payload), uint64(tc.payload/8))
			frame := sealed(sc, append(h, make([]byte, tc.payload)...))
			frame[len(h)+frameHeadAuthLen+tc.flip] ^= 1
			_, err := c.Write(frame)
			sc.wmu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			_, x, err := trs[0].Recv(1, abi.ActChannel)
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, err = %v, want ErrProtocol containing %q", x, err, tc.want)
			}
		})
	}
}

// TestTCPChunkedFrames: payloads around the chunk size arrive intact in
// both directions, concurrently (the tags of a payload over one chunk are
// computed beside its copy, on both ends; run it with -race).
func TestTCPChunkedFrames(t *testing.T) {
	const c = frameChunk / 8 // float64 elements per chunk
	sizes := []int{1, c - 1, c, c + 1, 2 * c, 3*c - 7, 4*c + 5}
	trs := mustWorld(t, 2, nil)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			for i, n := range sizes {
				vals := make([]float64, n)
				for j := range vals {
					vals[j] = float64(r*1000003 + i*7919 + j)
				}
				if err := trs[r].Send(1-r, abi.ActChannel, Tag{Micro: int32(i)}, f64([]int{n}, vals...)); err != nil {
					t.Errorf("rank %d: send %d floats: %v", r, n, err)
					return
				}
			}
		})
		wg.Go(func() {
			for i, n := range sizes {
				tag, x, err := trs[r].Recv(1-r, abi.ActChannel)
				if err != nil {
					t.Errorf("rank %d: recv %d floats: %v", r, n, err)
					return
				}
				vals := make([]float64, n)
				for j := range vals {
					vals[j] = float64((1-r)*1000003 + i*7919 + j)
				}
				if err := sameTensor(x, f64([]int{n}, vals...)); tag.Micro != int32(i) || err != nil {
					t.Errorf("rank %d: message %d (%d floats): tag %v, %v", r, i, n, tag, err)
				}
			}
		})
	}
	wg.Wait()
}

// TestTCPChunkedFrameCut: a peer that disconnects inside the second chunk
// of a payload is named as closed, as one that disconnects inside a payload
// of one chunk (TestBadPeers, "peer disconnects mid-frame").
func TestTCPChunkedFrameCut(t *testing.T) {
	trs, c := established(t, nil)
	trs[1].hbPaused.Store(true) // no heartbeat may interleave with the bytes
	sc := trs[1].conns[0]
	const n = 600 << 10
	sc.wmu.Lock()
	frame := sealed(sc, append(rawHeader(frameData, wire.ChannelCode(abi.ActChannel), wire.Float64, n, n/8), make([]byte, n)...))
	_, err := c.Write(frame[:len(frame)-n+frameChunk+1000])
	sc.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	trs[1].Kill()
	if _, _, err := trs[0].Recv(1, abi.ActChannel); !errors.Is(err, ErrPeerClosed) || !strings.Contains(err.Error(), "rank 1 closed the connection") {
		t.Errorf("err = %v", err)
	}
}
