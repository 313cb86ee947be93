package vet

import (
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/gencmd"
)

var update = flag.Bool("update", false, "rewrite testdata/src/*/schedule_gen.go from the generator and the edits of brokenCases")

// brokenCase is one deliberately broken generated file under testdata/src:
// `ppgen gen -schedule 1f1b -ranks 2 -micro 3 -helper 6` (with -table when
// table is set) in package name, changed by edit, which also places the
// `// want` comments.
type brokenCase struct {
	name  string
	table bool
	edit  func(e *editor)
}

// editor edits a generated file's text.
type editor struct {
	t testing.TB
	s string
}

// replace replaces old, which must occur exactly once.
func (e *editor) replace(old, new string) {
	e.t.Helper()
	if n := strings.Count(e.s, old); n != 1 {
		e.t.Fatalf("%q occurs %d times in the generated file; want once", old, n)
	}
	e.s = strings.Replace(e.s, old, new, 1)
}

// wantAfter appends a want comment to the line that contains marker.
func (e *editor) wantAfter(marker string, res ...string) {
	e.t.Helper()
	i := strings.Index(e.s, marker)
	if i < 0 || strings.Count(e.s, marker) != 1 {
		e.t.Fatalf("%q does not occur exactly once", marker)
	}
	end := i + strings.IndexByte(e.s[i:], '\n')
	e.s = e.s[:end] + want(res...) + e.s[end:]
}

// want renders ` // want "re" "re"...`.
func want(res ...string) string {
	var b strings.Builder
	b.WriteString(" // want")
	for _, re := range res {
		b.WriteString(" " + strconv.Quote(re))
	}
	return b.String()
}

// packed renders the generated call of a step with packed arguments, without its
// comment: packed("RecvF", 1, 1, 0, 1) is "\tx.RecvF(0x0001_0001_0000_0001)".
func packed(method string, stage, micro, c, d int) string {
	f := func(v int) int { return v & 0xffff }
	return fmt.Sprintf("\tx.%s(0x%04x_%04x_%04x_%04x)", method, f(stage), f(micro), f(c), f(d))
}

// q is the regexp that matches call (a packed result) in a diagnostic, which
// follows it with what its pipe.At says in parentheses.
func q(call string) string { return regexp.QuoteMeta(strings.TrimPrefix(call, "\t")) + ` \([^()]*\)` }

// replaceCalls replaces the consecutive lines that start with the calls old
// (packed results; the generated lines go on with a comment) by the lines new.
func (e *editor) replaceCalls(old, new []string) {
	e.t.Helper()
	lines := strings.Split(e.s, "\n")
	found := -1
	for i := 0; i+len(old) <= len(lines); i++ {
		match := true
		for k, o := range old {
			l := lines[i+k]
			match = match && (l == o || strings.HasPrefix(l, o+" "))
		}
		if match {
			if found >= 0 {
				e.t.Fatalf("%q occurs more than once in the generated file", old)
			}
			found = i
		}
	}
	if found < 0 {
		e.t.Fatalf("%q does not occur in the generated file", old)
	}
	lines = append(lines[:found], append(append([]string(nil), new...), lines[found+len(old):]...)...)
	e.s = strings.Join(lines, "\n")
}

// fusedCases are generated with fused calls (the default); the others with
// -fuse=false, one call per step.
var fusedCases = map[string]bool{"fused": true, "fusedsrc": true, "fusedmicro": true}

// batchCases are generated with -batch (BATCH_BEGIN .. BATCH_END around
// adjacent transfers).
var batchCases = map[string]bool{"batchend": true}

