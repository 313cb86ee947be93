package transport

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/launch"
)

// The handshake.
//
// Every connection of the connection phase, between a dialer D and a
// listener L, starts with a challenge-response that proves both know the
// shared token; only then does either side say anything about the job.
// The dialer proves first, and the listener sends nothing that depends on
// the token before it has checked that proof, so a connection to a
// listener learns nothing to test guesses of the token against offline.
// Each message is a 4-byte big-endian length and JSON:
//
//	1 D -> L  challenge{proto, nonceD}
//	2 L -> D  challenge{proto, nonceL}
//	3 D -> L  proof{HMAC(token, proto|"D"|nonceD|nonceL)}
//	4 L -> D  proof{err: authentication failed} and hang up, or
//	          proof{HMAC(token, proto|"L"|nonceD|nonceL)}
//	5 D -> L  hello_D (or nothing and hang up, when L's MAC is wrong)
//	6 L -> D  hello_L, verdict{objection to hello_D}
//	7 D -> L  verdict{objection to hello_L}
//	8 L -> D  verdict{} (peer connections; on the rendezvous connection it
//	          comes when every rank has joined and carries the address table)
//
// The MACs bind the protocol version, the role of the side that computes it
// ("D" or "L": a proof cannot be reflected to its sender) and both nonces.
// After step 4 both sides derive the connection's frame keys from the token
// and both nonces (frameauth.go), one per direction.
//
// hello is {proto, purpose, rank, world, fingerprint, schedule, addr,
// plain_frames}. Each side checks the other's hello (world size, rank,
// schedule fingerprint, frame authentication), so both report a mismatch in
// their own words, naming the schedule each side runs (schedule:
// TCPConfig.Schedule, a short printable description) and what to do. A hello
// goes only to a peer that proved the token: the dialer sends its own after
// checking the listener's MAC, the listener after checking the dialer's.
// Before step 5 the listener trusts nothing: a connection that stays silent
// past HandshakeTimeout, sends something that is not this protocol, or fails
// authentication is logged with its remote address and dropped, and the
// rendezvous goes on; after it, the peer holds the token, so an objection
// (another fingerprint, world size, a rank claimed twice) is a real mismatch
// that fails the rendezvous.
//
// What remains: a process that impersonates a listener (binds rank 0's
// address before it does) receives a dialer's MAC over nonces of its
// choosing, which it could test guesses against offline; that is why tokens
// of less than 128 bits are refused (launch.CheckToken).

const protoName = "ppgen-tcp/5" // 3: the hello's schedule; 4: the dialer proves first, authenticated frames; 5: payload tags after the payload, per 256 KiB chunk

const (
	purposeRendezvous = "rendezvous"
	purposePeer       = "peer"

	nonceLen = 16
	macLen   = sha256.Size

	// Size limits of handshake messages. Before authentication a peer may
	// make this rank allocate at most maxPreAuthMsg bytes.
	maxPreAuthMsg = 8 << 10
	maxHelloMsg   = 4 << 10
	maxVerdictMsg = 8 << 20 // the address table of the largest world

	maxWorld     = 1 << 16 // runtime/pipe packs ranks in 16 bits
	maxFieldLen  = 512     // fingerprint, address
	maxReasonLen = 64 << 10
)

// MaxScheduleLen bounds TCPConfig.Schedule and the schedule a peer's hello
// describes, in bytes.
const MaxScheduleLen = 200

type challenge struct {
	Proto string `json:"proto"`
	Nonce []byte `json:"nonce"`
}

type proof struct {
	MAC []byte `json:"mac,omitempty"`
	Err string `json:"err,omitempty"`
}

type hello struct {
	Proto       string `json:"proto"`
	Purpose     string `json:"purpose"`
	Rank        int    `json:"rank"`
	World       int    `json:"world"`
	Fingerprint string `json:"fingerprint"`
	Schedule    string `json:"schedule,omitempty"` // TCPConfig.Schedule: for messages only
	Addr        string `json:"addr,omitempty"`
	// PlainFrames: this rank sends and expects frames without MACs
	// (TCPConfig.PlainFrames); both sides must agree.
	PlainFrames bool `json:"plain_frames,omitempty"`
}

type verdict struct {
	Err   string   `json:"err,omitempty"`
	Addrs []string `json:"addrs,omitempty"`
}

var errNotPpgen = errors.New("not a ppgen handshake")

// errBusy: the listener closed the connection before its challenge, or
// sent none in time (it had maxPendingHandshakes handshakes under way, ran
// out of file descriptors, or is not a ppgen rank).
var errBusy = errors.New("closed before its challenge (busy with other handshakes?)")

