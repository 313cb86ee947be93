package ir

import (
	"strings"
	"testing"
)

func TestIsCSV(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		want       bool
	}{
		{"s.csv", "rank 0: 0F0 0B0\nrank 1: 1F0 1B0\n", false}, // text form saved as .csv
		{"s.csv", "\ufeffrank 0: 0F0 0B0\n", false},
		{"s.csv", "# made by hand, twice\n\n  rank  0 : 0F0 0B0\n", false},
		{"s.csv", "0F0,0B0\n", true},
		{"s.csv", "0F0\n", true}, // one cell a row: the name decides
		{"s.CSV", "0F0\n", true},
		{"s.txt", "0F0,0B0\n", true},
		{"-", "\ufeff0F0,0B0\n", true},
		{"s.txt", "0F0 0B0\n", false},
		{"s.txt", "rank 0: 0F0 0B0\n0F1,0B1\n", false},
		{"s.csv", "ranked,0F0\n", true},
		{"s.csv", "rank x: 0F0\n", true},
		{"s.txt", "", false},
		{"s.csv", "", true},
	} {
		if got := IsCSV(tc.name, []byte(tc.head)); got != tc.want {
			t.Errorf("IsCSV(%q, %q) = %v, want %v", tc.name, tc.head, got, tc.want)
		}
	}
}

func TestReadBOM(t *testing.T) {
	want := "rank 0: 0F0 0B0\n"
	for _, in := range []string{"\ufeffrank 0: 0F0 0B0\n", "\ufeff0F0 0B0", "\ufeffrank 0:\t0F0\t0B0\r\n"} {
		p, err := ParseText(in)
		if err != nil {
			t.Errorf("ParseText(%q): %v", in, err)
			continue
		}
		if got := FormatText(p); got != want {
			t.Errorf("ParseText(%q) = %q, want %q", in, got, want)
		}
	}
	p, err := ParseCSV(strings.NewReader("\ufeff0F0,0B0\n"))
	if err != nil {
		t.Fatalf("ParseCSV with a BOM: %v", err)
	}
	if got := FormatText(p); got != want {
		t.Errorf("ParseCSV with a BOM = %q, want %q", got, want)
	}
	// Only the first line's, once.
	if _, err := ParseText("\ufeff\ufeffrank 0: 0F0 0B0\n"); err == nil {
		t.Error("ParseText accepted two BOMs")
	}
	if _, err := ParseText("rank 0: 0F0 0B0\n\ufeffrank 1: 1F0 1B0\n"); err == nil {
		t.Error("ParseText accepted a BOM on line 2")
	}
}

func TestParseCSVTextFormHint(t *testing.T) {
	_, err := ParseCSV(strings.NewReader("rank 0: 0F0 0B0\n"))
	if err == nil || !strings.Contains(err.Error(), "looks like ppgen's text form") {
		t.Fatalf("ParseCSV(text form) = %v, want a hint at the text form", err)
	}
	_, err = ParseCSV(strings.NewReader("0F0,0X0\n"))
	if err == nil || strings.Contains(err.Error(), "text form") {
		t.Fatalf("ParseCSV(bad step) = %v, want no text-form hint", err)
	}
}

func FuzzIsCSV(f *testing.F) {
	for _, s := range append(append([]string{}, textSeeds...), csvSeeds...) {
		f.Add("s.csv", s)
	}
	f.Add("s.txt", "\ufeff# a, b\nrank 3 :")
	f.Fuzz(func(t *testing.T, name, head string) {
		csv := IsCSV(name, []byte(head))
		if strings.HasPrefix(strings.TrimPrefix(head, "\ufeff"), "rank 0: ") && csv {
			t.Fatalf("IsCSV(%q, %q) = true for a text-form first line", name, head)
		}
		// Detection on a prefix of the file agrees with the whole file
		// once the prefix holds the first full line.
		if i := strings.IndexByte(head, '\n'); i >= 0 {
			first := strings.TrimSpace(strings.TrimPrefix(head[:i], "\ufeff"))
			if first == "" || first[0] == '#' {
				return
			}
			if got := IsCSV(name, []byte(head[:i+1])); got != csv {
				t.Fatalf("IsCSV(%q, %q) = %v, on its first line %v", name, head, csv, got)
			}
		}
	})
}
