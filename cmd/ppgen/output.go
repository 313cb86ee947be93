package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Every command that writes a file (-o of gen, import, export, trace,
// report and template; sim -svg) writes it with writeFileAtomic.

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
// directly: it cannot be read back or replaced.
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
	dir := filepath.Dir(path)
	if err := outputDir(dir); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
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
