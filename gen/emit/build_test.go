package emit

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// lower1F1B builds a lowered 1F1B program on P ranks (stage r on rank r) with
// M micro-batches the way gen/passes lays one out: a data load before the F of
// stage 0 (input) and of the last stage (labels), each RECV right before its
// consumer, each SEND right after its producer, an OPT_STEP at the end, and
// slots assigned lowest-free-first over each chunk's lifetime.
func lower1F1B(P, M int) ir.Program {
	p := ir.NewProgram(ir.Loop(P, 1), M)
	for r := range P {
		s := r
		var steps []ir.Step
		fwd := func(m int) {
			if s > 0 {
				steps = append(steps, ir.Comm(ir.RecvF, s, m, r-1))
			}
			if s == 0 || s == P-1 {
				steps = append(steps, ir.Compute(ir.DataLoad, s, m))
			}
			steps = append(steps, ir.Compute(ir.Forward, s, m))
			if s < P-1 {
				steps = append(steps, ir.Comm(ir.SendF, s, m, r+1))
			}
		}
		bwd := func(m int) {
			if s < P-1 {
				steps = append(steps, ir.Comm(ir.RecvB, s, m, r+1))
			}
			steps = append(steps, ir.Compute(ir.Backward, s, m))
			if s > 0 {
				steps = append(steps, ir.Comm(ir.SendB, s, m, r-1))
			}
		}
		warm := min(P-1-r, M)
		for m := range warm {
			fwd(m)
		}
		for m := range M - warm {
			fwd(warm + m)
			bwd(m)
		}
		for m := M - warm; m < M; m++ {
			bwd(m)
		}
		steps = append(steps, ir.Step{Kind: ir.OptStep, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None})
		assignSlots(steps)
		p.Ranks[r] = steps
	}
	return p
}

// assignSlots gives every chunk the lowest slot free over its lifetime (its
// first to its last step).
func assignSlots(steps []ir.Step) {
	type chunk struct{ stage, micro int }
	last := map[chunk]int{}
	for i, st := range steps {
		if st.Micro >= 0 {
			last[chunk{st.Stage, st.Micro}] = i
		}
	}
	slot := map[chunk]int{}
	var used []bool
	for i := range steps {
		st := &steps[i]
		if st.Micro < 0 {
			continue
		}
		c := chunk{st.Stage, st.Micro}
		k, ok := slot[c]
		if !ok {
			for k = 0; k < len(used) && used[k]; k++ {
			}
			if k == len(used) {
				used = append(used, false)
			}
			used[k] = true
			slot[c] = k
		}
		st.Slot = k
		if last[c] == i {
			used[k] = false
		}
	}
}

// testCase is one golden case: a lowered program and the options to emit it.
type testCase struct {
	prog ir.Program
	opt  Options
}

// readCase reads testdata/<name>/input.txt: "key: value" option lines
// (package, schedule, invocation, helper, table, slots), then the program in
// ir text form where each step carries its slot as "@slot" (0F1@2; OPT_STEP
// has none). Blank lines and '#' lines are skipped.
func readCase(path string) (testCase, error) {
	fh, err := os.Open(path)
	if err != nil {
		return testCase{}, err
	}
	defer fh.Close()
	var tc testCase
	var rows [][]ir.Step
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			return testCase{}, fmt.Errorf("%s:%d: want key: value", path, n)
		}
		val = strings.TrimSpace(val)
		switch {
		case key == "package":
			tc.opt.Package = val
		case key == "schedule":
			tc.opt.Schedule = val
		case key == "invocation":
			tc.opt.Invocation = val
		case key == "prefix":
			tc.opt.Prefix = val
		case key == "helper":
			tc.opt.HelperSize, err = strconv.Atoi(val)
		case key == "table":
			tc.opt.Table, err = strconv.ParseBool(val)
		case key == "slots":
			for _, f := range strings.Fields(val) {
				var k int
				k, err = strconv.Atoi(f)
				tc.opt.Slots = append(tc.opt.Slots, k)
			}
		case strings.HasPrefix(key, "rank "):
			var steps []ir.Step
			for _, f := range strings.Fields(val) {
				st, perr := parseSlotted(f)
				if perr != nil {
					return testCase{}, fmt.Errorf("%s:%d: %v", path, n, perr)
				}
				steps = append(steps, st)
			}
			rows = append(rows, steps)
		default:
			return testCase{}, fmt.Errorf("%s:%d: unknown key %q", path, n, key)
		}
		if err != nil {
			return testCase{}, fmt.Errorf("%s:%d: %v", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return testCase{}, err
	}
	tc.prog, err = ir.Infer(rows)
	if err != nil {
		return testCase{}, fmt.Errorf("%s: %v", path, err)
	}
	return tc, nil
}

// parseSlotted parses one step of readCase's format: ir text with "@slot"
// after the step, or after each sub-step of an overlap, as in
// "(0F3@3;3I1@4)OVERLAP_F_B".
func parseSlotted(f string) (ir.Step, error) {
	texts, slots := []string{f}, []string{""}
	end := strings.IndexByte(f, ')')
	if strings.HasPrefix(f, "(") && end > 0 {
		texts = strings.Split(f[1:end], ";")
		slots = make([]string, len(texts))
	}
	for k, t := range texts {
		texts[k], slots[k], _ = strings.Cut(t, "@")
	}
	text := texts[0]
	if len(texts) > 1 || strings.HasPrefix(f, "(") {
		text = "(" + strings.Join(texts, ";") + f[end:]
	}
	st, err := ir.ParseStep(text)
	if err != nil {
		return st, err
	}
	parts := []*ir.Step{&st}
	if st.Kind.IsOverlap() {
		parts = []*ir.Step{&st.Sub[0], &st.Sub[1]}
	}
	for k, s := range slots {
		if s == "" || k >= len(parts) {
			continue
		}
		if parts[k].Slot, err = strconv.Atoi(s); err != nil {
			return st, fmt.Errorf("%q: slot %q: %v", f, s, err)
		}
	}
	return st, nil
}

// formatSlotted writes the rank lines of readCase's format.
func formatSlotted(p ir.Program) string {
	var b strings.Builder
	for r, steps := range p.Ranks {
		fmt.Fprintf(&b, "rank %d:", r)
		for _, st := range steps {
			if st.Kind.IsOverlap() && len(st.Sub) == 2 {
				fmt.Fprintf(&b, " (%s@%d;%s@%d)%s", st.Sub[0], st.Sub[0].Slot, st.Sub[1], st.Sub[1].Slot, st.Kind)
				continue
			}
			b.WriteString(" " + st.String())
			if st.Slot >= 0 {
				b.WriteString("@" + strconv.Itoa(st.Slot))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
