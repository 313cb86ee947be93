package pipe

import (
	"slices"
	"strings"
)

// FingerprintSep joins the fingerprints of several programs in one (see
// Fingerprints). Generated fingerprints ("sha256:" and hex digits) never
// hold it.
const FingerprintSep = "+"

// Fingerprints combines the fingerprints of the programs that run in one
// world, such as a train program and its forward-only eval program generated
// into one package (`ppgen gen -name Eval`), into the one fingerprint the
// world's ranks check at their single rendezvous (world.Options.Fingerprint):
// the fingerprints sorted, repeats dropped, joined by FingerprintSep. The
// same programs in any order give the same value, and a rank running another
// program in any of them is refused by its peers. Fingerprints of one
// fingerprint is that fingerprint, so a world of one program is unchanged.
//
// New accepts a transport that reports such a combination
// (transport.Fingerprinter) when it holds the Spec's own fingerprint, so one
// world's transport serves the Execs of every program combined, each
// checking its own.
//
// The transports carry a fingerprint of at most 512 bytes: about seven
// generated fingerprints of 71 bytes.
func Fingerprints(fps ...string) string {
	fps = slices.Clone(fps)
	slices.Sort(fps)
	return strings.Join(slices.Compact(fps), FingerprintSep)
}

// fingerprintCovers reports whether the fingerprint a transport checked
// with its peers, one program's or a combination of several (Fingerprints),
// covers the program whose fingerprint is own.
func fingerprintCovers(checked, own string) bool {
	return checked == own || slices.Contains(strings.Split(checked, FingerprintSep), own)
}
