package vet

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/internal/gencmd"
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

var brokenCases = []brokenCase{
	{"valid", false, func(e *editor) {}},
	{"deletedrecv", false, func(e *editor) {
		// Rank 1's receive of micro 1's activation is deleted.
		e.replace("\tx.RecvAct(1, 1, 0, 1)\n", "")
		e.wantAfter("\tx.SendAct(0, 1, 1, 1)\n", `x.SendAct\(0, 1, 1, 1\) is the 2nd act send from rank 0 to rank 1, but the 2nd act receive on rank 1 is x.RecvAct\(1, 2, 0, 0\), not stage 1 micro 1: sends and receives must pair in the same FIFO order`)
		e.wantAfter("\tx.SendGrad(1, 0, 0, 0)\n", `edited generated code: rank 1 step 5 is x.SendGrad\(1, 0, 0, 0\) where .ppgen gen -helper 6 -micro 3 -ranks 2 -schedule 1f1b. generates x.RecvAct\(1, 1, 0, 1\)`)
	}},
	{"swappedsends", false, func(e *editor) {
		// Rank 0 sends micro 1's activation before micro 0's.
		e.replace("\tx.SendAct(0, 0, 1, 0)\n\tx.Forward(0, 1, 1, -1)\n\tx.SendAct(0, 1, 1, 1)\n", "\tx.SendAct(0, 1, 1, 1)\n\tx.Forward(0, 1, 1, -1)\n\tx.SendAct(0, 0, 1, 0)\n")
		e.wantAfter("\tx.SendAct(0, 1, 1, 1)\n",
			`rank 0 step 3: x.SendAct\(0, 1, 1, 1\) is the 1st act send from rank 0 to rank 1, but the 1st act receive on rank 1 is x.RecvAct\(1, 0, 0, 0\), not stage 1 micro 1`,
			`edited generated code: rank 0 step 3 is x.SendAct\(0, 1, 1, 1\) where .* generates x.SendAct\(0, 0, 1, 0\)`)
	}},
	{"microsend", false, func(e *editor) {
		// The micro-batch of rank 0's last activation send changed from 2 to 1.
		e.replace("\tx.SendAct(0, 2, 1, 0)\n", "\tx.SendAct(0, 1, 1, 0)\n")
		e.wantAfter("\tx.SendAct(0, 1, 1, 0)\n",
			`x.SendAct\(0, 1, 1, 0\) is the 3rd act send from rank 0 to rank 1, but the 3rd act receive on rank 1 is x.RecvAct\(1, 2, 0, 0\), not stage 1 micro 1`,
			`edited generated code: rank 0 step 10 is x.SendAct\(0, 1, 1, 0\) where .* generates x.SendAct\(0, 2, 1, 0\)`)
	}},
	{"microforward", false, func(e *editor) {
		// Rank 1 runs the forward of micro 2 where it should run micro 1's.
		e.replace("\tx.Forward(1, 1, 1, -1)\n", "\tx.Forward(1, 2, 1, -1)\n")
		e.wantAfter("\tx.Forward(1, 2, 1, -1)\n", `edited generated code: rank 1 step 7 is x.Forward\(1, 2, 1, -1\) where .* generates x.Forward\(1, 1, 1, -1\)`)
		e.wantAfter("\tx.Forward(1, 2, 0, -1)\n", `unsafe program: rank 1 step 12 \(1F2\): 1F2 runs twice on this rank \(first at step 7\)`)
	}},
	{"nonconst", false, func(e *editor) {
		// A step argument is a variable (declared in vars.go of the package).
		e.replace("\tx.Forward(0, 1, 1, -1)\n", "\tx.Forward(0, micro, 1, -1)\n")
		e.wantAfter("\tx.Forward(0, micro, 1, -1)\n", `rank 0 step 4: argument micro of x.Forward\(0, micro, 1, -1\) is micro, not a constant`)
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
		e.replace("// ppgen gen -helper 6 -micro 3 -ranks 2 -schedule 1f1b\n", "")
		e.replace("\tx.DataLoad(0, 2, 0)\n", "\tx.DataLoad(0, 2, 1)\n")
		e.wantAfter("\tx.Forward(0, 2, 0, -1)\n", `unsafe program: rank 0 step 9 \(0F2\): 0F2 uses slot 0, but its chunk \(stage 0, micro 2\) has slot 1 since step 8`)
		e.wantAfter("const Fingerprint = ", `edited generated code: the rank functions hash to sha256:[0-9a-f]{64}, not to this Fingerprint \(the edited line is unknown: .*the header records no invocation to regenerate from\)`)
	}},
	{"loop", false, func(e *editor) {
		e.replace("\tx.DataLoad(1, 0, 0)\n", "\tfor i := 0; i < 1; i++ {\n\t\tx.DataLoad(1, 0, 0)\n\t}\n")
		e.wantAfter("\tfor i := 0; i < 1; i++ {", `rank 1: rank1Part0 holds a loop; generated rank functions are straight-line runtime calls`)
	}},
	{"src", false, func(e *editor) {
		e.replace("\tx.Backward(0, 0, 0, -1)\n", "\tx.Backward(0, 0, 0, 1)\n")
		e.wantAfter("\tx.Backward(0, 0, 0, 1)\n", `rank 0 step 7: x.Backward\(0, 0, 0, 1\): src 1, but its input comes from its own slot`)
	}},
	{"deadlock", false, func(e *editor) {
		// Rank 1 posts the receive of micro 2 before it sends micro 0's
		// gradient: each channel keeps its FIFO order, but rank 0 sends
		// micro 2 only after it got that gradient.
		e.replace("\tx.DataLoad(1, 2, 0)\n\tx.RecvAct(1, 2, 0, 0)\n", "\tx.DataLoad(1, 2, 0)\n")
		e.replace("\tx.SendGrad(1, 0, 0, 0)\n", "\tx.RecvAct(1, 2, 0, 0)\n\tx.SendGrad(1, 0, 0, 0)\n")
		e.wantAfter("\tx.RecvAct(1, 2, 0, 0)\n", `edited generated code: rank 1 step 6 is x.RecvAct\(1, 2, 0, 0\)`)
		e.wantAfter("\tx.RecvGrad(0, 0, 1, 0)\n", `unsafe program: deadlock: rank 0 at step 6 0RECV_B0 waits for rank 1; rank 1 at step 6 1RECV_F2 waits for rank 0`)
	}},
	{"noguard", false, func(e *editor) {
		e.replace("// This guard breaks the build when runtime/pipe no longer supports this generated code.\nconst _ = pipe.SupportPackageIsVersion1\n\n", "")
		e.wantAfter("package noguard", `the runtime API guard .const _ = pipe.SupportPackageIsVersionN. is missing`)
	}},
	{"tablerow", true, func(e *editor) {
		// The interpreter table disagrees with the rank functions.
		e.replace("{Kind: pipe.OpBackward, Stage: 0, Micro: 1, Peer: -1, Slot: 1, Src: -1},", "{Kind: pipe.OpBackward, Stage: 0, Micro: 1, Peer: -1, Slot: 0, Src: -1},")
		e.wantAfter("{Kind: pipe.OpBackward, Stage: 0, Micro: 1, Peer: -1, Slot: 0, Src: -1},", `Program\[0\]\[12\] is \{OpBackward 0 1 -1 0 -1\} but rank 0.s function runs \{OpBackward 0 1 -1 1 -1\} there`)
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
		if c.table {
			args = append(args, "-table")
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