// decodeJSON decodes exactly one JSON value of b into v, refusing unknown
// fields and trailing data.
func decodeJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errNotPpgen, err)
	}
	if d.More() {
		return fmt.Errorf("%w: data after the message", errNotPpgen)
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the message", errNotPpgen)
	}
	return nil
}

// decodeChallenge decodes and validates steps 1 and 2 (a MAC there, as in
// ppgen-tcp/3, is refused as an unknown field).
func decodeChallenge(b []byte) (challenge, error) {
	var c challenge
	if err := decodeJSON(b, &c); err != nil {
		// Another version of ppgen says so in its first message.
		var other struct {
			Proto string `json:"proto"`
		}
		if json.Unmarshal(b, &other) == nil && other.Proto != "" && other.Proto != protoName {
			return c, fmt.Errorf("%w: it speaks protocol %.64q, this rank speaks %q (another ppgen version?)", errNotPpgen, other.Proto, protoName)
		}
		return c, err
	}
	switch {
	case c.Proto != protoName:
		return c, fmt.Errorf("%w: protocol %.64q, want %q", errNotPpgen, c.Proto, protoName)
	case len(c.Nonce) != nonceLen:
		return c, fmt.Errorf("%w: nonce of %d bytes, want %d", errNotPpgen, len(c.Nonce), nonceLen)
	}
	return c, nil
}

// decodeProof decodes and validates the proofs of steps 3 and 4.
func decodeProof(b []byte) (proof, error) {
	var p proof
	if err := decodeJSON(b, &p); err != nil {
		return p, err
	}
	switch {
	case len(p.MAC) != 0 && len(p.MAC) != macLen:
		return p, fmt.Errorf("%w: MAC of %d bytes, want %d", errNotPpgen, len(p.MAC), macLen)
	case len(p.Err) > maxReasonLen:
		return p, fmt.Errorf("%w: reason of %d bytes", errNotPpgen, len(p.Err))
	case (len(p.MAC) == 0) == (p.Err == ""):
		return p, fmt.Errorf("%w: a proof holds either a MAC or a reason", errNotPpgen)
	}
	return p, nil
}

