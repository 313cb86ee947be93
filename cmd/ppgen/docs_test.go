package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxBytes bounds README.md: a front page, the rest in docs/.
const readmeMaxBytes = 15_000

// TestREADMEFrontPage: README.md stays a front page (at most
// readmeMaxBytes) whose table of contents links every doc, and the docs
// index links every doc too, so a new doc cannot be orphaned.
func TestREADMEFrontPage(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(readme) > readmeMaxBytes {
		t.Errorf("README.md is %d bytes, over %d: move the detail into a guide under docs/ and link it", len(readme), readmeMaxBytes)
	}
	for _, cmd := range []string{"go run ./examples/mlp", "go test ./...", "PPGEN_LONG=1 go test ./..."} {
		if !strings.Contains(string(readme), cmd) {
			t.Errorf("README.md does not say %q", cmd)
		}
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string // every doc, relative to root
	for _, d := range docs {
		want = append(want, "docs/"+filepath.Base(d))
	}
	if len(want) < 10 {
		t.Fatalf("only %d docs under docs/: %v", len(want), want)
	}
	for _, index := range []string{"README.md", "docs/README.md"} {
		src, err := os.ReadFile(filepath.Join(root, index))
		if err != nil {
			t.Fatal(err)
		}
		linked := map[string]bool{}
		for _, l := range mdLinks(strings.Split(string(src), "\n")) {
			target, _, _ := strings.Cut(l.target, "#")
			linked[path.Clean(path.Join(path.Dir(index), target))] = true
		}
		for _, d := range want {
			if d != index && !linked[d] {
				t.Errorf("%s does not link %s: add it to its table of contents", index, d)
			}
		}
	}
}

// TestDocsShowUserModuleSteps: README.md and docs/getting-started.md show
// the go commands that TestUserModule runs to set up a trainer module, and
// they and docs/ci.md show the go vet line it checks.
func TestDocsShowUserModuleSteps(t *testing.T) {
	for _, file := range []string{"../../README.md", "../../docs/getting-started.md", "../../docs/ci.md"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), vetLine) {
			t.Errorf("%s does not show the go vet line that TestUserModule checks: %s", strings.TrimPrefix(file, "../../"), vetLine)
		}
	}
	for _, file := range []string{"../../README.md", "../../docs/getting-started.md"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range userModuleSteps {
			if line := "go " + strings.Join(step, " "); !strings.Contains(string(src), "\n"+line+"\n") {
				t.Errorf("%s does not show the step %q that TestUserModule runs", strings.TrimPrefix(file, "../../"), line)
			}
		}
	}
}

// TestDocLinks: every relative link of README.md and the docs names a file
// of the repository, and a #fragment names a heading of its Markdown file.
func TestDocLinks(t *testing.T) {
	root, files := repoDocFiles(t)
	anchors := map[string]map[string]bool{} // Markdown file -> its headings' anchors
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		anchors[file] = mdAnchors(strings.Split(string(src), "\n"))
		return anchors[file], nil
	}
	links := 0
	for _, file := range files {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range mdLinks(strings.Split(string(src), "\n")) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			links++
			target, frag, _ := strings.Cut(l.target, "#")
			if target == "" {
				target = file
			} else {
				target = path.Clean(path.Join(path.Dir(file), target))
			}
			if !filepath.IsLocal(filepath.FromSlash(target)) {
				t.Errorf("%s:%d: link %q leaves the repository", file, l.line, l.target)
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
				t.Errorf("%s:%d: link %q: %s does not exist", file, l.line, l.target, target)
				continue
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			a, err := anchorsOf(target)
			if err != nil {
				t.Fatal(err)
			}
			if !a[frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", file, l.line, l.target, target, frag)
			}
		}
	}
	if links < 50 {
		t.Errorf("only %d relative links in the docs: is mdLinks broken?", links)
	}
}

// mdLink is one [text](target) of a Markdown file.
type mdLink struct {
	line   int // 1-based
	target string
}

var (
	mdLinkRE   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdCodeSpan = regexp.MustCompile("`[^`]*`")
)

// mdLinks returns the links of a Markdown file outside fenced code blocks
// and code spans.
func mdLinks(lines []string) []mdLink {
	var links []mdLink
	fence := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range mdLinkRE.FindAllStringSubmatch(mdCodeSpan.ReplaceAllString(line, ""), -1) {
			links = append(links, mdLink{i + 1, m[1]})
		}
	}
	return links
}

// mdAnchors returns the anchors GitHub gives the headings of a Markdown
// file: lower case, letters, digits, '-' and '_' kept, spaces to '-', the
// rest dropped; a repeated anchor gets -1, -2, ...
func mdAnchors(lines []string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fence || !ok || !strings.HasPrefix(line, "#") || len(line)-len(strings.TrimLeft(line, "#")) > 6 {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func TestMdAnchorsAndLinks(t *testing.T) {
	md := strings.Split("# ppgen — pipeline\n## Pipeline × data parallel\n### Batched transfers (`-batch`)\n```sh\n# in your module [x](nowhere.md)\n```\n## 10. Correctness bar\n## Notes\n## Notes\nSee [a](docs/a.md#x) and `[b](b.md)` and ![pic](docs/p.svg).\n", "\n")
	got := mdAnchors(md)
	for _, a := range []string{"ppgen--pipeline", "pipeline--data-parallel", "batched-transfers--batch", "10-correctness-bar", "notes", "notes-1"} {
		if !got[a] {
			t.Errorf("anchor %q missing from %v", a, got)
		}
	}
	if got["in-your-module-xnowheremd"] || len(got) != 6 {
		t.Errorf("anchors %v: want 6, none from the code block", got)
	}
	links := mdLinks(md)
	want := []mdLink{{10, "docs/a.md#x"}, {10, "docs/p.svg"}}
	if fmt.Sprint(links) != fmt.Sprint(want) {
		t.Errorf("links %v; want %v", links, want)
	}
}

// TestNoConflictMarkers: no file of the repository keeps a merge's
// conflict markers (a resolved merge once left BENCHMARKS.md with both
// sides and the markers between them; Go files would not compile, but
// Markdown, JSON, CSV and scripts would pass every other test).
func TestNoConflictMarkers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	marker := regexp.MustCompile(`(?m)^(<{7}|={7}|>{7})( |$)`)
	files := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") && name != ".ci" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil || !info.Mode().IsRegular() || info.Size() > 4<<20 {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.IndexByte(string(src[:min(len(src), 8000)]), 0) >= 0 {
			return nil // binary
		}
		files++
		for _, loc := range marker.FindAllIndex(src, -1) {
			rel, _ := filepath.Rel(root, p)
			line := 1 + strings.Count(string(src[:loc[0]]), "\n")
			t.Errorf("%s:%d: merge conflict marker %q: resolve the merge and delete the markers", filepath.ToSlash(rel), line, src[loc[0]:loc[0]+7])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("only %d text files walked: is the walk broken?", files)
	}
}
