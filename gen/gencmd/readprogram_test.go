package gencmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestReadProgramForms: the form is told by content, whatever the name, and
// a leading UTF-8 byte order mark is dropped in both forms.
func TestReadProgramForms(t *testing.T) {
	const text = "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"
	const csv = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"
	dir := t.TempDir()
	for _, tc := range []struct{ name, body string }{
		{"text.csv", text},
		{"text.txt", text},
		{"bom.txt", "\ufeff" + text},
		{"bom.csv", "\ufeff" + text},
		{"tabs.csv", strings.ReplaceAll(text, "0 ", "0\t")},
		{"comment.csv", "# hand-edited, see notes\n" + text},
		{"csv.csv", csv},
		{"csv.txt", csv},
		{"bom-csv.csv", "\ufeff" + csv},
		{"crlf-bom.csv", "\ufeff" + strings.ReplaceAll(csv, "\n", "\r\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := ReadProgram(path)
			if err != nil {
				t.Fatalf("ReadProgram: %v", err)
			}
			if got := ir.FormatText(p); got != text {
				t.Errorf("ReadProgram = %q, want %q", got, text)
			}
		})
	}
}
