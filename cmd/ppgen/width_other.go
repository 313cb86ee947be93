//go:build !(linux || darwin || freebsd)

package main

import "os"

// terminalColumns cannot ask the terminal here: COLUMNS or the default
// width applies.
func terminalColumns(*os.File) (int, bool) { return 0, false }
