package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
)

// TestImportTorchInterleaved1F1B imports the hand-derived CSVs of PyTorch's
// ScheduleInterleaved1F1B at P=4, V=2, M=8 (see testdata/*.md): both verify,
// infer the loop placement, agree with ppgen's own interleaved order, and
// emit Go source that parses; `ppgen verify -in` accepts them too.
func TestImportTorchInterleaved1F1B(t *testing.T) {
	ours, err := gen.Lower(ir.Config{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8}, gen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, form, note string }{
		{"torch_interleaved1f1b_p4_v2_m8.csv", "compute-only", ""},
		{"torch_interleaved1f1b_p4_v2_m8_comms.csv", "with comms", "dropped 24 FSDP actions"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			out := filepath.Join(t.TempDir(), "sched", "schedule_gen.go")
			os.MkdirAll(filepath.Dir(out), 0o755)
			code, stdout, stderr := cliRun(t, "import", "-from", "torch-csv", path, "-o", out)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			want := "ok: " + path + " (torch-csv, " + tc.form + "): 4 ranks, 8 stages (loop placement), 8 micro-batches; deadlock-free under rendezvous"
			if !strings.HasPrefix(stdout, want) || !strings.Contains(stdout, tc.note) {
				t.Errorf("report:\n%s\nwant prefix %q and %q", stdout, want, tc.note)
			}
			if !strings.HasPrefix(stderr, "ppgen: wrote "+out+" (4 ranks, ") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q", stderr)
			}
			src, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), out, src, 0)
			if err != nil {
				t.Fatalf("emitted Go does not parse: %v", err)
			}
			if f.Name.Name != "sched" || !bytes.Contains(src, []byte(`Schedule:    "`+strings.TrimSuffix(tc.file, ".csv")+`"`)) {
				t.Errorf("package %s; Spec: %s", f.Name.Name, firstLine(src, "Schedule:"))
			}
			if !bytes.Contains(src, []byte("// ppgen import -from torch-csv "+path)) {
				t.Errorf("no invocation header in:\n%.300s", src)
			}
			if code, vout, verr := cliRun(t, "verify", "-in", path); code != 0 || !strings.HasPrefix(vout, "ok: 4 ranks, 8 stages, 8 micro-batches") {
				t.Errorf("ppgen verify -in: exit %d %s %s", code, vout, verr)
			}
			data, _ := os.ReadFile(path)
			im, err := importTorch(path, data, formatTorchCSV, gen.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ir.FormatText(im.res.Compute), ir.FormatText(ours.Compute); got != want {
				t.Errorf("compute order differs from ppgen's interleaved:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

func firstLine(src []byte, sub string) string {
	for _, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// roundTripSchedules are the families the round trips cover, with V.
var roundTripSchedules = []ir.Config{
	{Schedule: "gpipe", Ranks: 3, Micro: 4},
	{Schedule: "1f1b", Ranks: 4, Micro: 8},
	{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8},
	{Schedule: "interleaved", Ranks: 3, Virtual: 3, Micro: 5},
	{Schedule: "looped-bfs", Ranks: 2, Virtual: 2, Micro: 4},
	{Schedule: "zb-h1", Ranks: 4, Micro: 8},
	{Schedule: "zb-h2", Ranks: 4, Micro: 8},
	{Schedule: "interleaved-zb", Ranks: 2, Virtual: 2, Micro: 4},
	{Schedule: "zbv", Ranks: 4, Micro: 8},
	{Schedule: "v-half", Ranks: 4, Micro: 8},
	{Schedule: "v-min", Ranks: 4, Micro: 8},
	{Schedule: "dualpipev", Ranks: 2, Micro: 4},
}

func exportArgs(c ir.Config) []string {
	args := []string{"-schedule", c.Schedule, "-ranks", itoa(c.Ranks), "-micro", itoa(c.Micro)}
	if c.Virtual > 0 {
		args = append(args, "-virtual", itoa(c.Virtual))
	}
	return args
}

// TestExportImportRoundTrip exports every family in both forms, imports the
// CSV and compares: the compute-only form gives back the same compute order
// and, lowered by the same passes, the same program; the lowered form gives
// back the same transfers and compute (and re-exports to the same bytes);
// the legacy names round-trip for families without overlaps.
func TestExportImportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, c := range roundTripSchedules {
		name := c.Schedule + "_" + itoa(c.Ranks) + "_" + itoa(c.Micro)
		t.Run(name, func(t *testing.T) {
			orig, err := gen.Lower(c, gen.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// Compute-only.
			co := filepath.Join(dir, name+"_compute.csv")
			cliMust(t, append([]string{"export", "-to", "torch-csv", "-compute-only", "-o", co}, exportArgs(c)...)...)
			data, _ := os.ReadFile(co)
			if bytes.Contains(data, []byte("SEND")) || bytes.Contains(data, []byte("DATA")) {
				t.Errorf("compute-only export holds transfers or data steps:\n%s", data)
			}
			im, err := importTorch(co, data, formatTorchCSV, gen.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ir.FormatText(im.res.Compute), ir.FormatText(orig.Compute); got != want {
				t.Errorf("compute order changed:\n%s\nwant\n%s", got, want)
			}
			if got, want := ir.FormatText(im.res.Program), ir.FormatText(orig.Program); got != want {
				t.Errorf("lowered program changed:\n%s\nwant\n%s", got, want)
			}
			// Lowered.
			cc := filepath.Join(dir, name+"_comms.csv")
			cliMust(t, append([]string{"export", "-to", "torch-csv", "-o", cc}, exportArgs(c)...)...)
			data, _ = os.ReadFile(cc)
			for _, bad := range []string{"DATA_", "OPT_STEP"} {
				if bytes.Contains(data, []byte(bad)) {
					t.Errorf("export holds %s, which PyTorch cannot parse", bad)
				}
			}
			if n := bytes.Count(data, []byte("REDUCE_GRAD")); n != orig.Program.Stages() {
				t.Errorf("%d REDUCE_GRAD actions, want one per stage (%d)", n, orig.Program.Stages())
			}
			im, err = importTorch(cc, data, formatTorchCSV, gen.Options{})
			if err != nil {
				t.Fatal(err)
			}
			skeleton := func(p ir.Program) string {
				q, _ := dropKinds(p, ir.DataLoad, ir.OptStep, ir.ReduceGrad)
				for _, steps := range q.Ranks {
					for i := range steps {
						steps[i].Slot = ir.None
						for j := range steps[i].Sub {
							steps[i].Sub[j].Slot = ir.None
						}
					}
				}
				return ir.FormatText(q)
			}
			if got, want := skeleton(im.res.Program), skeleton(orig.Program); got != want {
				t.Errorf("transfers or compute changed:\n%s\nwant\n%s", got, want)
			}
			again := cliMust(t, "export", "-to", "torch-csv", "-in", cc)
			if again != string(data) {
				t.Errorf("export(import(export)) differs:\n%s\nwant\n%s", again, data)
			}
			// Legacy names, where PyTorch 2.4 to 2.6 can express the schedule.
			if c.Schedule == "dualpipev" {
				code, _, errs := cliRun(t, append([]string{"export", "-to", "torch-csv-legacy"}, exportArgs(c)...)...)
				if code != 2 || !strings.Contains(errs, "have no OVERLAP_F_B") {
					t.Errorf("legacy export of overlaps: exit %d %s", code, errs)
				}
				return
			}
			legacy := cliMust(t, append([]string{"export", "-to", "torch-csv-legacy"}, exportArgs(c)...)...)
			if strings.Contains(legacy, "I") && !strings.Contains(legacy, "RECV") {
				t.Error("legacy export still names I")
			}
			im, err = importTorch("legacy", []byte(legacy), formatTorchCSVLegacy, gen.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := skeleton(im.res.Program), skeleton(orig.Program); got != want {
				t.Errorf("legacy round trip changed the program:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestImportCustomSchedule imports a hand-written CSV: three stages on two
// ranks (a table placement no family has), the backward split into I and W,
// idle cells. It verifies, simulates, and its lowering is stable.
func TestImportCustomSchedule(t *testing.T) {
	path := "testdata/custom_3stage_table.csv"
	out := cliMust(t, "import", "-from", "torch-csv", path)
	if want := "ok: testdata/custom_3stage_table.csv (torch-csv, compute-only): 2 ranks, 3 stages (table placement), 4 micro-batches; deadlock-free under rendezvous"; !strings.HasPrefix(out, want) {
		t.Errorf("report %q\nwant prefix %q", out, want)
	}
	sim := cliMust(t, "sim", "-in", path)
	if !strings.Contains(sim, "P=2 S=3 M=4") || !strings.Contains(sim, "makespan 24") {
		t.Errorf("sim:\n%s", sim)
	}
	shown := cliMust(t, "show", "-in", path)
	cliGolden(t, "testdata/custom_3stage_table.lowered.txt", []byte(shown))
	// Its export in PyTorch's form imports back to the same program.
	csv := cliMust(t, "export", "-to", "torch-csv", "-in", path)
	im, err := importTorch("re", []byte(csv), formatTorchCSV, gen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ir.FormatText(im.res.Compute); got != cliMust(t, "show", "-compute-only", "-in", path) {
		t.Errorf("compute order after export and import:\n%s", got)
	}
}

// TestImportLegacyNames reads PyTorch 2.4 to 2.6 names: BW is a full
// backward, B a backward-input when the chunk has a W, else a full backward.
func TestImportLegacyNames(t *testing.T) {
	data, err := os.ReadFile("testdata/torch_legacy_1f1b_p2_m2.csv")
	if err != nil {
		t.Fatal(err)
	}
	p, err := parseTorchCSV(data, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ir.FormatText(p), "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1I0 1W0 1F1 1I1 1W1\n"; got != want {
		t.Errorf("parsed\n%s\nwant\n%s", got, want)
	}
	code, _, errs := cliRun(t, "import", "-from", "torch-csv", "testdata/torch_legacy_1f1b_p2_m2.csv")
	if code != 2 || !strings.Contains(errs, `"BW"`) || !strings.Contains(errs, "torch-csv-legacy") {
		t.Errorf("current names on a legacy file: exit %d %q; want a hint at torch-csv-legacy", code, errs)
	}
}

// TestImportDeadlock: a lowered CSV whose receives deadlock under
// rendezvous (as PyTorch's own lowering can produce) is refused with exit 1
// and the exact diagnosis, the same that `ppgen verify -in` gives; nothing
// is written.
func TestImportDeadlock(t *testing.T) {
	path := "testdata/rendezvous_deadlock.csv"
	out := filepath.Join(t.TempDir(), "x.go")
	const diag = "deadlock: rank 0 at step 3 0RECV_B0 waits for rank 1; rank 1 at step 2 1RECV_F1 waits for rank 0 (each comm stream runs in order and a transfer completes only when both ends reach it; reorder the transfers or post the receive earlier)\n"
	code, stdout, stderr := cliRun(t, "import", "-from", "torch-csv", path, "-o", out)
	if want := "ppgen import: " + path + " (torch-csv, with comms): " + diag; code != 1 || stdout != "" || stderr != want {
		t.Errorf("import: exit %d stdout %q stderr\n%q\nwant\n%q", code, stdout, stderr, want)
	}
	cliNoFile(t, out)
	code, stdout, stderr = cliRun(t, "verify", "-in", path)
	if code != 1 || stdout != "" || stderr != "ppgen verify: "+diag {
		t.Errorf("verify -in: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}

// TestImportExportErrors: bad input exits 2 with one line and writes nothing.
func TestImportExportErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("0F0,0X1\n"), 0o644)
	gap := filepath.Join(dir, "gap.csv")
	os.WriteFile(gap, []byte("0F0,0B0\n2F0,2B0\n"), 0o644)
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "testdata/custom_3stage_table.csv"}, "missing -from"},
		{[]string{"import", "-from", "json", "testdata/custom_3stage_table.csv"}, `-from "json"`},
		{[]string{"import", "-from", "torch-csv"}, "want one CSV file"},
		{[]string{"import", "-from", "torch-csv", "a.csv", "b.csv"}, "got 2"},
		{[]string{"import", "-from", "torch-csv", filepath.Join(dir, "none.csv")}, "no such file"},
		{[]string{"import", "-from", "torch-csv", bad}, "line 1"},
		{[]string{"import", "-from", "torch-csv", gap}, "stage 1 has no compute step"},
		{[]string{"import", "-from", "torch-csv", "-bogus", bad}, "-bogus"},
		{[]string{"export", "-schedule", "1f1b", "-ranks", "2", "-micro", "2"}, "missing -to"},
		{[]string{"export", "-to", "torch-csv", "-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-overlap"}, "OVERLAP_B_F"},
		{[]string{"export", "-to", "torch-csv", "-schedule", "dualpipe", "-ranks", "2", "-micro", "4"}, "cannot express 2 model copies"},
		{[]string{"export", "-to", "torch-csv", "-in", bad}, "line 1"},
		{[]string{"export", "-to", "torch-csv", "-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-o", ""}, "-o needs"},
	} {
		args := tc.args
		if args[0] == "export" && !strings.Contains(strings.Join(args, " "), "-o ") {
			args = append(args, "-o", out)
		} else if args[0] == "import" {
			args = append(args, "-o", out)
		}
		code, stdout, stderr := cliRun(t, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", tc.args, code, stdout, stderr, tc.want)
		}
		cliNoFile(t, out)
	}
}

// TestImportToStdout: with -o - the Go source is all of stdout and the
// report goes to stderr.
func TestImportToStdout(t *testing.T) {
	code, stdout, stderr := cliRun(t, "import", "-from", "torch-csv", "-package", "p", "-name", "mine", "testdata/custom_3stage_table.csv", "-o", "-")
	if code != 0 || !strings.HasPrefix(stdout, "// Code generated by ppgen. DO NOT EDIT.") || !strings.HasPrefix(stderr, "ok: ") {
		t.Fatalf("exit %d\nstdout %.200s\nstderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "package p\n") || !strings.Contains(stdout, `Schedule:    "mine"`) {
		t.Errorf("package or schedule name not applied:\n%.600s", stdout)
	}
}
