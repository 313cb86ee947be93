package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/vet"
)

// runVet applies the gen/vet analyzer to the generated files of the
// packages (or the .go files) named on the command line.
func runVet(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vet", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "list every generated file checked")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	targets, err := loadTargets(fs.Args())
	if err != nil {
		return err
	}
	cwd, _ := os.Getwd()
	files, problems := 0, 0
	for _, t := range targets {
		fset := token.NewFileSet()
		var parsed []*ast.File
		for _, path := range t.generated {
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return fmt.Errorf("parsing %s: %w", rel(cwd, path), err)
			}
			parsed = append(parsed, f)
		}
		diags, err := vet.Run(fset, parsed)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		for _, d := range diags {
			fmt.Fprintln(stderr, vet.Format(fset, d, cwd))
		}
		if *verbose {
			for _, path := range t.generated {
				fmt.Fprintf(stdout, "vetted %s\n", rel(cwd, path))
			}
		}
		files += len(t.generated)
		problems += len(diags)
	}
	if problems > 0 {
		return unsafeError{fmt.Errorf("%d problem(s) in %d generated file(s)", problems, files)}
	}
	if files == 0 {
		// Nothing checked is not a pass (check and diff agree): a CI line
		// with a mistyped pattern must fail.
		return usagef("no ppgen-generated files in %s: nothing to vet (name the packages or files that hold generated schedules)", strings.Join(fs.Args(), " "))
	}
	return nil
}

// parseArgs parses flags followed by package patterns or files (at least
// one).
func parseArgs(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() == 0 {
		return usagef("name packages (./...) or generated .go files; see `ppgen %s -h`", fs.Name())
	}
	return nil
}

// target is one package (or the files named on the command line) and the
// files in it that ppgen generated or generates.
type target struct {
	name      string // import path, or the file names
	dir       string
	pkgName   string
	files     []string // every Go file go generate scans (absolute)
	generated []string // the files that carry the ppgen header (absolute)
}

// loadTargets resolves the arguments: files (.go or any existing file, such
// as a golden) stand for themselves, the rest are package patterns
// (loadPackages).
func loadTargets(args []string) ([]target, error) {
	var files, patterns []string
	for _, a := range args {
		if fi, err := os.Stat(a); strings.HasSuffix(a, ".go") || (err == nil && fi.Mode().IsRegular()) {
			files = append(files, a)
		} else {
			patterns = append(patterns, a)
		}
	}
	var out []target
	if len(files) > 0 {
		t := target{name: strings.Join(files, " ")}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				return nil, usagef("%v", err)
			}
			if _, ok := gencmd.Recorded(src); !ok {
				return nil, usagef("%s is not a ppgen-generated file (its first line is not %q)", f, gencmd.Header)
			}
			t.generated = append(t.generated, f)
		}
		out = append(out, t)
	}
	if len(patterns) == 0 {
		return out, nil
	}
	pkgs, err := loadPackages(patterns)
	if err != nil {
		return nil, err
	}
	return append(out, pkgs...), nil
}

// loadPackages loads the packages of patterns with their test files
// (golang.org/x/tools/go/packages, which runs the go command): one target
// per package, holding every Go file go generate scans (the package's own,
// cgo, test and external test files) and the generated files among its own
// and its ignored files. Targets are in import-path order.
func loadPackages(patterns []string) ([]target, error) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles, Tests: true}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", strings.Join(patterns, " "), err)
	}
	byPath := map[string]*target{}
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
			t = &target{name: path}
			byPath[path] = t
			paths = append(paths, path)
		}
		if !strings.HasSuffix(p.Name, "_test") {
			t.dir, t.pkgName = p.Dir, p.Name
		}
		if p.ID == p.PkgPath { // the package itself, not its test variant
			for _, e := range p.Errors {
				if e.Kind == packages.ListError {
					return nil, fmt.Errorf("%s: %s", p.PkgPath, e.Msg)
				}
			}
			for _, f := range append(append([]string(nil), p.GoFiles...), p.IgnoredFiles...) {
				if strings.HasSuffix(f, ".go") && isGenerated(f) {
					t.generated = append(t.generated, f)
				}
			}
		}
		for _, f := range p.GoFiles {
			if !seen[f] {
				seen[f] = true
				t.files = append(t.files, f)
			}
		}
	}
	if len(paths) == 0 {
		return nil, usagef("%s matched no packages", strings.Join(patterns, " "))
	}
	sort.Strings(paths)
	out := make([]target, len(paths))
	for i, path := range paths {
		out[i] = *byPath[path]
	}
	return out, nil
}

// isGenerated reports whether the file starts with the ppgen header.
func isGenerated(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, len(gencmd.Header)+1)
	n, _ := io.ReadFull(f, buf)
	_, ok := gencmd.Recorded(buf[:n])
	return ok
}

// rel returns path relative to dir when that is shorter, as go vet
// prints file names.
func rel(dir, path string) string {
	if r, err := filepath.Rel(dir, path); err == nil && len(r) < len(path) {
		return r
	}
	return path
}
