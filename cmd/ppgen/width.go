package main

import (
	"io"
	"os"
	"strconv"
	"strings"
)

// Widths of `ppgen list`'s output: listWidth columns when standard output
// is not a terminal and COLUMNS is unset, never fewer than minListWidth.
const (
	listWidth    = 100
	minListWidth = 60
)

// outputWidth is the width to wrap w's text to: COLUMNS when it is a
// positive number, else the terminal's width when w is a terminal, else
// listWidth; at least minListWidth.
func outputWidth(w io.Writer) int {
	width := listWidth
	if n, err := strconv.Atoi(strings.TrimSpace(os.Getenv("COLUMNS"))); err == nil && n > 0 {
		width = n
	} else if isTerminal(w) {
		if n, ok := terminalWidth(w); ok {
			width = n
		}
	}
	return max(width, minListWidth)
}

// terminalWidth is the width of the terminal w is, when the platform can
// tell (terminalColumns).
func terminalWidth(w io.Writer) (int, bool) {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return 0, false
	}
	return terminalColumns(f)
}