// validAddr reports whether a is a host:port a rank could listen on.
func validAddr(a string) bool {
	if len(a) > maxFieldLen {
		return false
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p > 0 && p < 1<<16
}

// decodeHello decodes and validates a hello. It checks the form (ranges,
// lengths); whether the hello suits this rank is TCP.check's business.
func decodeHello(b []byte) (hello, error) {
	var h hello
	if err := decodeJSON(b, &h); err != nil {
		return h, err
	}
	switch {
	case h.Proto != protoName:
		return h, fmt.Errorf("%w: protocol %.64q, want %q", errNotPpgen, h.Proto, protoName)
	case h.Purpose != purposeRendezvous && h.Purpose != purposePeer:
		return h, fmt.Errorf("%w: purpose %.64q", errNotPpgen, h.Purpose)
	case h.World < 1 || h.World > maxWorld:
		return h, fmt.Errorf("%w: world size %d outside [1, %d]", errNotPpgen, h.World, maxWorld)
	case h.Rank < 0 || h.Rank >= h.World:
		return h, fmt.Errorf("%w: rank %d outside [0, %d)", errNotPpgen, h.Rank, h.World)
	case len(h.Fingerprint) > maxFieldLen:
		return h, fmt.Errorf("%w: fingerprint of %d bytes, at most %d", errNotPpgen, len(h.Fingerprint), maxFieldLen)
	case !wire.Printable(h.Fingerprint):
		return h, fmt.Errorf("%w: fingerprint %.80q is not printable text", errNotPpgen, h.Fingerprint)
	case len(h.Schedule) > MaxScheduleLen:
		return h, fmt.Errorf("%w: schedule description of %d bytes, at most %d", errNotPpgen, len(h.Schedule), MaxScheduleLen)
	case !wire.Printable(h.Schedule):
		return h, fmt.Errorf("%w: schedule description %.80q is not printable text", errNotPpgen, h.Schedule)
	case h.Addr != "" && !validAddr(h.Addr):
		return h, fmt.Errorf("%w: listen address %.80q is not host:port", errNotPpgen, h.Addr)
	}
	return h, nil
}

// decodeVerdict decodes and validates a verdict.
func decodeVerdict(b []byte) (verdict, error) {
	var v verdict
	if err := decodeJSON(b, &v); err != nil {
		return v, err
	}
	if len(v.Err) > maxReasonLen {
		return v, fmt.Errorf("%w: reason of %d bytes", errNotPpgen, len(v.Err))
	}
	if len(v.Addrs) > maxWorld {
		return v, fmt.Errorf("%w: %d addresses, at most %d", errNotPpgen, len(v.Addrs), maxWorld)
	}
	for i, a := range v.Addrs {
		if a != "" && !validAddr(a) {
			return v, fmt.Errorf("%w: address %d %.80q is not host:port", errNotPpgen, i, a)
		}
	}
	return v, nil
}

func writeMsg(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = c.Write(buf)
	return err
}

// readMsg reads one length-prefixed message of at most limit bytes.
func readMsg(c net.Conn, limit int) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("%w (a message of %d bytes, at most %d here)", errNotPpgen, n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	return b, nil
}

// readDecoded reads one message of at most limit bytes and decodes it.
func readDecoded[T any](c net.Conn, limit int, decode func([]byte) (T, error)) (T, error) {
	b, err := readMsg(c, limit)
	if err != nil {
		var zero T
		return zero, err
	}
	return decode(b)
}

func readChallenge(c net.Conn) (challenge, error) {
	return readDecoded(c, maxPreAuthMsg, decodeChallenge)
}

func readProof(c net.Conn) (proof, error) { return readDecoded(c, maxPreAuthMsg, decodeProof) }

func readHello(c net.Conn) (hello, error) { return readDecoded(c, maxHelloMsg, decodeHello) }

func readVerdict(c net.Conn) (verdict, error) { return readDecoded(c, maxVerdictMsg, decodeVerdict) }

func newNonce() []byte {
	n := make([]byte, nonceLen)
	_, _ = rand.Read(n)
	return n
}

func (t *TCP) hello(purpose, addr string) hello {
	return hello{Proto: protoName, Purpose: purpose, Rank: t.rank, World: t.world, Fingerprint: t.cfg.Fingerprint, Schedule: t.cfg.Schedule, Addr: addr,
		PlainFrames: t.cfg.PlainFrames}
}

// mac is the proof of role ("D": the dialer, "L": the listener) over both
// nonces.
func (t *TCP) mac(role string, nonceD, nonceL []byte) []byte {
	m := hmac.New(sha256.New, []byte(t.cfg.Token))
	m.Write([]byte(protoName + "|" + role + "|"))
	m.Write(nonceD)
	m.Write(nonceL)
	return m.Sum(nil)
}

func showFP(fp string) string {
	if fp == "" {
		return "(none)"
	}
	return fp
}

// shortFP is a fingerprint cut for a message that also describes the
// schedule: "sha256:" and 12 hex digits.
func shortFP(fp string) string {
	const keep = len("sha256:") + 12
	if len(fp) > keep+2 {
		return fp[:keep] + ".."
	}
	return showFP(fp)
}

// runs says what a rank runs, for a mismatch message: its schedule's
// description and fingerprint, or the fingerprint alone when it describes
// none.
func runs(schedule, fp string) string {
	if schedule == "" {
		return "schedule fingerprint " + showFP(fp)
	}
	return fmt.Sprintf("schedule %s, fingerprint %s", schedule, shortFP(fp))
}

// The advice of the mismatch messages.
const (
	sameWorldHelp = "every rank must be started with the same WORLD_SIZE, the schedule's ranks " +
		"(times the data-parallel replicas): start the job with one launcher command (ppgen launch -n N, torchrun, srun), " +
		"and every rank from the same binary and flags"
)

// check returns why this rank refuses an authenticated peer's hello, or "".
// from is the peer's remote address. A mismatch names what each side runs
// (the schedules' descriptions when the ranks have them) and what to do.
func (t *TCP) check(h hello, want int, from net.Addr) string {
	switch {
	case want >= 0 && h.Rank != want:
		return fmt.Sprintf("expected rank %d at %s, but rank %d answered", want, from, h.Rank)
	case h.World != t.world:
		msg := fmt.Sprintf("rank %d at %s runs with world size %d, this rank (%d) with %d", h.Rank, from, h.World, t.rank, t.world)
		if h.Schedule != "" || t.cfg.Schedule != "" {
			msg += fmt.Sprintf(" (rank %d runs %s; this rank runs %s)", h.Rank, runs(h.Schedule, h.Fingerprint), runs(t.cfg.Schedule, t.cfg.Fingerprint))
		}
		return msg + ": " + sameWorldHelp
	case h.Rank == t.rank:
		return fmt.Sprintf("a peer at %s claims rank %d, which is this rank", from, h.Rank)
	case h.PlainFrames != t.cfg.PlainFrames:
		return fmt.Sprintf("rank %d at %s %s, this rank (%d) %s: set %s the same on every rank",
			h.Rank, from, framesSaying(h.PlainFrames), t.rank, framesSaying(t.cfg.PlainFrames), launch.PlainFramesVar)
	case h.Fingerprint != t.cfg.Fingerprint:
		if h.Schedule == "" && t.cfg.Schedule == "" {
			return fmt.Sprintf("rank %d at %s runs schedule fingerprint %s, this rank (%d) runs %s: %s",
				h.Rank, from, showFP(h.Fingerprint), t.rank, showFP(t.cfg.Fingerprint), wire.SameScheduleHelp)
		}
		msg := fmt.Sprintf("rank %d at %s runs %s; this rank (%d) runs %s: ", h.Rank, from, runs(h.Schedule, h.Fingerprint), t.rank, runs(t.cfg.Schedule, t.cfg.Fingerprint))
		if h.Schedule == t.cfg.Schedule {
			return msg + "the same schedule generated differently (other ppgen flags, or another ppgen version): " +
				"generate it once (go generate ./...) and rebuild every rank from that code, so that every rank runs the same program"
		}
		return msg + wire.SameScheduleHelp
	}
	return ""
}

// framesSaying says what a rank with PlainFrames plain sends.
func framesSaying(plain bool) string {
	if plain {
		return "sends frames without authentication (" + launch.PlainFramesVar + "=1)"
	}
	return "sends authenticated frames"
}

func authFailure(who string, from net.Addr) string {
	return fmt.Sprintf("%s at %s failed authentication: its shared token differs from this rank's (set the same PPGEN_TOKEN on every rank)", who, from)
}

// handshakeDeadline is when a handshake begun now must be over: after
// HandshakeTimeout, and no later than the rendezvous.
func (t *TCP) handshakeDeadline(r *rdv) time.Time {
	d := time.Now().Add(t.cfg.HandshakeTimeout)
	if !r.deadline.IsZero() && r.deadline.Before(d) {
		d = r.deadline
	}
	return d
}

// shakeDialer runs the dialer's side up to step 7 and returns the
// listener's hello and the connection's frame keys. want is the rank
// expected there. The caller reads the final verdict (step 8).
func (t *TCP) shakeDialer(c net.Conn, me hello, want int) (hello, *frameKeys, error) {
	who := fmt.Sprintf("rank %d", want)
	from := c.RemoteAddr()
	dropped := func(err error) error {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w: %s at %s accepted the connection but did not finish the handshake in time (HandshakeTimeout %v; is it a ppgen rank of this job?): %v",
				ErrTimeout, who, from, t.cfg.HandshakeTimeout, err)
		}
		return fmt.Errorf("%s at %s dropped the handshake (not a ppgen rank of this job?): %w", who, from, err)
	}
	// A listener that closes the connection before its challenge may have
	// had maxPendingHandshakes handshakes under way, and one that says
	// nothing may not have accepted it yet (out of file descriptors): errBusy,
	// worth a retry.
	busy := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w: %w", errBusy, dropped(err))
		}
		return dropped(err)
	}
	nD := newNonce()
	if err := writeMsg(c, challenge{Proto: protoName, Nonce: nD}); err != nil {
		return hello{}, nil, busy(err)
	}
	ch, err := readChallenge(c)
	if err != nil {
		return hello{}, nil, busy(err)
	}
	if err := writeMsg(c, proof{MAC: t.mac("D", nD, ch.Nonce)}); err != nil {
		return hello{}, nil, dropped(err)
	}
	theirProof, err := readProof(c)
	if err != nil {
		return hello{}, nil, dropped(err)
	}
	if theirProof.Err != "" {
		return hello{}, nil, fmt.Errorf("%w: %s at %s refused this rank: %s", ErrHandshake, who, from, theirProof.Err)
	}
	if !hmac.Equal(theirProof.MAC, t.mac("L", nD, ch.Nonce)) {
		return hello{}, nil, fmt.Errorf("%w: %s", ErrHandshake, authFailure(who, from))
	}
	keys := t.frameKeys(nD, ch.Nonce, true)
	if err := writeMsg(c, me); err != nil {
		return hello{}, nil, dropped(err)
	}
	h, err := readHello(c)
	if err != nil {
		return h, nil, dropped(err)
	}
	theirs, err := readVerdict(c)
	if err != nil {
		return h, nil, dropped(err)
	}
	objection := t.check(h, want, from)
	_ = writeMsg(c, verdict{Err: objection})
	if objection != "" {
		return h, nil, fmt.Errorf("%w: %s", ErrHandshake, objection)
	}
	if theirs.Err != "" {
		return h, nil, fmt.Errorf("%w: rank %d at %s refused this rank: %s", ErrHandshake, h.Rank, from, theirs.Err)
	}
	return h, keys, nil
}

