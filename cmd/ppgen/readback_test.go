package main

import (
	"fmt"
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
		{"batch", []string{"-batch"}},
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

// TestImplicitStepsEverywhere: a lowered program in PyTorch's form (no
// DATA_LOAD, no OPT_STEP) gets the same implicit steps from every command
// that reads it with -in as from import: one code path
// (gen.AddImplicitSteps in gen.LowerProgram).
func TestImplicitStepsEverywhere(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "torch.csv")
	csv := "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n"
	if err := os.WriteFile(path, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	// 2 micro-batches: a DATA_LOAD for each on the first and the last
	// stage, and an OPT_STEP per rank.
	const added, steps = 6, 16 + 6
	out := cliMust(t, "import", "-from", "torch-csv", path)
	if !strings.Contains(out, fmt.Sprintf("note: added %d DATA_LOAD and OPT_STEP steps PyTorch leaves implicit", added)) || !strings.Contains(out, fmt.Sprintf("%d steps", steps)) {
		t.Errorf("import: %s", out)
	}
	shown := cliMust(t, "show", "-in", path)
	for _, want := range []string{"rank 0: 0DATA_LOAD0 0F0", "1DATA_LOAD1 1F1", "0B1 OPT_STEP\n", "1SEND_B1 OPT_STEP\n"} {
		if !strings.Contains(shown, want) {
			t.Errorf("show -in: no %q in\n%s", want, shown)
		}
	}
	if v := cliMust(t, "verify", "-in", path); !strings.Contains(v, fmt.Sprintf("%d steps", steps)) {
		t.Errorf("verify -in: %s", v)
	}
	gen := filepath.Join(dir, "x_gen.go")
	cliMust(t, "gen", "-in", path, "-package", "x", "-o", gen)
	src, err := os.ReadFile(gen)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "x.OptStep()"); n != 2 {
		t.Errorf("gen -in: %d OptStep calls, want 2", n)
	}
	if n := strings.Count(string(src), "DATA_LOAD"); n < 4 {
		t.Errorf("gen -in: %d DATA_LOAD steps, want 4", n)
	}
	code, _, errs := cliRun(t, "sim", "-in", path, "-cost", "data=1,opt=1")
	if code != 0 {
		t.Fatalf("sim -in: exit %d %s", code, errs)
	}
	// The loads and optimizer steps take time only if they are there.
	with := cliMust(t, "sim", "-in", path, "-cost", "data=1,opt=1", "-json")
	without := cliMust(t, "sim", "-in", path, "-json")
	if with == without {
		t.Errorf("sim -in: data=1,opt=1 changes nothing: the implicit steps are missing\n%s", with)
	}
	report := filepath.Join(dir, "r.html")
	cliMust(t, "report", "-in", path, "-o", report)
	html, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "OPT_STEP") || !strings.Contains(string(html), "DATA_LOAD") {
		t.Error("report -in: the program shown has no OPT_STEP or DATA_LOAD")
	}
}
