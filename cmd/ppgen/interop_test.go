package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/torch"
)

// TestImportTorchInterleaved1F1B imports the hand-derived CSVs of PyTorch's
// ScheduleInterleaved1F1B at P=4, V=2, M=8 (see testdata/*.md): both verify,
// infer the loop placement, agree with ppgen's own interleaved order, and
// emit Go source that parses and that `ppgen check` regenerates from its
// header; `ppgen verify -in` accepts them too.
func TestImportTorchInterleaved1F1B(t *testing.T) {
	ours, err := gen.Lower(ir.Config{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8}, gen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, form, note string }{
		{"torch_interleaved1f1b_p4_v2_m8.csv", "compute-only", ""},
		{"torch_interleaved1f1b_p4_v2_m8_comms.csv", "with comms", "; peak unsharded stages per rank [2 2 2 2]\nnote: added 20 DATA_LOAD and OPT_STEP steps PyTorch leaves implicit\n"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			out := filepath.Join(mkdirTemp(t, "sched"), "schedule_gen.go")
			os.MkdirAll(filepath.Dir(out), 0o755)
			code, stdout, stderr := cliRun(t, "import", "-from", "torch-csv", path, "-o", out)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			want := "ok: " + path + " (torch-csv, " + tc.form + "): 4 ranks, 8 stages (loop placement), 8 micro-batches; deadlock-free under rendezvous"
			if !strings.HasPrefix(stdout, want) || !strings.Contains(stdout, tc.note) || strings.Contains(stdout, "dropped") {
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
			// The header names the file relative to the output's directory.
			abs, _ := filepath.Abs(path)
			rel, err := filepath.Rel(filepath.Dir(out), abs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(src, []byte("// ppgen import -from torch-csv "+filepath.ToSlash(rel)+"\n")) {
				t.Errorf("no invocation header naming %s in:\n%.300s", rel, src)
			}
			// ... so that check regenerates it (and vets it).
			if code, cout, cerr := cliRun(t, "check", out); code != 0 {
				t.Errorf("check %s: exit %d: %s%s", out, code, cout, cerr)
			}
			if code, vout, verr := cliRun(t, "verify", "-in", path); code != 0 || !strings.HasPrefix(vout, "ok: 4 ranks, 8 stages, 8 micro-batches") {
				t.Errorf("ppgen verify -in: exit %d %s %s", code, vout, verr)
			}
			data, _ := os.ReadFile(path)
			im, err := importTorch(path, data, formatTorchCSV, gen.Options{}, false)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ir.FormatText(im.Result.Compute), ir.FormatText(ours.Compute); got != want {
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
			im, err := importTorch(co, data, formatTorchCSV, gen.Options{}, false)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ir.FormatText(im.Result.Compute), ir.FormatText(orig.Compute); got != want {
				t.Errorf("compute order changed:\n%s\nwant\n%s", got, want)
			}
			if got, want := ir.FormatText(im.Result.Program), ir.FormatText(orig.Program); got != want {
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
			im, err = importTorch(cc, data, formatTorchCSV, gen.Options{}, false)
			if err != nil {
				t.Fatal(err)
			}
			skeleton := func(p ir.Program) string {
				q, _ := torch.DropKinds(p, ir.DataLoad, ir.OptStep, ir.ReduceGrad)
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
			if got, want := skeleton(im.Result.Program), skeleton(orig.Program); got != want {
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
			im, err = importTorch("legacy", []byte(legacy), formatTorchCSVLegacy, gen.Options{}, false)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := skeleton(im.Result.Program), skeleton(orig.Program); got != want {
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
	im, err := importTorch("re", []byte(csv), formatTorchCSV, gen.Options{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := ir.FormatText(im.Result.Compute); got != cliMust(t, "show", "-compute-only", "-in", path) {
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
	if code != 1 || stdout != "" || stderr != "ppgen verify: "+path+": "+diag {
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

// TestImportExportUsage: the usage lines show -from and -to as required,
// as they are (TestImportExportErrors: "missing -from", "missing -to").
func TestImportExportUsage(t *testing.T) {
	for _, tc := range []struct{ cmd, want string }{
		{"import", "usage: ppgen import -from torch-csv|torch-csv-legacy FILE "},
		{"export", "usage: ppgen export -to torch-csv|torch-csv-legacy (-schedule "},
	} {
		code, stdout, stderr := cliRun(t, tc.cmd, "-h")
		usage, _, _ := strings.Cut(stdout, "\n")
		if code != 0 || !strings.HasPrefix(usage, tc.want) || strings.Contains(usage, "[-from") || strings.Contains(usage, "[-to") {
			t.Errorf("ppgen %s -h: exit %d, usage line %q (stderr %q); want it to start %q", tc.cmd, code, usage, stderr, tc.want)
		}
	}
}

// TestImportToStdout: with -o - the Go source is all of stdout and the
// report goes to stderr.
func TestImportToStdout(t *testing.T) {
	code, stdout, stderr := cliRun(t, "import", "-from", "torch-csv", "-package", "p", "-schedule-name", "mine", "testdata/custom_3stage_table.csv", "-o", "-")
	if code != 0 || !strings.HasPrefix(stdout, "// Code generated by ppgen. DO NOT EDIT.") || !strings.HasPrefix(stderr, "ok: ") {
		t.Fatalf("exit %d\nstdout %.200s\nstderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "package p\n") || !strings.Contains(stdout, `Schedule:    "mine"`) {
		t.Errorf("package or schedule name not applied:\n%.600s", stdout)
	}
}

// countFSDP counts the UNSHARD, RESHARD and REDUCE_GRAD steps of p.
func countFSDP(p ir.Program) (unshard, reshard, reduce int) {
	for _, steps := range p.Ranks {
		for _, st := range steps {
			switch st.Kind {
			case ir.Unshard:
				unshard++
			case ir.Reshard:
				reshard++
			case ir.ReduceGrad:
				reduce++
			}
		}
	}
	return unshard, reshard, reduce
}

// TestImportFSDP: PyTorch's FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD)
// are kept where the file has them, verified, lowered with the data loads
// and OPT_STEP around them (golden), simulated and emitted; REDUCE_GRAD alone
// verifies too. -drop-fsdp drops them with a note, as import did before
// runtime/pipe ran them.
func TestImportFSDP(t *testing.T) {
	for _, tc := range []struct {
		file, form string
		fsdp       [3]int // UNSHARD, RESHARD, REDUCE_GRAD in the file
		peak       string
	}{
		{"torch_fsdp_1f1b_p2_m4_comms.csv", "with comms", [3]int{2, 2, 2}, "[1 1]"},
		{"torch_reduce_grad_1f1b_p2_m4_comms.csv", "with comms", [3]int{0, 0, 2}, "[0 0]"},
		{"torch_interleaved1f1b_p4_v2_m8_comms.csv", "with comms", [3]int{8, 8, 8}, "[2 2 2 2]"},
		{"fsdp_compute_interleaved_p2_v2_m2.csv", "compute-only", [3]int{4, 4, 4}, "[2 2]"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			im, err := importTorch(path, data, formatTorchCSV, gen.Options{}, false)
			if err != nil {
				t.Fatal(err)
			}
			if u, r, g := countFSDP(im.Result.Program); [3]int{u, r, g} != tc.fsdp {
				t.Errorf("imported program holds %d UNSHARD, %d RESHARD, %d REDUCE_GRAD; want %v (the file's)", u, r, g, tc.fsdp)
			}
			if !strings.HasSuffix(tc.file, "_m8_comms.csv") {
				cliGolden(t, filepath.Join("testdata", strings.TrimSuffix(tc.file, ".csv")+".lowered.txt"), []byte(ir.FormatText(im.Result.Program)))
			}
			out := filepath.Join(mkdirTemp(t, "sched"), "schedule_gen.go")
			code, stdout, stderr := cliRun(t, "import", "-from", "torch-csv", "-table", path, "-o", out)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if want := "(torch-csv, " + tc.form + ")"; !strings.Contains(stdout, want) || !strings.Contains(stdout, "; peak unsharded stages per rank "+tc.peak+"\n") || strings.Contains(stdout, "dropped") {
				t.Errorf("report:\n%s\nwant %s, peak unsharded %s and no note of dropped steps", stdout, want, tc.peak)
			}
			src, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parser.ParseFile(token.NewFileSet(), out, src, 0); err != nil {
				t.Fatalf("emitted Go does not parse: %v", err)
			}
			for i, call := range []string{"Unshard", "Reshard", "ReduceGrad"} {
				if n := bytes.Count(src, []byte("x."+call+"(")); n != tc.fsdp[i] {
					t.Errorf("emitted Go calls x.%s %d times; the file has %d", call, n, tc.fsdp[i])
				}
				kind := []string{"UNSHARD", "RESHARD", "REDUCE_GRAD"}[i]
				if n := len(regexp.MustCompile(`// \d+`+kind+`\n`).FindAll(src, -1)); n != tc.fsdp[i] {
					t.Errorf("emitted table holds %d %s ops; the file has %d", n, kind, tc.fsdp[i])
				}
			}
			if sim := cliMust(t, "sim", "-in", path); !strings.Contains(sim, "makespan ") {
				t.Errorf("sim -in:\n%s", sim)
			}
			// -drop-fsdp: today's import before runtime/pipe ran them.
			code, stdout, stderr = cliRun(t, "import", "-from", "torch-csv", "-drop-fsdp", path)
			n := tc.fsdp[0] + tc.fsdp[1] + tc.fsdp[2]
			if note := "note: dropped " + itoa(n) + " FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD) as -drop-fsdp asks\n"; code != 0 || !strings.Contains(stdout, note) || strings.Contains(stdout, "peak unsharded") {
				t.Errorf("-drop-fsdp: exit %d\n%s%s\nwant %q", code, stdout, stderr, note)
			}
			im, err = importTorch(path, data, formatTorchCSV, gen.Options{}, true)
			if err != nil {
				t.Fatal(err)
			}
			if u, r, g := countFSDP(im.Result.Program); u+r+g != 0 {
				t.Errorf("-drop-fsdp kept %d UNSHARD, %d RESHARD, %d REDUCE_GRAD", u, r, g)
			}
		})
	}
}

// TestImportFSDPRejected: FSDP actions verify rejects fail the import with
// exit 1, verify's diagnosis (rank, the file's step, reason) and a hint at
// -drop-fsdp, which then imports the schedule without them; nothing is
// written. A fault -drop-fsdp cannot mend is reported on the program without
// the FSDP actions.
func TestImportFSDPRejected(t *testing.T) {
	dir := t.TempDir()
	write := func(name, csv string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(csv), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const hint = "; to import the schedule without its FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD), pass -drop-fsdp\n"
	for _, tc := range []struct {
		name, path, diag string
		dropped          string // the error with -drop-fsdp; "" when it imports
	}{
		{
			name: "compute before UNSHARD (with comms)",
			path: "testdata/torch_fsdp_sharded_compute.csv",
			diag: "(torch-csv, with comms): rank 1 step 1 (1F0): stage 1 computes while its parameters are sharded: no UNSHARD of it comes before",
		},
		{
			name: "compute before UNSHARD (compute-only)",
			path: write("co.csv", "0F0,0UNSHARD,0F1,,,0B0,0B1,0REDUCE_GRAD,0RESHARD\n1UNSHARD,,1F0,1B0,1F1,1B1,1REDUCE_GRAD,1RESHARD\n"),
			diag: "(torch-csv, compute-only): compute order: rank 0 step 0 (0F0): stage 0 computes while its parameters are sharded: no UNSHARD of it comes before",
		},
		{
			name: "REDUCE_GRAD before the last backward",
			path: write("early.csv", "0F0,0F1,,,0B0,0REDUCE_GRAD,0B1\n,1F0,1B0,1F1,1B1,1REDUCE_GRAD\n"),
			diag: "(torch-csv, compute-only): compute order: rank 0 step 4 (0B1): stage 0 computes after its REDUCE_GRAD at step 3; reduce after its last backward",
		},
		{
			name: "REDUCE_GRAD missing on one stage",
			path: write("missing.csv", "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1B0,1RECV_F1,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD\n"),
			diag: "(torch-csv, with comms): rank 0 (0REDUCE_GRAD): stage 0 computes on rank 0 but its gradients are never reduced: REDUCE_GRAD 0 after its last backward",
		},
		{
			name:    "a transfer out of order behind the FSDP fault",
			path:    write("both.csv", "0F0,0UNSHARD,0SEND_F1,0F1,0SEND_F0,0RECV_B0,0B0,0RECV_B1,0B1,0RESHARD\n1RECV_F0,1F0,1B0,1RECV_F1,1SEND_B0,1F1,1B1,1SEND_B1\n"),
			diag:    "(torch-csv, with comms): rank 0 step 0 (0F0): stage 0 computes while its parameters are sharded: no UNSHARD of it comes before",
			dropped: "(torch-csv, with comms) without its FSDP actions: rank 0 step 1 (0SEND_F1): 0SEND_F1 needs the output it sends: 0F1 must come earlier on rank 0, but it comes later, at step 2\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "x.go")
			code, stdout, stderr := cliRun(t, "import", "-from", "torch-csv", tc.path, "-o", out)
			if want := "ppgen import: " + tc.path + " " + tc.diag + hint; code != 1 || stdout != "" || stderr != want {
				t.Errorf("import: exit %d stdout %q stderr\n%q\nwant\n%q", code, stdout, stderr, want)
			}
			cliNoFile(t, out)
			code, stdout, stderr = cliRun(t, "import", "-from", "torch-csv", "-drop-fsdp", "-package", "sched", tc.path, "-o", out)
			if tc.dropped != "" {
				if want := "ppgen import: " + tc.path + " " + tc.dropped; code != 1 || stdout != "" || stderr != want {
					t.Errorf("import -drop-fsdp: exit %d stdout %q stderr\n%q\nwant\n%q", code, stdout, stderr, want)
				}
				cliNoFile(t, out)
				return
			}
			if code != 0 || !strings.Contains(stdout, "note: dropped ") {
				t.Errorf("import -drop-fsdp: exit %d\n%s%s", code, stdout, stderr)
			}
		})
	}
}

// TestImportDocs: docs/visual.md shows the current output of the import
// commands it quotes (the lowered Interleaved1F1B with its FSDP actions
// kept, and a rejected FSDP file with and without -drop-fsdp).
func TestImportDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/visual.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"import", "-from", "torch-csv", "cmd/ppgen/testdata/torch_interleaved1f1b_p4_v2_m8_comms.csv"},
		{"import", "-from", "torch-csv", "cmd/ppgen/testdata/torch_fsdp_sharded_compute.csv"},
		{"import", "-from", "torch-csv", "-drop-fsdp", "cmd/ppgen/testdata/torch_fsdp_sharded_compute.csv"},
	} {
		local := append([]string(nil), args...)
		file := local[len(local)-1]
		local[len(local)-1] = strings.TrimPrefix(file, "cmd/ppgen/")
		_, stdout, stderr := cliRun(t, local...)
		out := strings.ReplaceAll(stdout+stderr, local[len(local)-1], file)
		if !bytes.Contains(doc, []byte("$ ppgen "+strings.Join(args, " "))) || !bytes.Contains(doc, []byte(out)) {
			t.Errorf("docs/visual.md does not show `ppgen %s` with its current output:\n%s", strings.Join(args, " "), out)
		}
	}
}

// The dialect names of the tests' tables.
const (
	formatTorchCSV       = "torch-csv"
	formatTorchCSVLegacy = "torch-csv-legacy"
)

// importTorch imports data (named name) in format through gen/torch, as
// `ppgen import` does.
func importTorch(name string, data []byte, format string, opt gen.Options, dropFSDP bool) (torch.Imported, error) {
	d, err := torch.ParseDialect(format)
	if err != nil {
		return torch.Imported{}, err
	}
	return torch.Import(name, bytes.NewReader(data), torch.ImportOptions{Dialect: d, Lower: opt, DropFSDP: dropFSDP})
}

// parseTorchCSV reads data in the current or the legacy dialect.
func parseTorchCSV(data []byte, legacy bool) (ir.Program, error) {
	d := torch.Current
	if legacy {
		d = torch.Legacy
	}
	return torch.Read(bytes.NewReader(data), d)
}

// TestImportNamePrefix: import's -name is gen's (the prefix of every
// declared name); a lower-case one is refused pointing to -schedule-name.
func TestImportNamePrefix(t *testing.T) {
	code, stdout, stderr := cliRun(t, "import", "-from", "torch-csv", "-package", "p", "-name", "Eval", "testdata/custom_3stage_table.csv", "-o", "-")
	if code != 0 || !strings.Contains(stdout, "func EvalRank0(") || !strings.Contains(stdout, "EvalSpec") {
		t.Fatalf("exit %d: -name Eval not applied\nstdout %.600s\nstderr %s", code, stdout, stderr)
	}
	code, _, stderr = cliRun(t, "import", "-from", "torch-csv", "-package", "p", "-name", "mine", "testdata/custom_3stage_table.csv", "-o", "-")
	if code != 2 || !strings.Contains(stderr, `"mine"`) || !strings.Contains(stderr, "-schedule-name") {
		t.Fatalf("exit %d, want 2 naming \"mine\" and -schedule-name; stderr %s", code, stderr)
	}
}
