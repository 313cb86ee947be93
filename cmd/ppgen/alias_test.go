package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/schedules"
)

// TestScheduleAliases: every command's -schedule takes PyTorch's and
// torchtitan's names, in any case and with PyTorch's Schedule prefix, and
// does what the family's own name does: gen writes the same bytes (the
// header records the family's name), sim -compare reports the family's
// name; ppgen list and the flag help name the aliases.
func TestScheduleAliases(t *testing.T) {
	runOK := func(args ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		if code := run(args, &out, &errs); code != 0 {
			t.Fatalf("ppgen %s: exit %d\n%s", strings.Join(args, " "), code, errs.String())
		}
		return out.String()
	}
	list := runOK("list")
	// The registry's aliases (gen/schedules' TestAliases checks each names
	// the right family); every one must reach the CLI.
	type alias struct{ alias, family string }
	var aliases []alias
	for _, f := range schedules.All() {
		for _, a := range f.Aliases {
			aliases = append(aliases, alias{a, f.Name})
		}
	}
	if len(aliases) < 7 {
		t.Fatalf("the registry has %d aliases, want PyTorch's seven at least: %v", len(aliases), aliases)
	}
	for _, tc := range aliases {
		want := runOK("gen", "-schedule", tc.family, "-ranks", "2", "-micro", "4", "-o", "-")
		if !strings.Contains(want, "Schedule:    \""+tc.family+"\",") {
			t.Fatalf("gen -schedule %s: no Spec.Schedule %q", tc.family, tc.family)
		}
		for _, name := range []string{tc.alias, "Schedule" + tc.alias, strings.ToLower(tc.alias)} {
			if got := runOK("gen", "-schedule", name, "-ranks", "2", "-micro", "4", "-o", "-"); got != want {
				t.Errorf("gen -schedule %s differs from -schedule %s", name, tc.family)
			}
		}
		if !strings.Contains(list, "Schedule"+tc.alias) || !strings.Contains(list, tc.alias) {
			t.Errorf("ppgen list does not name %s (Schedule%s):\n%s", tc.alias, tc.alias, list)
		}
	}
	var rows []struct {
		Schedule string `json:"schedule"`
		Virtual  int    `json:"virtual"`
	}
	out := runOK("sim", "-compare", "GPipe,ScheduleZBVZeroBubble,interleaved1f1b:3", "-ranks", "2", "-micro", "4", "-json")
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("sim -compare -json: %v\n%s", err, out)
	}
	if len(rows) != 3 || rows[0].Schedule != "gpipe" || rows[1].Schedule != "zbv" || rows[2].Schedule != "interleaved" || rows[2].Virtual != 3 {
		t.Errorf("sim -compare with aliases: %+v; want gpipe, zbv, interleaved V=3", rows)
	}
	var help, errs bytes.Buffer
	run([]string{"gen", "-h"}, &help, &errs)
	if h := help.String() + errs.String(); !strings.Contains(h, "ZBVZeroBubble") || !strings.Contains(h, "Schedule prefix") {
		t.Errorf("gen -h does not mention the aliases:\n%s", h)
	}
	var e bytes.Buffer
	if code := run([]string{"sim", "-schedule", "ScheduleNope", "-ranks", "2", "-micro", "4"}, &bytes.Buffer{}, &e); code != 2 || !strings.Contains(e.String(), `unknown schedule "ScheduleNope"`) {
		t.Errorf("an unknown name: exit %d, %s", code, e.String())
	}
}
