package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// The -update flag rewrites golden files. Other test files of this package
// may define it too (as a package-level flag.Bool, which runs before init
// functions), so it is registered here only when it is not yet.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files")
	}
}

func cliUpdate() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// cliRun runs one ppgen invocation in process and returns its exit status,
// stdout and stderr.
func cliRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// cliMust runs ppgen and fails the test unless it exits 0.
func cliMust(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := cliRun(t, args...)
	if code != 0 {
		t.Fatalf("ppgen %v: exit %d\n%s", args, code, errs)
	}
	return out
}

// cliGolden compares got with the file at path (relative to this package),
// rewriting it under -update.
func cliGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if cliUpdate() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/ppgen -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (rerun with -update after checking the change):\n--- got\n%s\n--- want\n%s", path, cliClip(got), cliClip(want))
	}
}

func cliClip(b []byte) string {
	if len(b) > 3000 {
		return string(b[:3000]) + "\n[...]"
	}
	return string(b)
}

// cliNoFile fails the test when path exists: a failed command must write nothing.
func cliNoFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Errorf("%s was written although the command failed", path)
	}
}

// notDir returns a path under dir that is a regular file, so that writing
// below it fails.
func notDir(t *testing.T, dir string) string {
	t.Helper()
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}
