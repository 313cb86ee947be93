package transport

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
)

// Frame authentication.
//
// Unless TCPConfig.PlainFrames opts out, every frame on a peer connection
// carries tags, GMACs (AES-256-GCM over an empty plaintext): one over its
// header and dims, sent right after them with the frame's sequence number,
// and after the payload one per chunk of up to frameChunk payload bytes (one
// for an empty payload):
//
//	header, dims | seq uint64 LE | tagH [16] | payload | tag 0 | tag 1 ...
//
// Each direction of a connection has its own key, derived with HKDF-SHA256
// from the token (secret), both handshake nonces (salt) and the direction
// (info), and its own sequence of frame numbers from 0. A tag's GCM nonce is
// the frame number, 'H' or 'P' and the chunk's index, so no nonce repeats
// under a key. The receiver checks tagH before it decodes the header (nothing
// a third party wrote sizes an allocation), then that the number is the one
// due, then every chunk's tag before it hands the frame on: a frame injected
// into the connection by anyone who does not hold the token, or a frame
// replayed or reordered, fails the transport with ErrProtocol naming the peer
// and why.
//
// GMAC rather than HMAC-SHA256: with AES-NI and carry-less multiplication it
// runs at about 7 GB/s against HMAC-SHA256's 1.7 (SHA-NI). It is still the
// largest cost of a frame, so it runs beside the copy rather than before or
// after it: the payload goes to the socket in one vectored write, as a plain
// frame's does, while a second goroutine computes the chunks' tags (written
// after it), and the reader reads on while a second goroutine computes the
// tag of each chunk already read, comparing the tags once all have come. The
// tags after the payload keep it contiguous on the wire, so it is read
// straight into the receive tensor. Frames of one chunk are tagged inline. BENCHMARKS.md has the cost. With an empty token (AllowNoToken) the
// keys depend on the nonces only: frames are then safe from a blind injector,
// not from one who saw the handshake.
const (
	frameSeqLen      = 8
	frameTagLen      = 16
	frameHeadAuthLen = frameSeqLen + frameTagLen
	frameKeyLen      = 32 // AES-256
	frameChunk       = 256 << 10
)

// payloadChunks is the number of tagged chunks of an n-byte payload.
func payloadChunks(n int64) int64 { return max(1, (n+frameChunk-1)/frameChunk) }

// payloadChunk returns chunk i of the payload p.
func payloadChunk(p []byte, i int) []byte {
	return p[min(i*frameChunk, len(p)):min((i+1)*frameChunk, len(p))]
}

// tagBuf returns b resized to the tags of n chunks.
func tagBuf(b []byte, n int) []byte { return slices.Grow(b[:0], n*frameTagLen)[:n*frameTagLen] }

// frameKeys are one connection's frame keys, as seen from this side.
type frameKeys struct {
	send, recv cipher.AEAD
}

// frameKeys derives the frame keys of a connection whose handshake used
// the nonces nD (the dialer's) and nL; dialer says which side this rank is.
// It returns nil with PlainFrames.
func (t *TCP) frameKeys(nD, nL []byte, dialer bool) *frameKeys {
	if t.cfg.PlainFrames {
		return nil
	}
	dl, ld := frameAEAD(t.cfg.Token, nD, nL, "D->L"), frameAEAD(t.cfg.Token, nD, nL, "L->D")
	if dialer {
		return &frameKeys{send: dl, recv: ld}
	}
	return &frameKeys{send: ld, recv: dl}
}

