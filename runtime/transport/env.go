package transport

import "github.com/ppgen/ppgen/runtime/launch"

// ConfigFromEnv returns a TCP configuration for the rank e describes (see
// [launch.FromEnv]) with the given schedule fingerprint: its rank, world size
// and rendezvous address, the token, its opt-out (AllowNoToken), the opt-out
// of frame authentication (PlainFrames) and the
// Timeout of the environment (PPGEN_TIMEOUT). Callers may adjust timeouts
// before [DialTCP], but should keep a Timeout the user set (non-zero) over a
// default of their own.
//
// It lives here, not in launch, so that launch (which the ppgen command
// links) does not pull in the transport and its tensor library.
func ConfigFromEnv(e launch.Env, fingerprint string) TCPConfig {
	return TCPConfig{Rank: e.Rank, World: e.World, MasterAddr: e.Addr(),
		Token: e.Token, AllowNoToken: e.AllowNoToken, PlainFrames: e.PlainFrames, Timeout: e.Timeout, Fingerprint: fingerprint}
}
