package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// runVersion prints the module's build information: what `go version -m`
// would say about this binary, in one line.
func runVersion(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("this binary carries no build information (it was not built by the go command with module support)")
	}
	_, err := fmt.Fprintln(stdout, versionLine(bi))
	return err
}

// versionLine renders build information as
//
//	ppgen github.com/ppgen/ppgen v1.2.3 (revision 0123abcd..., modified) go1.26.0
//
// The version is the module's ("(devel)" for a build in its own checkout);
// the revision and "modified" appear when the build recorded them
// (vcs.revision, vcs.modified: go build -buildvcs in a git checkout).
func versionLine(bi *debug.BuildInfo) string {
	path, version := bi.Main.Path, bi.Main.Version
	if path == "" {
		path = bi.Path
	}
	if version == "" {
		version = "(devel)"
	}
	var vcs []string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			vcs = append([]string{"revision " + s.Value}, vcs...)
		case s.Key == "vcs.modified" && s.Value == "true":
			vcs = append(vcs, "modified")
		}
	}
	line := fmt.Sprintf("ppgen %s %s", path, version)
	if len(vcs) > 0 {
		line += " (" + strings.Join(vcs, ", ") + ")"
	}
	return line + " " + bi.GoVersion
}