// frameAEAD derives the key of one direction (dir, "D->L" or "L->D").
func frameAEAD(token string, nD, nL []byte, dir string) cipher.AEAD {
	salt := append(append(make([]byte, 0, len(nD)+len(nL)), nD...), nL...)
	key, err := hkdf.Key(sha256.New, []byte(token), salt, protoName+" frames "+dir, frameKeyLen)
	if err != nil {
		panic(err) // a fixed 32-byte key from SHA-256 cannot fail
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // likewise: 32 bytes is a valid AES key
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return g
}

// frameNonce is the GCM nonce of frame seq's tag for part ('H' or 'P')
// and chunk (0 for 'H'; below 2^24: maxFrameCap / frameChunk).
func frameNonce(n *[12]byte, seq uint64, part byte, chunk int) []byte {
	binary.LittleEndian.PutUint64(n[:8], seq)
	n[8], n[9], n[10], n[11] = part, byte(chunk), byte(chunk>>8), byte(chunk>>16)
	return n[:]
}

// frameSealer seals the frames one side sends (under tcpConn.wmu).
type frameSealer struct {
	aead  cipher.AEAD
	seq   uint64
	nonce [12]byte
	head  [frameHeadAuthLen]byte
	tags  []byte      // the current frame's payload tags
	done  chan []byte // tags, from the goroutine that computed them (writeFrame)
}

// sealHead numbers the next frame, header h, and returns what follows h
// on the wire (valid until the next call).
func (s *frameSealer) sealHead(h []byte) []byte {
	binary.LittleEndian.PutUint64(s.head[:frameSeqLen], s.seq)
	s.aead.Seal(s.head[frameSeqLen:frameSeqLen], frameNonce(&s.nonce, s.seq, 'H', 0), nil, h)
	return s.head[:]
}

// sealPayload returns the tags of the current frame's payload p, one per
// chunk, in order (valid until the next call).
func (s *frameSealer) sealPayload(p []byte) []byte {
	s.tags = tagBuf(s.tags, int(payloadChunks(int64(len(p)))))
	for i := range len(s.tags) / frameTagLen {
		s.aead.Seal(s.tags[i*frameTagLen:i*frameTagLen], frameNonce(&s.nonce, s.seq, 'P', i), nil, payloadChunk(p, i))
	}
	return s.tags
}

// frameOpener checks the frames one side receives (the reader's).
type frameOpener struct {
	aead      cipher.AEAD
	seq       uint64 // the number of the next frame
	nonce     [12]byte
	buf       [frameHeadAuthLen]byte
	want, got []byte        // the current frame's payload tags: computed, received
	read      chan int      // to the tagging goroutine: chunks read, then -1 (readTagging)
	done      chan struct{} // from it: every chunk tagged
}

// openHead reads what follows the header h of the next frame from r and
// checks it: the header's tag, then the frame's number. Errors wrap
// ErrProtocol and read as what the peer "sent".
func (o *frameOpener) openHead(r io.Reader, h []byte) error {
	if m := binary.LittleEndian.Uint32(h[12:]); m != frameMagic {
		// Not a frame at all: say so now rather than wait for a seal.
		return fmt.Errorf("%w: sent a corrupt frame (bad magic %#08x)", ErrProtocol, m)
	}
	if _, err := io.ReadFull(r, o.buf[:]); err != nil {
		return err
	}
	seq := binary.LittleEndian.Uint64(o.buf[:frameSeqLen])
	if _, err := o.aead.Open(nil, frameNonce(&o.nonce, seq, 'H', 0), o.buf[frameSeqLen:], h); err != nil {
		return fmt.Errorf("%w: sent a frame whose header fails authentication (forged or corrupted: its MAC does not match the connection's session key, "+
			"so it was not written by the rank that proved the token)", ErrProtocol)
	}
	if seq != o.seq {
		return fmt.Errorf("%w: sent frame number %d where number %d was due (a replayed or reordered frame)", ErrProtocol, seq, o.seq)
	}
	return nil
}

// readPayload reads the payload p of the frame whose header openHead
// accepted, then its tags, and checks each chunk's. A payload of more than
// one chunk is tagged while it is read (readTagging).
func (o *frameOpener) readPayload(r io.Reader, p []byte) error {
	seq := o.seq
	o.seq++
	n := int(payloadChunks(int64(len(p))))
	o.want, o.got = tagBuf(o.want, n), tagBuf(o.got, n)
	if n == 1 {
		if _, err := io.ReadFull(r, p); err != nil {
			return err
		}
		o.tagChunk(seq, 0, p)
	} else if err := o.readTagging(r, p, seq, n); err != nil {
		return err
	}
	if _, err := io.ReadFull(r, o.got); err != nil {
		return err
	}
	for i := range n {
		if subtle.ConstantTimeCompare(o.want[i*frameTagLen:(i+1)*frameTagLen], o.got[i*frameTagLen:(i+1)*frameTagLen]) != 1 {
			return fmt.Errorf("%w: sent frame number %d whose payload fails authentication at bytes %d..%d (forged or corrupted)",
				ErrProtocol, seq, i*frameChunk, i*frameChunk+len(payloadChunk(p, i)))
		}
	}
	return nil
}

// readTagging reads frame seq's payload p, of n chunks, from r while a
// second goroutine computes the tag of each chunk read (reads as large as
// the socket gives, as a plain frame's); it returns once both are done.
func (o *frameOpener) readTagging(r io.Reader, p []byte, seq uint64, n int) error {
	go func() {
		for i := <-o.read; i >= 0; i = <-o.read {
			o.tagChunk(seq, i, payloadChunk(p, i))
		}
		o.done <- struct{}{}
	}()
	var err error
	off, next := 0, 0
	for off < len(p) && err == nil {
		var m int
		m, err = r.Read(p[off:])
		off += m
		for ; next < n && min((next+1)*frameChunk, len(p)) <= off; next++ {
			o.read <- next
		}
	}
	o.read <- -1
	<-o.done
	switch {
	case off == len(p):
		return nil // as io.ReadFull: an error with the last bytes is the next read's
	case err == io.EOF:
		return io.ErrUnexpectedEOF
	}
	return err
}

// tagChunk computes the tag of chunk i of frame seq's payload into o.want.
func (o *frameOpener) tagChunk(seq uint64, i int, chunk []byte) {
	o.aead.Seal(o.want[i*frameTagLen:i*frameTagLen], frameNonce(&o.nonce, seq, 'P', i), nil, chunk)
}

// skipPayload reads and drops n payload bytes (and their tags: o non-nil)
// of a frame this rank, closing, does not take, unchecked.
func (o *frameOpener) skipPayload(r io.Reader, n int64) error {
	if o != nil {
		n += frameTagLen * payloadChunks(n)
		o.seq++
	}
	_, err := io.CopyN(io.Discard, r, n)
	return err
}

// writeFrame writes one frame, header h (with its dims) and payload p, with
// one vectored write. An authenticated frame's payload tags follow in the
// same write when p is one chunk, else in a second write: a second goroutine
// computes them while the first copies p to the socket. The caller holds wmu
// and has set the write deadline.
func (c *tcpConn) writeFrame(h, p []byte) error {
	defer clear(c.arr[:])
	if c.seal == nil {
		c.arr[0], c.arr[1] = h, p
		c.bufs = c.arr[:2]
		_, err := c.bufs.WriteTo(c.c)
		return err
	}
	s := c.seal
	defer func() { s.seq++ }()
	c.arr[0], c.arr[1], c.arr[2] = h, s.sealHead(h), p
	if len(p) <= frameChunk {
		c.arr[3] = s.sealPayload(p)
		c.bufs = c.arr[:4]
		_, err := c.bufs.WriteTo(c.c)
		return err
	}
	go func() { s.done <- s.sealPayload(p) }()
	c.bufs = c.arr[:3]
	_, err := c.bufs.WriteTo(c.c)
	tags := <-s.done // always: s is not to be shared past this call
	if err != nil {
		return err
	}
	_, err = c.c.Write(tags)
	return err
}

// newTCPConnKeys is newTCPConn with the connection's frame keys from the
// handshake (nil: plain frames).
func newTCPConnKeys(t *TCP, peer int, c net.Conn, keys *frameKeys) *tcpConn {
	tc := newTCPConn(t, peer, c)
	if keys != nil {
		tc.seal = &frameSealer{aead: keys.send, done: make(chan []byte, 1)}
		tc.open = &frameOpener{aead: keys.recv, read: make(chan int, 16), done: make(chan struct{}, 1)}
	}
	return tc
}
