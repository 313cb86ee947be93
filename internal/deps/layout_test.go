package deps_test

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// layoutDoc is the document whose Layout section names every package.
const layoutDoc = "docs/internals.md"

// layoutEntries returns the first field of every line of the code block in
// the "## Layout" section of doc: the packages it names, relative to the
// module. Lines that start with a blank continue the line before.
func layoutEntries(doc string) ([]string, error) {
	_, section, ok := strings.Cut(doc, "\n## Layout\n")
	if !ok {
		return nil, fmt.Errorf("no \"## Layout\" section")
	}
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	_, block, ok := strings.Cut(section, "\n```\n")
	if !ok {
		return nil, fmt.Errorf("the Layout section has no code block")
	}
	block, _, ok = strings.Cut(block, "\n```")
	if !ok {
		return nil, fmt.Errorf("the Layout section's code block is not closed")
	}
	var entries []string
	for line := range strings.SplitSeq(block, "\n") {
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		entries = append(entries, strings.Fields(line)[0])
	}
	return entries, nil
}

// layoutMismatches compares the Layout's entries with the module's packages
// (paths relative to the module): every package is named, by its path or by
// an entry "dir/*" that stands for the packages under dir; every entry names
// a package, or for "dir/*" at least one; no entry comes twice.
func layoutMismatches(entries, pkgs []string) []string {
	var out []string
	named := map[string]bool{}
	for _, e := range entries {
		if named[e] {
			out = append(out, fmt.Sprintf("the Layout names %s twice", e))
		}
		named[e] = true
	}
	covered := map[string]bool{}
	for _, p := range pkgs {
		if named[p] {
			covered[p] = true
			continue
		}
		wild := false
		for dir := p; strings.Contains(dir, "/"); {
			dir = dir[:strings.LastIndex(dir, "/")]
			if named[dir+"/*"] {
				covered[dir+"/*"], wild = true, true
				break
			}
		}
		if !wild {
			out = append(out, fmt.Sprintf("package %s is not in the Layout: add a line with its job", p))
		}
	}
	for _, e := range entries {
		if !covered[e] {
			out = append(out, fmt.Sprintf("the Layout names %s, which is no package of the module: remove or rename it", e))
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TestLayout checks docs/internals.md's Layout section against the
// module's packages.
func TestLayout(t *testing.T) {
	doc, err := os.ReadFile("../../" + layoutDoc)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := layoutEntries(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", layoutDoc, err)
	}
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName, Dir: "../.."}, "./...")
	if err != nil {
		t.Fatalf("loading the module's packages: %v", err)
	}
	var paths []string
	for _, p := range pkgs {
		if rel, ok := strings.CutPrefix(p.PkgPath, module+"/"); ok {
			paths = append(paths, rel)
		}
	}
	if len(paths) < 10 || len(entries) < 10 {
		t.Fatalf("%d packages, %d Layout entries: the test checks nothing", len(paths), len(entries))
	}
	for _, m := range layoutMismatches(entries, paths) {
		t.Errorf("%s: %s", layoutDoc, m)
	}
}

// TestLayoutMismatches feeds the comparison synthetic lists.
func TestLayoutMismatches(t *testing.T) {
	pkgs := []string{"abi", "gen", "gen/ir", "generated/gpipe", "generated/zbv"}
	cases := []struct {
		name    string
		entries []string
		want    []string
	}{
		{"all named", []string{"abi", "gen", "gen/ir", "generated/*"}, nil},
		{"each by path", []string{"abi", "gen", "gen/ir", "generated/gpipe", "generated/zbv"}, nil},
		{"a package missing", []string{"abi", "gen", "generated/*"},
			[]string{"package gen/ir is not in the Layout: add a line with its job"}},
		{"a parent is not its children", []string{"abi", "gen", "generated"},
			[]string{"package gen/ir is not in the Layout: add a line with its job",
				"package generated/gpipe is not in the Layout: add a line with its job",
				"package generated/zbv is not in the Layout: add a line with its job",
				"the Layout names generated, which is no package of the module: remove or rename it"}},
		{"a name that is no package", []string{"abi", "gen", "gen/ir", "gen/auto", "generated/*"},
			[]string{"the Layout names gen/auto, which is no package of the module: remove or rename it"}},
		{"a pattern that matches nothing", []string{"abi", "gen", "gen/ir", "generated/*", "examples/*"},
			[]string{"the Layout names examples/*, which is no package of the module: remove or rename it"}},
		{"named twice", []string{"abi", "abi", "gen", "gen/ir", "generated/*"},
			[]string{"the Layout names abi twice"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := layoutMismatches(tc.entries, pkgs); !slices.Equal(got, tc.want) {
				t.Errorf("layoutMismatches = %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestLayoutEntries reads the entries of a Layout section.
func TestLayoutEntries(t *testing.T) {
	doc := "# T\n\n## Layout\n\nText.\n\n```\nabi    the vocabulary\ngen    the front door,\n       continued\n\ngenerated/* the catalog\n```\n\n## Next\n\n```\nnot an entry\n```\n"
	got, err := layoutEntries(doc)
	if want := []string{"abi", "gen", "generated/*"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("layoutEntries = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"# T\n", "\n## Layout\n\nno block\n## Next\n```\nx\n```\n", "\n## Layout\n\n```\nopen\n"} {
		if _, err := layoutEntries(bad); err == nil {
			t.Errorf("layoutEntries(%q) = nil error, want one", bad)
		}
	}
}
