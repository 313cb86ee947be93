package transport

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// recordConn is a net.Conn that keeps what is written to it.
type recordConn struct {
	net.Conn
	out bytes.Buffer
}

func (c *recordConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }

// frameLayoutGolden holds the protocol name and a digest of the bytes a
// fixed connection writes for fixed frames.
const frameLayoutGolden = "testdata/frame_layout.golden"

// TestFrameLayoutPinned: the bytes of an authenticated connection's frames
// (fixed token and nonces, a header-only frame, a one-chunk and a
// three-chunk payload) are pinned to the protocol name. A change of the
// wire layout that keeps protoName fails here: bump protoName, so that
// ranks of two layouts refuse each other at the rendezvous naming both,
// then rewrite the golden with -update.
func TestFrameLayoutPinned(t *testing.T) {
	tr := &TCP{cfg: TCPConfig{Token: strings.Repeat("5a", 16)}}
	nD, nL := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	rec := &recordConn{}
	c := newTCPConnKeys(tr, 1, rec, tr.frameKeys(nD, nL, true))
	big := make([]byte, 600<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, p := range [][]byte{nil, big[:1000], big} {
		h := make([]byte, frameHdrLen)
		copy(h, "frame-header-bytes")
		binary.LittleEndian.PutUint32(h[12:], frameMagic)
		if err := c.writeFrame(h, p); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256(rec.out.Bytes())
	got := protoName + " " + hex.EncodeToString(sum[:]) + "\n"
	if *update {
		if err := os.WriteFile(frameLayoutGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(frameLayoutGolden)
	if err != nil {
		t.Fatalf("%v (create it with go test -run TestFrameLayoutPinned -update)", err)
	}
	if gotName, wantName := protoName, strings.Fields(string(want))[0]; gotName == wantName && got != string(want) {
		t.Fatalf("the frame layout changed under protocol %s (digest %s, pinned %s): bump protoName in handshake.go, then go test -run TestFrameLayoutPinned -update", protoName, strings.Fields(got)[1], strings.Fields(string(want))[1])
	} else if got != string(want) {
		t.Fatalf("protocol %s, pinned %s: rewrite the golden with go test -run TestFrameLayoutPinned -update", gotName, wantName)
	}
}
