package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// The unified diff `ppgen diff` prints.

// unifiedDiff returns the unified diff of a and b by lines ("" when they are
// equal), with ctx lines of context, labelled oldName and newName.
func unifiedDiff(a, b []byte, oldName, newName, newNote string, ctx int) string {
	x, y := splitLines(a), splitLines(b)
	// More context than lines adds nothing, and keeps 2·ctx and i1+ctx
	// below from overflowing.
	ctx = min(max(ctx, 0), len(x)+len(y))
	ops := diffLines(x, y)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\t%s\n", oldName, newName, newNote)
	// Group the edits into hunks with ctx lines of context.
	type span struct{ i0, i1, j0, j1 int } // x[i0:i1] replaced by y[j0:j1]
	var edits []span
	i, j := 0, 0
	for _, op := range ops {
		switch op {
		case '=':
			i, j = i+1, j+1
		case '-':
			if n := len(edits); n > 0 && edits[n-1].i1 == i && edits[n-1].j1 == j {
				edits[n-1].i1++
			} else {
				edits = append(edits, span{i, i + 1, j, j})
			}
			i++
		case '+':
			if n := len(edits); n > 0 && edits[n-1].i1 == i && edits[n-1].j1 == j {
				edits[n-1].j1++
			} else {
				edits = append(edits, span{i, i, j, j + 1})
			}
			j++
		}
	}
	for k := 0; k < len(edits); {
		// A hunk runs from edits[k] through the last edit closer than 2·ctx.
		end := k
		for end+1 < len(edits) && edits[end+1].i0-edits[end].i1 <= 2*ctx {
			end++
		}
		i0 := max(edits[k].i0-ctx, 0)
		j0 := edits[k].j0 - (edits[k].i0 - i0)
		i1 := min(edits[end].i1+ctx, len(x))
		j1 := edits[end].j1 + (i1 - edits[end].i1)
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(i0, i1-i0), hunkRange(j0, j1-j0))
		ii := i0
		for e := k; e <= end; e++ {
			for ; ii < edits[e].i0; ii++ {
				out.WriteString(" " + x[ii])
			}
			for _, l := range x[edits[e].i0:edits[e].i1] {
				out.WriteString("-" + l)
			}
			for _, l := range y[edits[e].j0:edits[e].j1] {
				out.WriteString("+" + l)
			}
			ii = edits[e].i1
		}
		for ; ii < i1; ii++ {
			out.WriteString(" " + x[ii])
		}
		k = end + 1
	}
	return out.String()
}

func hunkRange(start, n int) string {
	switch n {
	case 0:
		return strconv.Itoa(start) + ",0"
	case 1:
		return strconv.Itoa(start + 1)
	}
	return strconv.Itoa(start+1) + "," + strconv.Itoa(n)
}

// splitLines splits data into lines that keep their "\n"; a last line
// without one gets "\n\\ No newline at end of file\n".
func splitLines(data []byte) []string {
	var lines []string
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lines = append(lines, string(data)+"\n\\ No newline at end of file\n")
			break
		}
		lines = append(lines, string(data[:i+1]))
		data = data[i+1:]
	}
	return lines
}

// diffLines returns an edit script from x to y: '=' keep, '-' delete from
// x, '+' insert from y. It is Myers' algorithm on what lies between the
// common prefix and suffix; past maxD edits it gives up on minimality and
// replaces the rest of the middle wholesale.
func diffLines(x, y []string) []byte {
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	ops := bytes.Repeat([]byte{'='}, pre)
	ops = append(ops, myers(x[pre:len(x)-suf], y[pre:len(y)-suf], 4000)...)
	return append(ops, bytes.Repeat([]byte{'='}, suf)...)
}

func myers(a, b []string, maxD int) []byte {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return append(bytes.Repeat([]byte{'-'}, n), bytes.Repeat([]byte{'+'}, m)...)
	}
	off := n + m
	v := make([]int, 2*off+2)
	var trace [][]int
	for d := 0; d <= n+m; d++ {
		if d > maxD {
			return append(bytes.Repeat([]byte{'-'}, n), bytes.Repeat([]byte{'+'}, m)...)
		}
		trace = append(trace, append([]int(nil), v[off-d:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var i int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				i = v[off+k+1]
			} else {
				i = v[off+k-1] + 1
			}
			j := i - k
			for i < n && j < m && a[i] == b[j] {
				i, j = i+1, j+1
			}
			v[off+k] = i
			if i >= n && j >= m {
				return backtrack(trace, d, n, m)
			}
		}
	}
	return nil
}

// backtrack rebuilds the edit script from the saved V arrays: trace[d]
// holds v[-d .. d+1] as it was before round d (v[k] at index k+d).
func backtrack(trace [][]int, d, n, m int) []byte {
	var ops []byte
	i, j := n, m
	for ; d > 0; d-- {
		v := trace[d]
		k := i - j
		pk := k - 1
		if k == -d || (k != d && v[k-1+d] < v[k+1+d]) {
			pk = k + 1
		}
		pi := v[pk+d]
		pj := pi - pk
		for i > pi && j > pj { // the snake after the edit
			ops = append(ops, '=')
			i, j = i-1, j-1
		}
		if pk == k+1 {
			ops = append(ops, '+') // b[j-1] inserted
			j--
		} else {
			ops = append(ops, '-') // a[i-1] deleted
			i--
		}
	}
	for i > 0 && j > 0 {
		ops = append(ops, '=')
		i, j = i-1, j-1
	}
	for l, r := 0, len(ops)-1; l < r; l, r = l+1, r-1 {
		ops[l], ops[r] = ops[r], ops[l]
	}
	return ops
}
