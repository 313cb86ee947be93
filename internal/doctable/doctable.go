// Package doctable rewrites generated Markdown tables inside hand-written
// documents. A document marks each generated region with
//
//	<!-- BEGIN name -->
//	...
//	<!-- END name -->
//
// and a test that measures the rows calls [Replace] under its -update flag,
// so the prose stays hand-written and the figures stay the code's.
package doctable

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Markdown renders a table with the given header and rows. A '|' or a
// newline inside a cell is escaped so that every row stays one table row.
func Markdown(header []string, rows [][]string) string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			c = strings.ReplaceAll(c, "|", `\|`)
			c = strings.ReplaceAll(c, "\n", " ")
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

// Replace rewrites the region named name in the Markdown file at path with
// the table of header and rows. The file must already hold both markers;
// the file is replaced atomically (written beside it, then renamed).
func Replace(path, name string, header []string, rows [][]string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin := []byte("<!-- BEGIN " + name + " -->\n")
	end := []byte("<!-- END " + name + " -->")
	i := bytes.Index(old, begin)
	j := bytes.Index(old, end)
	if i < 0 || j < i {
		return fmt.Errorf("doctable: %s has no region %q (add the lines %q and %q)", path, name, strings.TrimSpace(string(begin)), string(end))
	}
	var out bytes.Buffer
	out.Write(old[:i+len(begin)])
	out.WriteString(Markdown(header, rows))
	out.Write(old[j:])
	tmp, err := os.CreateTemp(filepath.Dir(path), ".doctable-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
