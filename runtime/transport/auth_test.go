package transport

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"
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
	p := raw[n:]
	for i := range int(payloadChunks(int64(len(p)))) {
		chunk := p[min(i*frameChunk, len(p)):min((i+1)*frameChunk, len(p))]
		out = append(append(out, chunk...), c.seal.sealChunk(i, chunk)...)
	}
	c.seal.seq++
	return out
}
