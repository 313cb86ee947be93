package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/vet"
)

// unit is one generated file and the request (`ppgen gen` or `ppgen
// import`) that makes it.
type unit struct {
	path   string          // the output file (absolute)
	req    *gencmd.Request // regenerates it
	origin string          // where the request comes from: "dir/doc.go:7" or "header of dir/x_gen.go"
}

// loadUnits resolves the arguments of diff and check: a .go file is a
// generated file regenerated from the invocation its header records; a
// package pattern stands for every ppgen //go:generate directive of the
// matching packages, plus every generated file in them that no directive
// writes (regenerated from its header: `ppgen gen`, or a `ppgen import`
// whose file the header names relative to the generated file).
func loadUnits(args []string, cwd string) ([]unit, error) {
	targets, err := loadTargets(args)
	if err != nil {
		return nil, err
	}
	var units []unit
	seen := map[string]bool{}
	add := func(u unit) {
		key, err := filepath.Abs(u.path)
		if err != nil {
			key = u.path
		}
		if !seen[key] {
			seen[key] = true
			units = append(units, u)
		}
	}
	for _, t := range targets {
		for _, file := range t.files {
			reqs, err := directives(file, t.pkgName)
			if err != nil {
				return nil, err
			}
			for _, r := range reqs {
				if p := r.req.Path(); p != "-" {
					add(unit{path: p, req: r.req, origin: rel(cwd, file) + ":" + strconv.Itoa(r.line)})
				}
			}
		}
		for _, file := range t.generated {
			if abs, err := filepath.Abs(file); err == nil && seen[abs] {
				continue
			}
			src, err := os.ReadFile(file)
			if err != nil {
				return nil, err
			}
			req, err := gencmd.FromHeader(file, src)
			if err != nil {
				return nil, usagef("%s; regenerate it with a //go:generate line or rerun ppgen gen or ppgen import", err)
			}
			add(unit{path: file, req: req, origin: "the header of " + rel(cwd, file)})
		}
	}
	if len(units) == 0 {
		return nil, usagef("no ppgen-generated files or ppgen //go:generate directives in %s", strings.Join(args, " "))
	}
	return units, nil
}

// parseUnits parses the flags and arguments of diff and check and loads
// the units they name, relative to the working directory it returns.
func parseUnits(fs *flag.FlagSet, args []string) ([]unit, string, error) {
	if err := parseArgs(fs, args); err != nil {
		return nil, "", err
	}
	cwd, _ := os.Getwd()
	units, err := loadUnits(fs.Args(), cwd)
	return units, cwd, err
}

// directive is one `ppgen gen` //go:generate line.
type directive struct {
	line int
	req  *gencmd.Request
}

// directives returns the ppgen gen //go:generate lines of a Go file, parsed
// as go generate would run them ($GOFILE, $GOPACKAGE, ... expanded, the
// package directory as working directory).
func directives(file, pkgName string) ([]directive, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []directive
	for i, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "//go:generate")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		words, err := gencmd.SplitArgs(rest)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, i+1, err)
		}
		for k, w := range words {
			words[k] = os.Expand(w, func(name string) string {
				switch name {
				case "GOFILE":
					return filepath.Base(file)
				case "GOLINE":
					return strconv.Itoa(i + 1)
				case "GOPACKAGE":
					return pkgName
				case "DOLLAR":
					return "$"
				case "GOARCH":
					return runtime.GOARCH
				case "GOOS":
					return runtime.GOOS
				case "GOROOT":
					return runtime.GOROOT()
				}
				return os.Getenv(name)
			})
		}
		args, ok := ppgenGenArgs(words)
		if !ok {
			continue
		}
		req, err := gencmd.Parse(args, gencmd.Env{Dir: filepath.Dir(file), File: filepath.Base(file), Package: pkgName})
		if err != nil {
			return nil, usagef("%s:%d: %v", file, i+1, err)
		}
		out = append(out, directive{line: i + 1, req: req})
	}
	return out, nil
}

// ppgenGenArgs recognizes `go tool ppgen gen ARGS`, `go run
// .../cmd/ppgen[@v] gen ARGS` and `ppgen gen ARGS` and returns ARGS.
func ppgenGenArgs(words []string) ([]string, bool) {
	isPPGen := func(w string) bool {
		w, _, _ = strings.Cut(w, "@")
		return path.Base(filepath.ToSlash(w)) == "ppgen"
	}
	i := 0
	switch {
	case len(words) > 2 && words[0] == "go" && words[1] == "tool":
		i = 2
	case len(words) > 2 && words[0] == "go" && words[1] == "run":
		i = 2
		for i < len(words) && strings.HasPrefix(words[i], "-") {
			i++
		}
	}
	if i >= len(words) || !isPPGen(words[i]) || i+1 >= len(words) || words[i+1] != "gen" {
		return nil, false
	}
	return words[i+2:], true
}

