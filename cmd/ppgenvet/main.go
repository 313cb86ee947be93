// Command ppgenvet runs the ppgen analyzer (github.com/ppgen/ppgen/gen/vet)
// as a vet tool:
//
//	go build -o ppgenvet github.com/ppgen/ppgen/cmd/ppgenvet
//	go vet -vettool=$PWD/ppgenvet ./...
//
// It reports, in files ppgen generated, sends without a matching receive in
// FIFO order, non-constant step arguments, rank functions that no longer
// hash to their Fingerprint (at the edited line), a Ranks table that misses
// a rank, and programs gen/verify rejects. `ppgen vet ./...` runs the same
// analyzer without go vet.
//
// ppgenvet speaks the protocol of golang.org/x/tools/go/analysis/unitchecker
// (-V=full, -flags, -json, and one JSON .cfg file per package; go vet since
// Go 1.26 always asks for -json and prints the diagnostics itself). It
// implements it
// here because unitchecker needs golang.org/x/sync, which this module does
// not require yet; the analyzer needs no type information, so the package's
// files are parsed but not type-checked. With golang.org/x/sync required,
// main can become unitchecker.Main(vet.Analyzer).
package main

import (
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/tools/go/analysis"

	"github.com/ppgen/ppgen/gen/vet"
)

// config is the part of unitchecker's Config (the .cfg file go vet writes
// for each package) that ppgenvet uses.
type config struct {
	ID         string
	ImportPath string
	GoFiles    []string
	VetxOnly   bool   // run only for facts: the analyzer has none
	VetxOutput string // where to write the facts (an empty file)
	Stdout     string // write standard output here
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ppgenvet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("V", "", "print the version for the go command's build cache (-V=full) and exit")
	flags := fs.Bool("flags", false, "print the tool's flags as JSON for the go command and exit")
	asJSON := fs.Bool("json", false, "write diagnostics as JSON (what go vet reads) instead of text")
	fs.Int("c", -1, "display offending line with this many lines of context (go vet does it)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go vet -vettool=$(which ppgenvet) packages\n\n%s\n", vet.Analyzer.Doc)
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case *version != "":
		if *version != "full" {
			fmt.Fprintf(stderr, "ppgenvet: unsupported flag value -V=%s (use -V=full)\n", *version)
			return 2
		}
		id, err := buildID()
		if err != nil {
			fmt.Fprintf(stderr, "ppgenvet: %v\n", err)
			return 2
		}
		fmt.Fprintf(stdout, "%s version devel comments-go-here buildID=%s\n", os.Args[0], id)
		return 0
	case *flags:
		fmt.Fprintln(stdout, `[{"Name":"json","Bool":true,"Usage":"write diagnostics as JSON"},{"Name":"c","Bool":false,"Usage":"lines of context"}]`)
		return 0
	case fs.NArg() != 1 || filepath.Ext(fs.Arg(0)) != ".cfg":
		fs.Usage()
		return 2
	}
	cfg, err := readConfig(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "ppgenvet: %v\n", err)
		return 2
	}
	if cfg.VetxOutput != "" {
		if err := os.WriteFile(cfg.VetxOutput, nil, 0o666); err != nil {
			fmt.Fprintf(stderr, "ppgenvet: %v\n", err)
			return 2
		}
	}
	if cfg.VetxOnly {
		return 0
	}
	if cfg.Stdout != "" {
		f, err := os.Create(cfg.Stdout)
		if err != nil {
			fmt.Fprintf(stderr, "ppgenvet: %v\n", err)
			return 2
		}
		defer f.Close()
		stdout = f
	}
	fset := token.NewFileSet()
	diags, err := analyze(fset, cfg.GoFiles)
	if *asJSON {
		return writeJSON(stdout, fset, cfg.ID, diags, err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ppgenvet: %s: %v\n", cfg.ImportPath, err)
		return 1
	}
	for _, d := range diags {
		fmt.Fprintln(stderr, vet.Format(fset, d, ""))
	}
	if len(diags) > 0 {
		return 1
	}
	return 0
}

// analyze parses the generated files among files and runs the analyzer.
func analyze(fset *token.FileSet, files []string) ([]analysis.Diagnostic, error) {
	var parsed []*ast.File
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if vet.IsGenerated(f) {
			parsed = append(parsed, f)
		}
	}
	return vet.Run(fset, parsed)
}

// The JSON form unitchecker writes with -json: package ID -> analyzer
// name -> diagnostics or {"error": ...}.
type (
	jsonDiagnostic struct {
		Posn    string        `json:"posn"`
		End     string        `json:"end"`
		Message string        `json:"message"`
		Related []jsonRelated `json:"related,omitempty"`
	}
	jsonRelated struct {
		Posn    string `json:"posn"`
		End     string `json:"end"`
		Message string `json:"message"`
	}
	jsonError struct {
		Err string `json:"error"`
	}
)

func writeJSON(w io.Writer, fset *token.FileSet, id string, diags []analysis.Diagnostic, err error) int {
	var result any = jsonError{Err: fmt.Sprint(err)}
	if err == nil {
		list := []jsonDiagnostic{}
		for _, d := range diags {
			jd := jsonDiagnostic{Posn: posn(fset, d.Pos), End: posn(fset, d.End), Message: d.Message}
			for _, r := range d.Related {
				jd.Related = append(jd.Related, jsonRelated{Posn: posn(fset, r.Pos), End: posn(fset, r.End), Message: r.Message})
			}
			list = append(list, jd)
		}
		if len(list) == 0 {
			return 0 // unitchecker prints nothing for a clean package
		}
		result = list
	}
	tree := map[string]map[string]any{id: {vet.Analyzer.Name: result}}
	data, merr := json.MarshalIndent(tree, "", "\t")
	if merr != nil {
		fmt.Fprintf(os.Stderr, "ppgenvet: %v\n", merr)
		return 2
	}
	w.Write(append(data, '\n'))
	return 0
}

func posn(fset *token.FileSet, pos token.Pos) string {
	if !pos.IsValid() {
		return ""
	}
	return fset.Position(pos).String()
}

func readConfig(path string) (*config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg := new(config)
	if err := json.Unmarshal(data, cfg); err != nil {
		return nil, fmt.Errorf("cannot decode JSON config file %s: %v", path, err)
	}
	return cfg, nil
}

// buildID is a hash of the executable, which the go command uses to key
// its cache of vet results.
func buildID() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return fmt.Sprintf("%02x", h.Sum(nil)), nil
}
