package doctable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMarkdownEscapes(t *testing.T) {
	got := Markdown([]string{"a", "b"}, [][]string{{"x|y", "1\n2"}})
	want := "| a | b |\n| --- | --- |\n| x\\|y | 1 2 |\n"
	if got != want {
		t.Fatalf("Markdown:\n%s\nwant:\n%s", got, want)
	}
}

func TestReplace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "intro\n<!-- BEGIN t -->\nold\n<!-- END t -->\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Replace(path, "t", []string{"k"}, [][]string{{"v"}}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	want := "intro\n<!-- BEGIN t -->\n| k |\n| --- |\n| v |\n<!-- END t -->\nafter\n"
	if string(b) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b, want)
	}
	if err := Replace(path, "missing", nil, nil); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Replace of a missing region: %v", err)
	}
}

func TestMeasureSeesAnAllocation(t *testing.T) {
	var keep []byte
	took, peak := Measure(time.Millisecond, func() {
		keep = make([]byte, 64<<20)
		time.Sleep(5 * time.Millisecond)
	})
	if peak < 64<<20 {
		t.Errorf("peak heap %d bytes while 64 MiB were live", peak)
	}
	if took < 5*time.Millisecond {
		t.Errorf("took %v for a 5ms sleep", took)
	}
	_ = keep
}
