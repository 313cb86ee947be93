package gencmd

import (
	"bufio"
	"fmt"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/torch"
)

// This file is what `ppgen gen` and `ppgen import` make of a Request in
// memory: the program read from -in (ReadProgram), the output's path and
// package, and the Go source (Generate, Import).

// ReadProgram reads a schedule file ("-" for stdin) in the CSV (PyTorch)
// form or the text form, told apart by content, then by a .csv suffix
// (ir.IsCSV on its first MiB). The file is parsed as it is read, within gen/ir's
// limits (ir.ReadText), so a file of any size is refused early. Its errors
// are *UsageError.
func ReadProgram(path string) (ir.Program, error) {
	var f io.Reader = os.Stdin
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return ir.Program{}, usagef("reading -in: %v", err)
		}
		defer file.Close()
		if fi, err := file.Stat(); err == nil && fi.IsDir() {
			return ir.Program{}, usagef("reading -in: %s is a directory; name a schedule file", path)
		}
		f = file
	}
	br := bufio.NewReaderSize(f, 1<<20)
	head, err := br.Peek(1 << 20)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return ir.Program{}, usagef("reading -in: %v", err)
	}
	var p ir.Program
	if ir.IsCSV(path, head) {
		p, err = ir.ParseCSV(br)
	} else {
		p, err = ir.ReadText(br)
	}
	if err != nil {
		return ir.Program{}, usagef("%s: %v", path, err)
	}
	return p, nil
}

// Path returns the output file: -o (relative to Env.Dir), else $GOFILE's name
// with _gen.go, else schedule_gen.go; "-" is standard output.
func (r *Request) Path() string {
	path := r.Out
	if path == "" {
		path = "schedule_gen.go"
		if r.Env.File != "" {
			path = strings.TrimSuffix(r.Env.File, ".go") + "_gen.go"
		}
	}
	return resolve(r.Env.Dir, path)
}

// PackageName returns -package, else $GOPACKAGE, else the output
// directory's name without '-' and '.'.
func (r *Request) PackageName() (string, error) {
	if r.Package != "" {
		return r.Package, nil
	}
	if r.Env.Package != "" {
		return r.Env.Package, nil
	}
	path := r.Path()
	if path == "-" {
		path = resolve(r.Env.Dir, "x")
	}
	abs, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return "", err
	}
	name := strings.NewReplacer("-", "", ".", "").Replace(filepath.Base(abs))
	if !token.IsIdentifier(name) {
		return "", fmt.Errorf("cannot name the package after the directory of %s (%q is not a Go identifier); set -package", path, name)
	}
	return name, nil
}

// Generate lowers (or imports), verifies and emits the request's schedule
// in memory. It writes nothing.
func (r *Request) Generate() ([]byte, auto.Result, error) {
	if r.Command == "import" {
		im, src, err := r.Import()
		return src, auto.Result{Result: im.Result}, err
	}
	name, err := r.PackageName()
	if err != nil {
		return nil, auto.Result{}, err
	}
	if err := r.checkPrefix(); err != nil {
		return nil, auto.Result{}, err
	}
	res, err := r.Lower()
	if err != nil {
		return nil, res, err
	}
	schedule := r.Schedule
	switch {
	case schedule == "":
		schedule = "imported"
	case res.Candidates != nil:
		schedule = res.Config.Schedule // what auto chose
	}
	src, err := gen.Emit(res.Result, emit.Options{
		Package:    name,
		Invocation: r.Invocation,
		Schedule:   schedule,
		HelperSize: r.Helper,
		Table:      r.Table,
		NoFuse:     !r.Fuse,
		Layers:     r.specLayers(res.Result),
		Prefix:     r.Prefix,
	})
	return src, res, err
}

// StageLayers is res.Layers as Spec.Layers: each stage's range of the
// model's layers (first, end), the split repeated for every model copy;
// nil without a model.
func StageLayers(res gen.Result) [][2]int {
	if res.Layers == nil {
		return nil
	}
	var out [][2]int
	for range max(res.Program.Copies, 1) {
		for s := 1; s < len(res.Layers); s++ {
			out = append(out, [2]int{res.Layers[s-1], res.Layers[s]})
		}
	}
	return out
}

// specLayers is StageLayers in the -model file's numbering: with
// -mpipe-pre T the stages hold layers T onward (the first T are the
// preprocess, a trainer's tower), so their bounds move up by T.
func (r *Request) specLayers(res gen.Result) [][2]int {
	out := StageLayers(res)
	for i := range out {
		out[i][0] += r.preLayers
		out[i][1] += r.preLayers
	}
	return out
}

// Import reads the file of an import request (relative to Env.Dir; "-" is
// standard input) in its -from dialect, verifies and lowers it
// (torch.Import), and with -o emits its Go source.
func (r *Request) Import() (torch.Imported, []byte, error) {
	d, err := ParseDialect("from", r.From)
	if err != nil {
		return torch.Imported{}, nil, err
	}
	var in io.Reader = os.Stdin
	if r.File != "-" {
		f, err := os.Open(resolve(r.Env.Dir, r.File))
		if err != nil {
			return torch.Imported{}, nil, &UsageError{err.Error()}
		}
		defer f.Close()
		in = f
	}
	opt, err := r.LowerOptions()
	if err != nil {
		return torch.Imported{}, nil, err
	}
	if err := r.checkPrefix(); err != nil {
		return torch.Imported{}, nil, err
	}
	im, err := torch.Import(r.File, in, torch.ImportOptions{Dialect: d, Lower: opt.Options, DropFSDP: r.DropFSDP})
	if err != nil || r.Out == "" {
		return im, nil, err
	}
	schedule := r.Name
	if schedule == "" {
		schedule = strings.TrimSuffix(filepath.Base(r.File), filepath.Ext(r.File))
		if r.File == "-" {
			schedule = "imported"
		}
	}
	pkg, err := r.PackageName()
	if err != nil {
		return im, nil, err
	}
	src, err := gen.Emit(im.Result, emit.Options{
		Package:    pkg,
		Invocation: r.Invocation,
		Schedule:   schedule,
		HelperSize: r.Helper,
		Table:      r.Table,
		NoFuse:     !r.Fuse,
		Prefix:     r.Prefix,
	})
	return im, src, err
}

// checkPrefix refuses a -name that does not start an exported identifier;
// under import, where -name once named the schedule, it points to
// -schedule-name.
func (r *Request) checkPrefix() error {
	err := emit.CheckPrefix(r.Prefix)
	switch {
	case err == nil:
		return nil
	case r.Command == "import":
		return usagef("-name %s; the schedule's name in the Spec is -schedule-name", err)
	}
	return usagef("-name %s", err)
}
