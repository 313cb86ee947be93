package wire

import (
	"errors"
	"unicode"
	"unicode/utf8"
)

// Sentinel causes, for errors.Is; runtime/transport re-exports them
// (transport.ErrClosed, ...), where they are documented.
var (
	ErrClosed        = errors.New("transport closed")
	ErrPeerClosed    = errors.New("peer closed the connection")
	ErrAborted       = errors.New("aborted")
	ErrTimeout       = errors.New("timed out")
	ErrFrameTooLarge = errors.New("frame too large")
	ErrHandshake     = errors.New("handshake refused")
	ErrProtocol      = errors.New("protocol error")
	ErrPanicked      = errors.New("panicked")
)

// ErrNoProgress is a transport's internal timeout of one wait (a mailbox's
// pop, an MPI poll); the transport turns it into a *transport.ProgressError.
var ErrNoProgress = errors.New("no progress")

// sentinelCodes are the causes an abort carries on the wire (TCP's abort
// frame, MPI's abort news), by code.
var sentinelCodes = []error{ErrAborted, ErrPeerClosed, ErrTimeout, ErrProtocol, ErrFrameTooLarge}

// SentinelCode is err's code in an abort (0, ErrAborted, for any other).
func SentinelCode(err error) uint8 {
	for i, s := range sentinelCodes {
		if err == s {
			return uint8(i)
		}
	}
	return 0
}

// SentinelOf is the cause of code (ErrAborted for an unknown one).
func SentinelOf(code uint8) error {
	if int(code) < len(sentinelCodes) {
		return sentinelCodes[code]
	}
	return ErrAborted
}

// OrDefault sets *v to def when it is zero or negative (a configuration
// field left unset).
func OrDefault[T ~int | ~int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Printable reports whether s is valid UTF-8 of printable characters only
// (what a peer's schedule description must be before it is printed).
func Printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// SameScheduleHelp is the advice of a refusal because ranks run different
// schedules (TCP's handshake, MPI's fingerprint check).
const SameScheduleHelp = "every rank must run the same generated schedule: build every rank from the same generated code " +
	"(go generate ./... and rebuild, then start that one binary on every rank), or pass the same -schedule to every rank"
