package gencmd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/ppgen/ppgen/gen/emit"
)

// This file finds what diff, check and vet look at: the packages of a
// command line, the generated files in them, the requests that regenerate
// each (a //go:generate line, or the file's header), and the regenerated
// bytes.

// Package is one package (or the files named on the command line) and the
// files in it that ppgen generated or generates.
type Package struct {
	Name      string // import path, or the file names
	Dir       string
	PkgName   string   // the package clause's name
	Files     []string // every Go file go generate scans (absolute)
	Generated []string // the files that carry the ppgen header
}

// LoadPackages resolves the arguments of diff, check and vet: files (.go or
// any existing file, such as a golden) stand for themselves (one Package,
// each file a generated one), the rest are package patterns (loadPatterns).
func LoadPackages(args []string) ([]Package, error) {
	var files, patterns []string
	for _, a := range args {
		if fi, err := os.Stat(a); strings.HasSuffix(a, ".go") || (err == nil && fi.Mode().IsRegular()) {
			files = append(files, a)
		} else {
			patterns = append(patterns, a)
		}
	}
	var out []Package
	if len(files) > 0 {
		t := Package{Name: strings.Join(files, " ")}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				return nil, usagef("%v", err)
			}
			if _, ok := emit.Recorded(src); !ok {
				return nil, usagef("%s is not a ppgen-generated file (its first line is not %q)", f, emit.Header)
			}
			t.Generated = append(t.Generated, f)
		}
		out = append(out, t)
	}
	if len(patterns) == 0 {
		return out, nil
	}
	pkgs, err := loadPatterns(patterns)
	if err != nil {
		return nil, err
	}
	return append(out, pkgs...), nil
}

// loadPatterns loads the packages of patterns with their test files
// (golang.org/x/tools/go/packages, which runs the go command): one Package
// per package, holding every Go file go generate scans (the package's own,
// cgo, test and external test files) and the generated files among its own
// and its ignored files, in import-path order.
func loadPatterns(patterns []string) ([]Package, error) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles, Tests: true}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", strings.Join(patterns, " "), err)
	}
	byPath := map[string]*Package{}
	seen := map[string]bool{}
	var paths []string
	for _, p := range pkgs {
		if strings.HasSuffix(p.ID, ".test") {
			continue // the test main the go command writes
		}
		path := p.PkgPath
		if strings.HasSuffix(p.Name, "_test") {
			path = strings.TrimSuffix(path, "_test") // the external test package
		}
		t := byPath[path]
		if t == nil {
			t = &Package{Name: path}
			byPath[path] = t
			paths = append(paths, path)
		}
		if !strings.HasSuffix(p.Name, "_test") {
			t.Dir, t.PkgName = p.Dir, p.Name
		}
		if p.ID == p.PkgPath { // the package itself, not its test variant
			for _, e := range p.Errors {
				if e.Kind == packages.ListError {
					return nil, fmt.Errorf("%s: %s", p.PkgPath, e.Msg)
				}
			}
			for _, f := range append(append([]string(nil), p.GoFiles...), p.IgnoredFiles...) {
				if strings.HasSuffix(f, ".go") && IsGenerated(f) {
					t.Generated = append(t.Generated, f)
				}
			}
		}
		for _, f := range p.GoFiles {
			if !seen[f] {
				seen[f] = true
				t.Files = append(t.Files, f)
			}
		}
	}
	if len(paths) == 0 {
		return nil, usagef("%s matched no packages", strings.Join(patterns, " "))
	}
	sort.Strings(paths)
	out := make([]Package, len(paths))
	for i, path := range paths {
		out[i] = *byPath[path]
	}
	return out, nil
}

// IsGenerated reports whether the file starts with the ppgen header.
func IsGenerated(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, len(emit.Header)+1)
	n, _ := io.ReadFull(f, buf)
	_, ok := emit.Recorded(buf[:n])
	return ok
}

