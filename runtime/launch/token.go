package launch

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
)

// MinTokenBits is the least entropy a shared token may have (CheckToken).
const MinTokenBits = 128

// tokenAlphabets are the alphabets TokenBits knows, smallest first, with
// how many symbols each has (the letters of hex digits count in either
// case, base64's padding and URL variants count as its 64).
var tokenAlphabets = []struct {
	name    string
	symbols string
	size    int
}{
	{"decimal digits", "0123456789", 10},
	{"hex digits", "0123456789abcdefABCDEF", 16},
	{"base64 characters", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=", 64},
	{"printable ASCII characters", "", 95}, // 0x20..0x7e
}

// TokenBits returns the entropy CheckToken counts for token, and the
// alphabet it counted it in: its length times the bits of one symbol of
// the smallest alphabet that holds it, log2 of the alphabet's size (decimal
// digits 3.32, hex digits 4, base64 6, printable ASCII log2(95) = 6.57,
// anything else 8 per byte). It is the entropy of a token drawn at random
// from that alphabet: the rule cannot tell a random token from a chosen one
// of the same length ("aaaa..." of 32 hex digits passes), so tokens must be
// random.
func TokenBits(token string) (bits float64, alphabet string) {
	for _, a := range tokenAlphabets {
		outside := func(r rune) bool {
			if a.symbols == "" {
				return r < 0x20 || r > 0x7e
			}
			return !strings.ContainsRune(a.symbols, r)
		}
		if !strings.ContainsFunc(token, outside) {
			return float64(len(token)) * math.Log2(float64(a.size)), a.name
		}
	}
	return float64(len(token)) * 8, "bytes"
}

// CheckToken refuses a shared token of less than MinTokenBits of entropy
// as TokenBits counts them: at least 32 hex digits, 22 base64 characters
// or 20 printable ASCII characters of a random token. The error says how
// to make one and never shows the token.
func CheckToken(token string) error {
	bits, alphabet := TokenBits(token)
	if bits >= MinTokenBits {
		return nil
	}
	return fmt.Errorf("the shared token (%s) is too weak: %d %s hold about %.0f bits of entropy, fewer than %d, so its proofs could be guessed offline: "+
		"use a random token of at least 32 hex digits, e.g. %s=$(openssl rand -hex 16) or %s=$(head -c16 /dev/urandom | xxd -p) "+
		"(ppgen launch and ppgen template generate one)", TokenVar, len(token), alphabet, bits, MinTokenBits, TokenVar, TokenVar)
}

// NewToken returns a new random token: 16 bytes of crypto/rand as 32 hex
// digits (128 bits, what CheckToken asks at least).
func NewToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("launch: make a random token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
