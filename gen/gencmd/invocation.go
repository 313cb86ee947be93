package gencmd

import (
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/torch"
)

// This file reads a command line into a Request (Parse, ParseImport, or
// FromHeader for the invocation a generated file records under gen/emit's
// Header) and records the invocation a generated file carries (record:
// emit.Invocation with the input files seen from the output's directory).

// Env is what `go generate` tells a generator: the directory it runs in
// (paths in the command line are relative to it; "" is the current
// directory), $GOFILE and $GOPACKAGE.
type Env struct {
	Dir     string
	File    string // $GOFILE: names the default output
	Package string // $GOPACKAGE: the default package name
}

// EnvFromOS is the environment of the running process.
func EnvFromOS() Env {
	return Env{File: os.Getenv("GOFILE"), Package: os.Getenv("GOPACKAGE")}
}

// GenFlags returns the flag set of `ppgen gen`, bound to r.
func GenFlags(r *Request) *flag.FlagSet {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	r.Bind(fs, Flags{In: true, Output: true})
	return fs
}

// ImportFlags returns the flag set of `ppgen import`, bound to r.
func ImportFlags(r *Request) *flag.FlagSet {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	r.Bind(fs, Flags{Import: true})
	return fs
}

// Parse parses the arguments of `ppgen gen` (what follows "gen") in env.
// The invocation it records names -in and -model relative to the directory
// of -o, so that the header of the output regenerates it wherever it is
// read from. "-h" gives an error wrapping flag.ErrHelp; other errors are
// *UsageError.
func Parse(args []string, env Env) (*Request, error) {
	r := &Request{Command: "gen", Env: env}
	fs := GenFlags(r)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &UsageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q (flags go before arguments; see `ppgen gen -h`)", fs.Arg(0))
	}
	r.Invocation = r.record("gen", fs)
	return r, nil
}

// ParseImport parses the arguments of `ppgen import` in env: flags before
// and after the one file ("-from torch-csv FILE -o out.go"). The invocation
// it records names the file relative to the directory of -o, so that the
// header of the output regenerates it wherever it is read from. "-h" gives
// an error wrapping flag.ErrHelp; other errors are *UsageError.
func ParseImport(args []string, env Env) (*Request, error) {
	r := &Request{Command: "import", Env: env}
	fs := ImportFlags(r)
	fs.SetOutput(io.Discard)
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &UsageError{err.Error()}
		}
		if args = fs.Args(); len(args) == 0 {
			break
		}
		files, args = append(files, args[0]), args[1:]
	}
	if len(files) != 1 {
		return nil, usagef("want one CSV file (or - for stdin) after the flags; got %d", len(files))
	}
	if _, err := ParseDialect("from", r.From); err != nil {
		return nil, err
	}
	r.File = files[0]
	r.Invocation = r.record("import", fs) + " " + emit.QuoteArg(r.fromOutput(r.File))
	return r, nil
}

// ParseDialect reads the value of a dialect flag (-from, -to). Its errors
// are *UsageError.
func ParseDialect(flagName, value string) (torch.Dialect, error) {
	if value == "" {
		return 0, usagef("missing -%s (torch-csv, or torch-csv-legacy for PyTorch 2.4 to 2.6 names)", flagName)
	}
	d, err := torch.ParseDialect(value)
	if err != nil {
		return 0, usagef("-%s %v", flagName, err)
	}
	return d, nil
}

// inputFlags are the flags of a request that name a file it reads (Name
// without the dash): the header of a generated file records them as seen
// from the file (record), and a command that writes files refuses to
// replace them (Inputs).
func (r *Request) inputFlags() []Input {
	return []Input{{"in", r.In}, {"model", r.Model}}
}

// An Input is a file a request reads and what names it: a flag ("-in",
// "-model") or, for an import, "the CSV file".
type Input struct {
	Name string
	Path string
}

// Inputs returns the files the request reads (-in, -model, an import's
// file), their paths joined to Env.Dir; standard input ("-") and unset
// flags are left out.
func (r *Request) Inputs() []Input {
	var out []Input
	add := func(name, path string) {
		if path != "" && path != "-" {
			out = append(out, Input{name, resolve(r.Env.Dir, path)})
		}
	}
	for _, f := range r.inputFlags() {
		add("-"+f.Name, f.Path)
	}
	if r.Command == "import" {
		add("the CSV file", r.File)
	}
	return out
}

// record renders the invocation a generated file records (Invocation),
// with the paths of inputFlags seen from the output's directory
// (fromOutput).
func (r *Request) record(cmd string, fs *flag.FlagSet) string {
	return emit.Invocation(cmd, fs, func(name, v string) string {
		for _, f := range r.inputFlags() {
			if name == f.Name {
				return r.fromOutput(v)
			}
		}
		return v
	})
}

// fromOutput returns path, a file named relative to Env.Dir, as the header
// of the output records it: relative to the output's directory, where go
// generate, check and diff run the recorded command line (FromHeader). An
// absolute path, standard input ("-") and a path of a request without an
// output file (-o not set, which writes into Env.Dir, or -o -) stay as
// given.
func (r *Request) fromOutput(path string) string {
	if r.Out == "" || r.Out == "-" || path == "" || path == "-" || filepath.IsAbs(path) {
		return path
	}
	a, err1 := filepath.Abs(resolve(r.Env.Dir, path))
	b, err2 := filepath.Abs(filepath.Dir(resolve(r.Env.Dir, r.Out)))
	if err1 != nil || err2 != nil {
		return path
	}
	rel, err := filepath.Rel(b, a)
	if err != nil {
		return a // another volume: only the absolute path names it from there
	}
	return filepath.ToSlash(rel)
}

// FromHeader parses the invocation a generated file records into a
// request that regenerates it: the output is path itself, the directory of
// path is the working directory, and the file's package clause stands in for
// $GOPACKAGE.
func FromHeader(path string, src []byte) (*Request, error) {
	inv, ok := emit.Recorded(src)
	if !ok {
		return nil, fmt.Errorf("%s: not a ppgen-generated file (its first line is not %q)", path, emit.Header)
	}
	words, err := emit.SplitArgs(inv)
	if err != nil {
		return nil, fmt.Errorf("%s: recorded invocation: %v", path, err)
	}
	parse := Parse
	switch {
	case len(words) >= 2 && words[0] == "ppgen" && words[1] == "gen":
	case len(words) >= 2 && words[0] == "ppgen" && words[1] == "import":
		parse = ParseImport
	case inv == "":
		return nil, fmt.Errorf("%s: the header records no invocation to regenerate from", path)
	default:
		return nil, fmt.Errorf("%s: the header records %q, not a `ppgen gen` or `ppgen import` command line", path, inv)
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.PackageClauseOnly)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	r, err := parse(words[2:], Env{Dir: filepath.Dir(path), File: filepath.Base(path), Package: f.Name.Name})
	if err != nil {
		return nil, fmt.Errorf("%s: recorded invocation %q: %w", path, inv, err)
	}
	if r.Command == "import" && r.File == "-" {
		return nil, fmt.Errorf("%s: the header records %q, an import from standard input: nothing to regenerate it from; import the file again with ppgen import FILE -o %s", path, inv, filepath.Base(path))
	}
	r.Out = filepath.Base(path)
	return r, nil
}
