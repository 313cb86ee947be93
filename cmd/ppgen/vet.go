package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ppgen/ppgen/gen/vet"
	"github.com/ppgen/ppgen/internal/gencmd"
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

// goPackage is what `go list -json` says about a package.
type goPackage struct {
	Dir, ImportPath, Name                        string
	GoFiles, CgoFiles, TestGoFiles, XTestGoFiles []string
	IgnoredGoFiles                               []string
	Error                                        *struct{ Err string }
}

// loadTargets resolves the arguments: files (.go or any existing file, such
// as a golden) stand for themselves, the rest are package patterns for
// `go list`.
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
	pkgs, err := goList(patterns)
	if err != nil {
		return nil, err
	}
	for _, p := range pkgs {
		if p.Error != nil {
			return nil, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		t := target{name: p.ImportPath, dir: p.Dir, pkgName: p.Name}
		for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.TestGoFiles, p.XTestGoFiles} {
			for _, f := range list {
				t.files = append(t.files, filepath.Join(p.Dir, f))
			}
		}
		for _, f := range append(append([]string(nil), p.GoFiles...), p.IgnoredGoFiles...) {
			path := filepath.Join(p.Dir, f)
			if isGenerated(path) {
				t.generated = append(t.generated, path)
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// goList runs `go list -e -json` over patterns.
func goList(patterns []string) ([]goPackage, error) {
	args := append([]string{"list", "-e", "-json=Dir,ImportPath,Name,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,IgnoredGoFiles,Error", "--"}, patterns...)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %v: %s", strings.Join(patterns, " "), err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		return nil, usagef("%s matched no packages", strings.Join(patterns, " "))
	}
	return pkgs, nil
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
