package gencmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/emit"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPPGenGenArgs(t *testing.T) {
	tests := []struct {
		line string
		args string // "" = not a ppgen gen directive
	}{
		{"go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8", "-schedule 1f1b -ranks 4 -micro 8"},
		{"go tool github.com/ppgen/ppgen/cmd/ppgen gen -schedule zbv", "-schedule zbv"},
		{"go run github.com/ppgen/ppgen/cmd/ppgen@v0.3.0 gen -schedule gpipe", "-schedule gpipe"},
		{"go run -mod=mod ../../cmd/ppgen gen -schedule gpipe -o x.go", "-schedule gpipe -o x.go"},
		{"ppgen gen -in \"my schedule.csv\"", "-in|my schedule.csv"},
		{"go tool ppgen trace -schedule 1f1b -o t.json", ""},
		{"stringer -type Kind", ""},
		{"go tool ppgen", ""},
	}
	for _, tt := range tests {
		words, err := emit.SplitArgs(tt.line)
		if err != nil {
			t.Fatal(err)
		}
		args, ok := ppgenGenArgs(words)
		got := strings.Join(args, " ")
		if strings.Contains(tt.args, "|") {
			got = strings.Join(args, "|")
		}
		if (tt.args != "") != ok || got != tt.args {
			t.Errorf("%q: args %q, %v; want %q", tt.line, got, ok, tt.args)
		}
	}
}

// TestDirectives: //go:generate lines are found and expanded as go
// generate does.
func TestDirectives(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "model.go")
	writeFile(t, file, "package model\n\n"+
		"//go:generate go tool ppgen gen -schedule 1f1b -ranks 2 -micro 2\n"+
		"// go:generate go tool ppgen gen -schedule gpipe -ranks 2 -micro 2 (not a directive)\n"+
		"//go:generate go tool ppgen gen -schedule gpipe -ranks 2 -micro 2 -o ${GOPACKAGE}_gpipe.go\n"+
		"//go:generate stringer -type Kind\n")
	ds, err := Directives(file, "model")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 {
		t.Fatalf("found %d directives, want 2", len(ds))
	}
	if ds[0].Line != 3 || ds[0].Request.Path() != filepath.Join(dir, "model_gen.go") {
		t.Errorf("first: line %d path %s", ds[0].Line, ds[0].Request.Path())
	}
	if ds[1].Line != 5 || ds[1].Request.Path() != filepath.Join(dir, "model_gpipe.go") {
		t.Errorf("second: line %d path %s", ds[1].Line, ds[1].Request.Path())
	}
	if n, _ := ds[0].Request.PackageName(); n != "model" {
		t.Errorf("package %q, want model ($GOPACKAGE)", n)
	}
}
