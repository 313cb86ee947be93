package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ppgen/ppgen/gen/schedules"
)

// TestListWraps: `ppgen list` wraps its lines to 100 columns when standard
// output is not a terminal and COLUMNS is unset, to COLUMNS when set, and
// says the same words as unwrapped: every family's name, summary,
// constraints and aliases, in order.
func TestListWraps(t *testing.T) {
	var wide bytes.Buffer
	if err := writeList(&wide, 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		columns string
		max     int
	}{
		{"", 100},
		{"80", 80},
		{"not a number", 100},
		{"10", minListWidth},
	} {
		t.Setenv("COLUMNS", tc.columns)
		var out, errs bytes.Buffer
		if code := run([]string{"list"}, &out, &errs); code != 0 {
			t.Fatalf("COLUMNS=%q: exit %d: %s", tc.columns, code, errs.String())
		}
		for i, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			if n := utf8.RuneCountInString(line); n > tc.max {
				t.Errorf("COLUMNS=%q: line %d has %d columns, more than %d: %q", tc.columns, i+1, n, tc.max, line)
			}
		}
		got := strings.Fields(out.String())
		if !slices.Equal(got, strings.Fields(wide.String())) {
			t.Errorf("COLUMNS=%q: the wrapped list says other words than the unwrapped one:\n%s", tc.columns, out.String())
		}
		for _, f := range schedules.All() {
			for _, text := range []string{f.Name, f.Summary, f.Constraints} {
				if words := strings.Fields(text); len(words) > 0 && !containsRun(got, words) {
					t.Errorf("COLUMNS=%q: %s: the list lacks %q", tc.columns, f.Name, text)
				}
			}
			for _, a := range f.Aliases {
				if !containsRun(got, []string{a + ",", "Schedule" + a}) {
					t.Errorf("COLUMNS=%q: %s: the list lacks its alias %s", tc.columns, f.Name, a)
				}
			}
		}
	}
	// A wide terminal gets long lines: the summary of 1f1b on one.
	t.Setenv("COLUMNS", "200")
	var out bytes.Buffer
	run([]string{"list"}, &out, &bytes.Buffer{})
	f, _ := schedules.Lookup("1f1b")
	if !strings.Contains(out.String(), f.Summary+"\n") {
		t.Errorf("COLUMNS=200: 1f1b's summary is wrapped:\n%s", out.String())
	}
}

// containsRun reports whether words occur in s one after the other
// (punctuation attached to a word is part of it).
func containsRun(s, words []string) bool {
	for i := 0; i+len(words) <= len(s); i++ {
		if slices.Equal(s[i:i+len(words)], words) {
			return true
		}
	}
	return false
}