// regenerated is a unit regenerated in memory and compared with the disk.
type regenerated struct {
	unit
	want    []byte // what ppgen generates
	have    []byte // what is on disk (nil when missing)
	missing bool
	err     error // regeneration failed
}

func (r regenerated) differs() bool {
	return r.err == nil && (r.missing || !bytes.Equal(r.want, r.have))
}

func regenerate(u unit) regenerated {
	r := regenerated{unit: u}
	r.want, _, r.err = u.req.Generate()
	if r.err != nil {
		return r
	}
	have, err := os.ReadFile(u.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.missing = true
	case err != nil:
		r.err = err
	default:
		r.have = have
	}
	return r
}

// regenerationError classifies a failed regeneration: a schedule that no
// longer verifies is unsafe (exit 1); anything else is an error (exit 2).
func regenerationError(r regenerated, cwd string) error {
	err := fmt.Errorf("%s (from %s: %s): %w", rel(cwd, r.path), r.origin, r.req.Invocation, r.err)
	if unsafeProgram(r.err) {
		return unsafeError{err}
	}
	return err
}

func runDiff(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	context := fs.Int("U", 3, "lines of context in the unified diff")
	units, cwd, err := parseUnits(fs, args)
	if err != nil {
		return err
	}
	differ := 0
	for _, u := range units {
		r := regenerate(u)
		if r.err != nil {
			return regenerationError(r, cwd)
		}
		if !r.differs() {
			continue
		}
		differ++
		name := filepath.ToSlash(rel(cwd, r.path))
		old := "a/" + name
		if r.missing {
			old = "/dev/null"
		}
		fmt.Fprint(stdout, unifiedDiff(r.have, r.want, old, "b/"+name, fmt.Sprintf("regenerated by `%s` (%s)", r.req.Invocation, r.origin), *context))
	}
	if differ > 0 {
		return unsafeError{fmt.Errorf("%d of %d generated files differ from what ppgen generates; run go generate", differ, len(units))}
	}
	return nil
}

func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "print a line for every generated file that is up to date")
	units, cwd, err := parseUnits(fs, args)
	if err != nil {
		return err
	}
	bad := 0
	for _, u := range units {
		r := regenerate(u)
		name := rel(cwd, r.path)
		if r.err != nil {
			err := regenerationError(r, cwd)
			if !errors.As(err, new(unsafeError)) {
				return err
			}
			fmt.Fprintf(stderr, "%s: unsafe: %v\n", name, r.err)
			bad++
			continue
		}
		if r.missing {
			fmt.Fprintf(stderr, "%s: missing: %s (%s) generates it; run go generate\n", name, r.req.Invocation, r.origin)
			bad++
			continue
		}
		problems := 0
		if !bytes.Equal(r.want, r.have) {
			line := firstDifferentLine(r.have, r.want)
			fmt.Fprintf(stderr, "%s:%d: stale or edited: differs from what `%s` (%s) generates; run go generate (`ppgen diff %s` shows the difference)\n",
				name, line, r.req.Invocation, r.origin, name)
			problems++
		}
		// Vet what is on disk: it says why an edit is unsafe.
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, r.path, r.have, parser.ParseComments)
		if err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			problems++
		} else if vet.IsGenerated(f) {
			diags, err := vet.Run(fset, []*ast.File{f})
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			for _, d := range diags {
				fmt.Fprintln(stderr, vet.Format(fset, d, cwd))
			}
			problems += len(diags)
		}
		if problems > 0 {
			bad++
		} else if *verbose {
			fmt.Fprintf(stdout, "ok  %s (%s)\n", name, r.origin)
		}
	}
	if bad > 0 {
		return unsafeError{fmt.Errorf("%d of %d generated files are stale, edited or unsafe", bad, len(units))}
	}
	fmt.Fprintf(stdout, "ppgen check: %d generated files up to date, verified and vetted\n", len(units))
	return nil
}

// firstDifferentLine returns the 1-based line of a where a and b first
// differ.
func firstDifferentLine(a, b []byte) int {
	line := 1
	for i := 0; i < len(a) && i < len(b) && a[i] == b[i]; i++ {
		if a[i] == '\n' {
			line++
		}
	}
	return line
}

// unifiedDiff returns the unified diff of a and b by lines ("" when they are
// equal), with ctx lines of context, labelled oldName and newName.
func unifiedDiff(a, b []byte, oldName, newName, newNote string, ctx int) string {
	x, y := splitLines(a), splitLines(b)
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
