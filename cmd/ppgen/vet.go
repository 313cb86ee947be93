package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ppgen/ppgen/gen/gencmd"
)

// runVet applies the gen/vet analyzer to the generated files of the
// packages (or the .go files) named on the command line.
func runVet(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vet", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "list every generated file checked")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	targets, err := gencmd.LoadPackages(fs.Args())
	if err != nil {
		return err
	}
	cwd, _ := os.Getwd()
	files, problems := 0, 0
	for _, t := range targets {
		n, err := vetFiles(stderr, cwd, t.Generated, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		if *verbose {
			for _, path := range t.Generated {
				fmt.Fprintf(stdout, "vetted %s\n", rel(cwd, path))
			}
		}
		files += len(t.Generated)
		problems += n
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
	// The flags end at the first argument; a flag after it would be read
	// as a package pattern ("malformed import path"). After an explicit
	// "--", every word is an argument.
	if n := len(args) - fs.NArg(); n == 0 || args[n-1] != "--" {
		for _, a := range fs.Args()[1:] {
			if len(a) > 1 && a[0] == '-' {
				return usagef("flag %s after the argument %q: flags go before arguments; see `ppgen %s -h`", a, fs.Arg(0), fs.Name())
			}
		}
	}
	return nil
}

// rel returns path relative to dir when that is shorter, as go vet
// prints file names.
func rel(dir, path string) string { return gencmd.RelPath(dir, path) }