// Unit is one generated file and the request (`ppgen gen` or `ppgen
// import`) that makes it.
type Unit struct {
	Path    string   // the output file
	Request *Request // regenerates it
	Origin  string   // where the request comes from: "dir/doc.go:7" or "the header of dir/x_gen.go"
}

// LoadUnits resolves the arguments of diff and check: a .go file is a
// generated file regenerated from the invocation its header records; a
// package pattern stands for every ppgen //go:generate directive of the
// matching packages, plus every generated file in them that no directive
// writes (regenerated from its header: `ppgen gen`, or a `ppgen import`
// whose file the header names relative to the generated file).
func LoadUnits(args []string, cwd string) ([]Unit, error) {
	targets, err := LoadPackages(args)
	if err != nil {
		return nil, err
	}
	var units []Unit
	seen := map[string]bool{}
	add := func(u Unit) {
		key, err := filepath.Abs(u.Path)
		if err != nil {
			key = u.Path
		}
		if !seen[key] {
			seen[key] = true
			units = append(units, u)
		}
	}
	for _, t := range targets {
		for _, file := range t.Files {
			reqs, err := Directives(file, t.PkgName)
			if err != nil {
				return nil, err
			}
			for _, r := range reqs {
				if p := r.Request.Path(); p != "-" {
					add(Unit{Path: p, Request: r.Request, Origin: RelPath(cwd, file) + ":" + strconv.Itoa(r.Line)})
				}
			}
		}
		for _, file := range t.Generated {
			if abs, err := filepath.Abs(file); err == nil && seen[abs] {
				continue
			}
			src, err := os.ReadFile(file)
			if err != nil {
				return nil, err
			}
			req, err := FromHeader(file, src)
			if err != nil {
				return nil, usagef("%s; regenerate it with a //go:generate line or rerun ppgen gen or ppgen import", err)
			}
			add(Unit{Path: file, Request: req, Origin: "the header of " + RelPath(cwd, file)})
		}
	}
	if len(units) == 0 {
		return nil, usagef("no ppgen-generated files or ppgen //go:generate directives in %s", strings.Join(args, " "))
	}
	return units, nil
}

// Directive is one `ppgen gen` //go:generate line.
type Directive struct {
	Line    int
	Request *Request
}

// Directives returns the ppgen gen //go:generate lines of a Go file, parsed
// as go generate would run them ($GOFILE, $GOPACKAGE, ... expanded, the
// package directory as working directory).
func Directives(file, pkgName string) ([]Directive, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []Directive
	for i, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "//go:generate")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		words, err := emit.SplitArgs(rest)
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
		req, err := Parse(args, Env{Dir: filepath.Dir(file), File: filepath.Base(file), Package: pkgName})
		if err != nil {
			return nil, usagef("%s:%d: %v", file, i+1, err)
		}
		out = append(out, Directive{Line: i + 1, Request: req})
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

// Regenerated is a unit regenerated in memory and compared with the disk.
type Regenerated struct {
	Unit
	Want    []byte // what ppgen generates
	Have    []byte // what is on disk (nil when missing)
	Missing bool
	Err     error // regeneration failed
}

// Differs reports whether the file on disk is missing or differs from what
// ppgen generates (false when regeneration failed: see Err).
func (r Regenerated) Differs() bool {
	return r.Err == nil && (r.Missing || !bytes.Equal(r.Want, r.Have))
}

// Regenerate generates u's file in memory and reads the one on disk.
func (u Unit) Regenerate() Regenerated {
	r := Regenerated{Unit: u}
	r.Want, _, r.Err = u.Request.Generate()
	if r.Err != nil {
		return r
	}
	have, err := os.ReadFile(u.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.Missing = true
	case err != nil:
		r.Err = err
	default:
		r.Have = have
	}
	return r
}

// RelPath returns path relative to dir when that is shorter, as go vet
// prints file names.
func RelPath(dir, path string) string {
	if r, err := filepath.Rel(dir, path); err == nil && len(r) < len(path) {
		return r
	}
	return path
}