// shakeOutcome is the listener's result of one handshake.
type shakeOutcome struct {
	h    hello
	keys *frameKeys // on success
	// err is nil on success. With refused, the connection never proved the
	// token (or sent no valid hello after proving it): it is dropped and the
	// rendezvous goes on. Without, the peer is an authenticated rank whose
	// hello or answer does not fit: a real mismatch.
	err     error
	refused bool
}

// shakeListener runs the listener's side. accept adds caller-specific
// objections. With final, the accepting verdict (step 8) is sent too.
func (t *TCP) shakeListener(c net.Conn, final bool, purpose string, accept func(hello) string) shakeOutcome {
	from := c.RemoteAddr()
	refuse := func(format string, args ...any) shakeOutcome {
		for i, a := range args {
			if err, ok := a.(error); ok && errors.Is(err, os.ErrDeadlineExceeded) {
				args[i] = fmt.Errorf("nothing within the handshake deadline (HandshakeTimeout %v)", t.cfg.HandshakeTimeout)
			}
		}
		return shakeOutcome{err: fmt.Errorf(format, args...), refused: true}
	}
	ch, err := readChallenge(c)
	if err != nil {
		return refuse("no valid challenge: %w", err)
	}
	nL := newNonce()
	if err := writeMsg(c, challenge{Proto: protoName, Nonce: nL}); err != nil {
		return refuse("dropped the handshake: %w", err)
	}
	p, err := readProof(c)
	if err != nil {
		return refuse("no valid proof of the token: %w", err)
	}
	if p.Err != "" {
		return refuse("%w: it sent a refusal instead of a proof: %.200s", ErrHandshake, p.Err)
	}
	if !hmac.Equal(p.MAC, t.mac("D", ch.Nonce, nL)) {
		_ = writeMsg(c, proof{Err: "failed authentication: the shared token differs (set the same PPGEN_TOKEN on every rank)"})
		return refuse("%w: failed authentication (wrong token)", ErrHandshake)
	}
	// The dialer holds the token: only now does anything depend on it.
	if err := writeMsg(c, proof{MAC: t.mac("L", ch.Nonce, nL)}); err != nil {
		return refuse("dropped the handshake: %w", err)
	}
	keys := t.frameKeys(ch.Nonce, nL, false)
	h, err := readHello(c)
	if err != nil {
		return refuse("authenticated, but sent no valid hello (or refused this rank's proof): %w", err)
	}
	objection := t.check(h, -1, from)
	if objection == "" && h.Purpose != purpose {
		objection = fmt.Sprintf("rank %d at %s connected for %q, expected %q", h.Rank, from, h.Purpose, purpose)
	}
	if objection == "" && accept != nil {
		objection = accept(h)
	}
	fail := func(err error) shakeOutcome { return shakeOutcome{h: h, err: err} }
	droppedErr := func(err error) shakeOutcome {
		if objection != "" {
			return fail(fmt.Errorf("%w: %s", ErrHandshake, objection))
		}
		return fail(fmt.Errorf("rank %d at %s dropped the handshake: %w", h.Rank, from, err))
	}
	if err := writeMsg(c, t.hello(purpose, "")); err != nil {
		return droppedErr(err)
	}
	if err := writeMsg(c, verdict{Err: objection}); err != nil {
		return droppedErr(err)
	}
	theirs, err := readVerdict(c)
	if err != nil {
		return droppedErr(err)
	}
	if objection != "" {
		return fail(fmt.Errorf("%w: %s", ErrHandshake, objection))
	}
	if theirs.Err != "" {
		return fail(fmt.Errorf("%w: rank %d at %s refused this rank: %s", ErrHandshake, h.Rank, from, theirs.Err))
	}
	if final {
		if err := writeMsg(c, verdict{}); err != nil {
			return fail(fmt.Errorf("rank %d at %s dropped the handshake: %w", h.Rank, from, err))
		}
	}
	return shakeOutcome{h: h, keys: keys}
}