var brokenCases = []brokenCase{
	{"valid", false, func(e *editor) {}},
	{"fused", false, func(e *editor) {}},
	{"fusedsrc", false, func(e *editor) {
		// A fused receive whose compute would read another slot.
		e.replaceCalls([]string{packed("RecvAndF", 1, 0, 0, -1)}, []string{packed("RecvAndF", 1, 0, 0, 1)})
		e.wantAfter(packed("RecvAndF", 1, 0, 0, 1), `rank 1 step 2: x.RecvAndF\(0x0001_0000_0000_0001\) \(1F0 slot 0, src slot 1\): src 1, but its input comes from its own slot`)
	}},
	{"fusedmicro", false, func(e *editor) {
		// A fused forward-and-send of micro 2 where micro 1's belongs.
		e.replaceCalls([]string{packed("FAndSend", 0, 1, 1, -1)}, []string{packed("FAndSend", 0, 2, 1, -1)})
		e.wantAfter(packed("FAndSend", 0, 2, 1, -1),
			`rank 0 step 5: x.FAndSend\(0x0000_0002_0001_ffff\) \(0SEND_F2 peer 1, slot 1\) is the 2nd act send from rank 0 to rank 1, but the 2nd act receive on rank 1 is `+q(packed("RecvF", 1, 1, 0, 1)),
			`edited generated code: rank 0 step 4 is `+q(packed("FAndSend", 0, 2, 1, -1))+` where .ppgen gen -helper 6 -micro 3 -ranks 2 -schedule 1f1b. generates `+q(packed("FAndSend", 0, 1, 1, -1)))
	}},
	{"deletedrecv", false, func(e *editor) {
		// Rank 1's receive of micro 1's activation is deleted.
		e.replaceCalls([]string{packed("RecvF", 1, 1, 0, 1)}, nil)
		e.wantAfter(packed("SendF", 0, 1, 1, 1), q(packed("SendF", 0, 1, 1, 1))+` is the 2nd act send from rank 0 to rank 1, but the 2nd act receive on rank 1 is `+q(packed("RecvF", 1, 2, 0, 0))+`, not stage 1 micro 1: sends and receives must pair in the same FIFO order`)
		e.wantAfter(packed("SendB", 1, 0, 0, 0), `edited generated code: rank 1 step 5 is `+q(packed("SendB", 1, 0, 0, 0))+` where .ppgen gen -fuse=false -helper 6 -micro 3 -ranks 2 -schedule 1f1b. generates `+q(packed("RecvF", 1, 1, 0, 1)))
	}},
	{"swappedsends", false, func(e *editor) {
		// Rank 0 sends micro 1's activation before micro 0's.
		e.replaceCalls([]string{packed("SendF", 0, 0, 1, 0), packed("F", 0, 1, 1, -1), packed("SendF", 0, 1, 1, 1)},
			[]string{packed("SendF", 0, 1, 1, 1), packed("F", 0, 1, 1, -1), packed("SendF", 0, 0, 1, 0)})
		e.wantAfter(packed("SendF", 0, 1, 1, 1),
			`rank 0 step 3: `+q(packed("SendF", 0, 1, 1, 1))+` is the 1st act send from rank 0 to rank 1, but the 1st act receive on rank 1 is `+q(packed("RecvF", 1, 0, 0, 0))+`, not stage 1 micro 1`,
			`edited generated code: rank 0 step 3 is `+q(packed("SendF", 0, 1, 1, 1))+` where .* generates `+q(packed("SendF", 0, 0, 1, 0)))
	}},
	{"microsend", false, func(e *editor) {
		// The micro-batch of rank 0's last activation send changed from 2 to 1.
		e.replaceCalls([]string{packed("SendF", 0, 2, 1, 0)}, []string{packed("SendF", 0, 1, 1, 0)})
		e.wantAfter(packed("SendF", 0, 1, 1, 0),
			q(packed("SendF", 0, 1, 1, 0))+` is the 3rd act send from rank 0 to rank 1, but the 3rd act receive on rank 1 is `+q(packed("RecvF", 1, 2, 0, 0))+`, not stage 1 micro 1`,
			`edited generated code: rank 0 step 10 is `+q(packed("SendF", 0, 1, 1, 0))+` where .* generates `+q(packed("SendF", 0, 2, 1, 0)))
	}},
	{"microforward", false, func(e *editor) {
		// Rank 1 runs the forward of micro 2 where it should run micro 1's.
		e.replaceCalls([]string{packed("F", 1, 1, 1, -1)}, []string{packed("F", 1, 2, 1, -1)})
		e.wantAfter(packed("F", 1, 2, 1, -1)+"\n", `edited generated code: rank 1 step 7 is `+q(packed("F", 1, 2, 1, -1))+` where .* generates `+q(packed("F", 1, 1, 1, -1)))
		e.wantAfter(packed("F", 1, 2, 0, -1), `unsafe program: rank 1 step 12 \(1F2\): 1F2 runs twice on this rank \(first at step 7\)`)
	}},
	{"nonconst", false, func(e *editor) {
		// A step argument is a variable (declared in vars.go of the package).
		e.replaceCalls([]string{packed("F", 0, 1, 1, -1)}, []string{"\tx.F(pipe.At(micro))"})
		e.wantAfter("\tx.F(pipe.At(micro))\n", `rank 0 step 4: the argument of x.F\(pipe.At\(micro\)\) is pipe.At\(micro\), not a pipe.At constant`)
	}},
	{"missingrank", false, func(e *editor) {
		// Rank 1 dropped from the rank table.
		e.replace("error{Rank0, Rank1}\n", "error{Rank0}\n")
		e.wantAfter("error{Rank0}", `rank table has no entry for rank 1 \(Spec.Ranks is 2\)`)
	}},
	{"duplicaterank", false, func(e *editor) {
		e.replace("error{Rank0, Rank1}\n", "error{Rank0, Rank0}\n")
		e.wantAfter("error{Rank0, Rank0}", `rank table lists Rank0 twice`, `rank table has no entry for rank 1`)
	}},
	{"fingerprint", false, func(e *editor) {
		// The Fingerprint constant itself edited (its last hex digit).
		i := strings.Index(e.s, `const Fingerprint = "sha256:`)
		j := i + strings.IndexByte(e.s[i:], '\n') - 2
		digit := byte('0')
		if e.s[j] == '0' {
			digit = '1'
		}
		e.s = e.s[:j] + string(digit) + e.s[j+1:]
		e.wantAfter("const Fingerprint = ", `edited generated code: the rank functions hash to sha256:[0-9a-f]{64}, not to this Fingerprint \(the calls and Spec are as generated, so the constant itself was edited\)`)
	}},
	{"noinvocation", false, func(e *editor) {
		// The header records no invocation, and a slot was edited: the edit
		// is reported at the Fingerprint constant.
		e.replace("// ppgen gen -fuse=false -helper 6 -micro 3 -ranks 2 -schedule 1f1b\n", "")
		e.replaceCalls([]string{packed("DataLoad", 0, 2, 0, -1)}, []string{packed("DataLoad", 0, 2, 1, -1)})
		e.wantAfter(packed("F", 0, 2, 0, -1), `unsafe program: rank 0 step 9 \(0F2\): 0F2 uses slot 0, but its chunk \(stage 0, micro 2\) has slot 1 since step 8`)
		e.wantAfter("const Fingerprint = ", `edited generated code: the rank functions hash to sha256:[0-9a-f]{64}, not to this Fingerprint \(the edited line is unknown: .*the header records no invocation to regenerate from\)`)
	}},
	{"loop", false, func(e *editor) {
		e.replaceCalls([]string{packed("DataLoad", 1, 0, 0, -1)}, []string{"\tfor i := 0; i < 1; i++ {", packed("DataLoad", 1, 0, 0, -1), "\t}"})
		e.wantAfter("\tfor i := 0; i < 1; i++ {", `rank 1: rank1Part0 holds a loop; generated rank functions are straight-line runtime calls`)
	}},
	{"src", false, func(e *editor) {
		e.replaceCalls([]string{packed("B", 0, 0, 0, -1)}, []string{packed("B", 0, 0, 0, 1)})
		e.wantAfter(packed("B", 0, 0, 0, 1), `rank 0 step 7: `+q(packed("B", 0, 0, 0, 1))+`: src 1, but its input comes from its own slot`)
	}},
	{"deadlock", false, func(e *editor) {
		// Rank 1 posts the receive of micro 2 before it sends micro 0's
		// gradient: each channel keeps its FIFO order, but rank 0 sends
		// micro 2 only after it got that gradient.
		e.replaceCalls([]string{packed("DataLoad", 1, 2, 0, -1), packed("RecvF", 1, 2, 0, 0)}, []string{packed("DataLoad", 1, 2, 0, -1)})
		e.replaceCalls([]string{packed("SendB", 1, 0, 0, 0)}, []string{packed("RecvF", 1, 2, 0, 0), packed("SendB", 1, 0, 0, 0)})
		e.wantAfter(packed("RecvF", 1, 2, 0, 0), `edited generated code: rank 1 step 6 is `+q(packed("RecvF", 1, 2, 0, 0)))
		e.wantAfter(packed("RecvB", 0, 0, 1, 0), `unsafe program: deadlock: rank 0 at step 6 0RECV_B0 waits for rank 1; rank 1 at step 6 1RECV_F2 waits for rank 0`)
	}},
	{"batchend", false, func(e *editor) {
		// The BATCH_END of rank 0's first batch deleted: its B runs
		// inside the batch, waiting for a receive posted only at a
		// BATCH_END that never comes.
		e.replaceCalls([]string{"\tx.BatchEnd()", packed("B", 0, 0, 0, -1)}, []string{packed("B", 0, 0, 0, -1)})
		e.wantAfter(packed("B", 0, 0, 0, -1), `edited generated code: rank 0 step 8 is `+q(packed("B", 0, 0, 0, -1))+` where .* generates x\.BatchEnd\(\)`,
			`unsafe program: rank 0 step 8 \(0B0\): B inside the batch that step 5 opened; a batch holds only transfers`)
	}},
	{"noguard", false, func(e *editor) {
		e.replace("// This guard breaks the build when runtime/pipe no longer supports this generated code.\nconst _ = pipe."+abi.VersionGuard+"\n\n", "")
		e.wantAfter("package noguard", `the runtime API guard .const _ = pipe.SupportPackageIsVersionN. is missing`)
	}},
	{"tablerow", true, func(e *editor) {
		// The interpreter table disagrees with the rank functions.
		e.replace("\t\t0x0000_0001_0001_ffff, // 0B1 slot 1\n", "\t\t0x0000_0001_0000_ffff, // 0B1 slot 1\n")
		e.wantAfter("\t\t0x0000_0001_0000_ffff, // 0B1 slot 1", `Program\[0\]\[12\] is \{OpBackward 0 1 -1 0 -1\} but rank 0.s function runs \{OpBackward 0 1 -1 1 -1\} there`)
	}},
}

