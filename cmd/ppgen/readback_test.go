package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
)

// TestPrintedProgramsReadBack: every program ppgen prints, in every form
// (show text and CSV, with and without -compute-only, export torch-csv),
// for every family `ppgen list` names and a few option sets, reads back
// with -in and verifies; and the text and CSV forms parse back to the
// same steps. A form that cannot express a family (torch-csv for dualpipe's
// two model copies, mpipe's owned inputs, OVERLAP_B_F) must say so with exit
// 2 instead.
func TestPrintedProgramsReadBack(t *testing.T) {
	dir := t.TempDir()
	type variant struct {
		name  string
		flags []string
	}
	variants := []variant{
		{"", nil},
		{"split", []string{"-split"}},
		{"fsdp", []string{"-fsdp", "1"}},
		{"swap", []string{"-swap", "2"}},
		{"ship-labels", []string{"-ship-labels"}},
	}
	forms := []struct {
		name, ext string
		args      []string
	}{
		{"text", ".txt", []string{"show"}},
		{"csv", ".csv", []string{"show", "-format", "csv"}},
		{"compute-only", ".txt", []string{"show", "-compute-only"}},
		{"compute-only-csv", ".csv", []string{"show", "-compute-only", "-format", "csv"}},
		{"torch-csv", ".csv", []string{"export", "-to", "torch-csv"}},
		{"torch-csv-compute-only", ".csv", []string{"export", "-to", "torch-csv", "-compute-only"}},
	}
	n := 0
	for _, fam := range schedules.All() {
		for _, v := range variants {
			base := append([]string{"-schedule", fam.Name, "-ranks", "4", "-micro", "8"}, v.flags...)
			if code, _, _ := cliRun(t, append([]string{"verify"}, base...)...); code != 0 {
				continue // the family does not take this option
			}
			for _, f := range forms {
				name := fam.Name + "/" + v.name + "/" + f.name
				code, out, errs := cliRun(t, append(f.args, base...)...)
				if code != 0 {
					if f.args[0] == "export" && code == 2 && strings.Count(errs, "\n") == 1 {
						continue // torch-csv cannot express it, and says why
					}
					t.Errorf("%s: exit %d: %s", name, code, errs)
					continue
				}
				path := filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+f.ext)
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				n++
				if code, vout, errs := cliRun(t, "verify", "-in", path); code != 0 || !strings.HasPrefix(vout, "ok: ") {
					t.Errorf("%s: verify -in of the printed program: exit %d: %s%s", name, code, vout, errs)
				}
				if f.args[0] != "show" {
					continue
				}
				// The form parses back to the same steps, and prints the same.
				var p ir.Program
				var err error
				if f.ext == ".csv" {
					p, err = ir.ParseCSV(strings.NewReader(out))
				} else {
					p, err = ir.ParseText(out)
				}
				if err != nil {
					t.Errorf("%s: parse: %v", name, err)
					continue
				}
				again := ir.FormatText(p)
				if f.ext == ".csv" {
					again = string(ir.FormatCSV(p))
				}
				if again != out {
					t.Errorf("%s: printed program does not round-trip through its parser", name)
				}
			}
		}
	}
	if n < len(schedules.All())*4 {
		t.Errorf("only %d printed programs checked", n)
	}
}
