//go:build !unix

package swap

import "os"

// terminating are the signals a tier catches to remove its directory
// before the process ends (signals.go).
var terminating = []os.Signal{os.Interrupt}

// raise ends the process as an interrupt would.
func raise(os.Signal) { os.Exit(2) }