func brokenNames() []string {
	var names []string
	for _, c := range brokenCases {
		names = append(names, c.name)
	}
	return names
}

// TestBrokenFilesFresh keeps testdata/src in step with the generator: each
// file is the generator's output with its case's edit (-update rewrites
// them).
func TestBrokenFilesFresh(t *testing.T) {
	for _, c := range brokenCases {
		args := []string{"-schedule", "1f1b", "-ranks", "2", "-micro", "3", "-helper", "6"}
		if !fusedCases[c.name] {
			args = append(args, "-fuse=false")
		}
		if c.table {
			args = append(args, "-table")
		}
		if batchCases[c.name] {
			args = append(args, "-batch")
		}
		req, err := gencmd.Parse(args, gencmd.Env{Package: c.name})
		if err != nil {
			t.Fatal(err)
		}
		src, _, err := req.Generate()
		if err != nil {
			t.Fatal(err)
		}
		e := &editor{t: t, s: string(src)}
		c.edit(e)
		if formatted, err := format.Source([]byte(e.s)); err == nil {
			e.s = string(formatted) // gofmt-clean, as generated files are
		}
		path := filepath.Join("testdata", "src", c.name, "schedule_gen.go")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(e.s), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(path)
		if err != nil || string(have) != e.s {
			t.Errorf("%s is not the generator's output with the %s edit (the generator changed?); rerun `go test ./gen/vet -run TestBrokenFilesFresh -update` and review the diff (%v)", path, c.name, err)
		}
	}
}

// TestBrokenCasesListed keeps brokenCases and testdata/src in step.
func TestBrokenCasesListed(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("testdata", "src"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, c := range brokenNames() {
		listed[c] = true
	}
	for _, e := range entries {
		if e.IsDir() && !listed[e.Name()] && e.Name() != "github.com" {
			t.Errorf("testdata/src/%s is not in brokenCases", e.Name())
		}
	}
}
