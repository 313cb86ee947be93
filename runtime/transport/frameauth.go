package transport

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// Frame authentication.
//
// Unless TCPConfig.PlainFrames opts out, every frame on a peer connection
// carries tags, GMACs (AES-256-GCM over an empty plaintext): one over its
// header and dims, sent right after them with the frame's sequence number,
// and one after each chunk of up to frameChunk payload bytes (one for an
// empty payload):
//
//	header, dims | seq uint64 LE | tagH [16] | chunk 0 | tag 0 | chunk 1 | tag 1 ...
//
// Each direction of a connection has its own key, derived with HKDF-SHA256
// from the token (secret), both handshake nonces (salt) and the direction
// (info), and its own sequence of frame numbers from 0. A tag's GCM nonce is
// the frame number, 'H' or 'P' and the chunk's index, so no nonce repeats
// under a key. The receiver checks tagH before it decodes the header (nothing
// a third party wrote sizes an allocation), then that the number is the one
// due, then each chunk's tag before it hands the frame on: a frame injected
// into the connection by anyone who does not hold the token, or a frame
// replayed or reordered, fails the transport with ErrProtocol naming the peer
// and why.
//
// GMAC rather than HMAC-SHA256: with AES-NI and carry-less multiplication it
// runs at about 7 GB/s on 4 MiB against HMAC-SHA256's 1.7 (SHA-NI). The
// chunks let the sender tag chunk k+1 while the receiver checks chunk k,
// instead of each waiting for the other's whole frame (BENCHMARKS.md has the
// cost). With an empty token (AllowNoToken) the keys depend on the nonces
// only: frames are then safe from a blind injector, not from one who saw the
// handshake.
const (
	frameSeqLen      = 8
	frameTagLen      = 16
	frameHeadAuthLen = frameSeqLen + frameTagLen
	frameKeyLen      = 32 // AES-256
	frameChunk       = 1 << 20
)

// payloadChunks is the number of tagged chunks of an n-byte payload.
func payloadChunks(n int64) int64 { return max(1, (n+frameChunk-1)/frameChunk) }

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
	tail  [frameTagLen]byte
}

// sealHead numbers the next frame, header h, and returns what follows h
// on the wire (valid until the next call).
func (s *frameSealer) sealHead(h []byte) []byte {
	binary.LittleEndian.PutUint64(s.head[:frameSeqLen], s.seq)
	s.aead.Seal(s.head[frameSeqLen:frameSeqLen], frameNonce(&s.nonce, s.seq, 'H', 0), nil, h)
	return s.head[:]
}

// sealChunk returns the tag of chunk i of the current frame's payload,
// p (valid until the next call).
func (s *frameSealer) sealChunk(i int, p []byte) []byte {
	return s.aead.Seal(s.tail[:0], frameNonce(&s.nonce, s.seq, 'P', i), nil, p)
}

// frameOpener checks the frames one side receives (the reader's).
type frameOpener struct {
	aead  cipher.AEAD
	seq   uint64 // the number of the next frame
	nonce [12]byte
	buf   [frameHeadAuthLen]byte
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
// accepted, chunk by chunk with their tags, and checks each.
func (o *frameOpener) readPayload(r io.Reader, p []byte) error {
	seq := o.seq
	o.seq++
	tag := o.buf[:frameTagLen]
	for i := range int(payloadChunks(int64(len(p)))) {
		chunk := p[min(i*frameChunk, len(p)):min((i+1)*frameChunk, len(p))]
		if _, err := io.ReadFull(r, chunk); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, tag); err != nil {
			return err
		}
		if _, err := o.aead.Open(nil, frameNonce(&o.nonce, seq, 'P', i), tag, chunk); err != nil {
			return fmt.Errorf("%w: sent frame number %d whose payload fails authentication at bytes %d..%d (forged or corrupted)", ErrProtocol, seq, i*frameChunk, i*frameChunk+len(chunk))
		}
	}
	return nil
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
// one vectored write, or with authenticated frames one per payload chunk
// (the first with the header). The caller holds wmu and has set the write
// deadline.
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
	c.arr[0], c.arr[1] = h, s.sealHead(h)
	head := c.arr[:2]
	for i := range int(payloadChunks(int64(len(p)))) {
		chunk := p[min(i*frameChunk, len(p)):min((i+1)*frameChunk, len(p))]
		c.bufs = append(head, chunk, s.sealChunk(i, chunk))
		head = c.arr[:0]
		if _, err := c.bufs.WriteTo(c.c); err != nil {
			return err
		}
	}
	return nil
}

// newTCPConnKeys is newTCPConn with the connection's frame keys from the
// handshake (nil: plain frames).
func newTCPConnKeys(t *TCP, peer int, c net.Conn, keys *frameKeys) *tcpConn {
	tc := newTCPConn(t, peer, c)
	if keys != nil {
		tc.seal = &frameSealer{aead: keys.send}
		tc.open = &frameOpener{aead: keys.recv}
	}
	return tc
}
