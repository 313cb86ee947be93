package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ppgen/ppgen/gen/gencmd"
)

// Every command that writes a file (-o of gen, import, export, trace,
// report, template and tune; sim -svg) writes it with writeFileAtomic, after
// checkOutputs has refused any output that is one of its inputs and
// checkFormat one whose extension contradicts what is written (checkOutput:
// both, for one output), before any work.

// A namedFile is a file a command reads or writes and what names it in
// messages: a flag ("-o", "-in") or an argument ("the CSV file").
type namedFile = gencmd.Input

// checkOutputs refuses (a usage error, before anything is written) an output
// that is the same file as an input: writing it would replace what the
// command reads (ppgen gen -in g.txt -o g.txt). Standard input and output
// ("-", "") are never the same file; an output that exists and is not a
// regular file (/dev/stdout, a pipe) is written in place and replaces
// nothing.
func checkOutputs(inputs []namedFile, outputs ...namedFile) error {
	for _, out := range outputs {
		if out.Path == "" || out.Path == "-" {
			continue
		}
		if fi, err := os.Stat(out.Path); err == nil && !fi.Mode().IsRegular() {
			continue
		}
		for _, in := range inputs {
			if in.Path == "" || in.Path == "-" || !sameFile(out.Path, in.Path) {
				continue
			}
			return usagef("%s %s is the same file as %s %s: writing it would replace the input; write the output to another file", out.Name, out.Path, in.Name, in.Path)
		}
	}
	return nil
}

// checkOutput is checkOutputs and checkFormat of a command's one output:
// out, of format f, may not be one of inputs.
func checkOutput(inputs []namedFile, out namedFile, f outputFormat) error {
	if err := checkOutputs(inputs, out); err != nil {
		return err
	}
	return checkFormat(out, f)
}

// An outputFormat is what a command writes to a file, and the extensions a
// file of it may have (the first is the one to suggest).
type outputFormat struct {
	name string   // "an SVG image"
	exts []string // ".svg"
}

var (
	formatSVG         = outputFormat{"an SVG image", []string{".svg"}}
	formatChromeTrace = outputFormat{"a Chrome trace (JSON)", []string{".json"}}
	formatCSV         = outputFormat{"PyTorch's CSV", []string{".csv"}}
	formatHTML        = outputFormat{"an HTML page", []string{".html", ".htm"}}
	formatGo          = outputFormat{"Go source", []string{".go"}}
	formatModel       = outputFormat{"a model description (JSON)", []string{".json"}}
	formatYAML        = outputFormat{"a Kubernetes Job (YAML)", []string{".yaml", ".yml"}}
	formatSlurm       = outputFormat{"a SLURM batch script", []string{".sh", ".sbatch", ".slurm"}}
)

// checkFormat refuses (a usage error, before any work) an output whose
// extension contradicts what the command writes to it: sim -svg out.png
// would write SVG under a PNG's name. A name without an extension, one of
// the format's extensions (in any case), standard output ("-", "") and an
// output that exists and is not a regular file (/dev/stdout) are accepted.
func checkFormat(out namedFile, f outputFormat) error {
	if out.Path == "" || out.Path == "-" {
		return nil
	}
	if fi, err := os.Stat(out.Path); err == nil && !fi.Mode().IsRegular() {
		return nil
	}
	base := filepath.Base(out.Path)
	ext := filepath.Ext(base)
	if ext == "" || ext == base { // no extension, or a dot file (".trace")
		return nil
	}
	for _, e := range f.exts {
		if strings.EqualFold(ext, e) {
			return nil
		}
	}
	want := strings.Join(f.exts, " or ")
	return usagef("%s %s: ppgen writes %s there, whose extension is %s, not %s; name the file %s (or give it no extension)",
		out.Name, out.Path, f.name, want, ext, strings.TrimSuffix(out.Path, ext)+f.exts[0])
}

// sameFile reports whether paths a and b name one file: os.SameFile when
// both exist (a link, a hard link, another spelling), else their cleaned
// absolute paths are equal.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// writeOutput writes b to stdout when path is "-", else to the file path
// (writeFileAtomic), and then says so on stderr: "ppgen: wrote PATH" and
// detail.
func writeOutput(path string, b []byte, stdout, stderr io.Writer, detail string) error {
	if path == "-" {
		_, err := stdout.Write(b)
		return err
	}
	if err := writeFileAtomic(path, b); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stderr, "ppgen: wrote %s%s\n", path, detail)
	return err
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory and a rename, so a failure never leaves a partial file (nor the
// temporary one). It never creates directories: a missing directory is an
// error that names it, so that a typo in -o does not scatter files. An
// unchanged file is left untouched (its modification time too). A path that
// exists and is not a regular file (/dev/stdout, a named pipe) is written
// directly: it cannot be read back or replaced. A symlink is written
// through to its target (the temporary file and rename are in the
// target's directory), and a file that exists keeps its permission bits
// (a new one gets 0644, less the umask).
func writeFileAtomic(path string, data []byte) error {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return fmt.Errorf("writing %s: it is a directory; name a file", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return nil
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	// A symlink is written through: the new file replaces its target,
	// which keeps its name and the link stays a link. An existing file
	// keeps its permission bits.
	dest, err := linkTarget(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	perm := os.FileMode(0o644)
	if fi, err := os.Stat(dest); err == nil && fi.Mode().IsRegular() {
		perm = fi.Mode().Perm()
	}
	dir := filepath.Dir(dest)
	if err := outputDir(dir); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dest)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), perm)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dest)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// maxLinks is the most symlinks linkTarget follows (Linux's MAXSYMLINKS).
const maxLinks = 40

// linkTarget returns the file path names after following symlinks: path
// itself when it is not a link or does not exist, the target of a link
// (which need not exist yet: writing creates it, as a shell's > does).
func linkTarget(path string) (string, error) {
	for range maxLinks {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return path, nil
		}
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			return resolved, nil
		}
		link, err := os.Readlink(path) // a dangling link: follow it a step
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(path), link)
		}
		path = link
	}
	return "", fmt.Errorf("more than %d levels of symlinks; name the file itself", maxLinks)
}

// outputDir checks that dir, the directory of an output file, exists and is
// a directory.
func outputDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist; create it first", dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}
