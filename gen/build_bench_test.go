package gen

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
)

// buildCase is one generated file whose `go build` BenchmarkGoBuildGenerated
// times.
type buildCase struct {
	name   string
	cfg    ir.Config
	table  bool // also emit the Program table (the catalog packages carry one)
	noFuse bool // one call per step (ppgen gen -fuse=false)
	// helpers are the helper sizes to emit with (0: emit.DefaultHelperSize).
	helpers []int
}

// BenchmarkGoBuildGenerated measures what `go build` costs per emitted step:
// the compile of one generated package against an already built
// runtime/pipe. Each case is generated once (gen.Lower + gen.Emit, outside the
// timer); every iteration writes the file, with a comment that no earlier
// build can have seen (so the build cache cannot serve it), into a fresh
// package directory under gen/testdata (inside the module, ignored by ./...
// patterns, removed at the end) and times `go build` of that directory.
//
// Cases: a baseline package holding only the runtime/pipe version guard (the
// fixed cost of a `go build`); the two largest P=4, M=8 catalog entries,
// regenerated with the catalog's configuration (interleaved V=2 and zbv, both
// with -table); interleaved P=64, V=2, M=256 (about 200k steps) with helper
// sizes 50, 100 (the default) and 400, plus the default helper size with
// -table and with -fuse=false (one call per step).
//
// Metrics: ns/step (wall time of `go build` over the emitted steps);
// cpu-ns/step and cpu-s/op (user + system time of the go command and the
// compiler it ran: less sensitive than wall time to other load on a shared
// machine, and larger than it when the compiler's backend runs in parallel);
// steps; src-KiB (size of the generated file); peak-RSS-MiB (the largest
// resident set of the go command or the compiler, from the child's rusage,
// where the platform reports one). Skipped under -short: it runs the go
// command.
//
//	go test -run '^$' -bench GoBuildGenerated -benchtime 1x -count 3 -timeout 60m ./gen/
func BenchmarkGoBuildGenerated(b *testing.B) {
	if testing.Short() {
		b.Skip("skipped in -short mode: runs the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		b.Skip("go command not found")
	}
	// Warm the build cache with the generated code's dependencies, so that
	// only the generated package is compiled in the timed builds.
	if out, err := exec.Command(gobin, "build", emit.PipePath).CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", emit.PipePath, err, out)
	}
	madeTestdata := false
	if _, err := os.Stat("testdata"); os.IsNotExist(err) {
		if err := os.Mkdir("testdata", 0o755); err != nil {
			b.Fatal(err)
		}
		madeTestdata = true
	}
	b.Cleanup(func() {
		if madeTestdata {
			os.Remove("testdata") // only when empty: never removes what others put there
		}
	})

	cases := []buildCase{
		{name: "catalog/interleaved/P=4/V=2/M=8", cfg: ir.Config{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8}, table: true},
		{name: "catalog/zbv/P=4/M=8", cfg: ir.Config{Schedule: "zbv", Ranks: 4, Micro: 8}, table: true},
		{name: "interleaved/P=64/V=2/M=256", cfg: ir.Config{Schedule: "interleaved", Ranks: 64, Virtual: 2, Micro: 256}, helpers: []int{50, 100, 400}},
		{name: "interleaved/P=64/V=2/M=256/table", cfg: ir.Config{Schedule: "interleaved", Ranks: 64, Virtual: 2, Micro: 256}, table: true, helpers: []int{100}},
		{name: "interleaved/P=64/V=2/M=256/nofuse", cfg: ir.Config{Schedule: "interleaved", Ranks: 64, Virtual: 2, Micro: 256}, noFuse: true, helpers: []int{100}},
	}
	// The fixed cost of `go build` (go command start, package loading, a
	// compile of a package that only imports runtime/pipe) for comparison.
	baseline := []byte("package buildbench\n\nimport pipe \"" + emit.PipePath + "\"\n\nconst _ = pipe." + abi.VersionGuard + "\n")
	b.Run("baseline/guard-only", func(b *testing.B) { benchGoBuild(b, gobin, baseline, 0) })
	lowered := map[string]Result{} // by config, shared by a case's helper sizes
	for _, c := range cases {
		helpers := c.helpers
		if helpers == nil {
			helpers = []int{0}
		}
		for _, h := range helpers {
			name := c.name
			if c.helpers != nil {
				name += "/helper=" + strconv.Itoa(h)
			}
			b.Run(name, func(b *testing.B) {
				// Generated here, not before b.Run, so that a -bench filter
				// skips the lowering of the cases it leaves out; b.Loop starts
				// the timer afterwards.
				key := fmt.Sprint(c.cfg)
				res, ok := lowered[key]
				if !ok {
					var err error
					if res, err = Lower(c.cfg, Options{}); err != nil {
						b.Fatal(err)
					}
					lowered[key] = res
				}
				src, err := Emit(res, emit.Options{Package: "buildbench", Schedule: res.Config.Schedule, HelperSize: h, Table: c.table, NoFuse: c.noFuse,
					Invocation: "BenchmarkGoBuildGenerated " + name})
				if err != nil {
					b.Fatal(err)
				}
				benchGoBuild(b, gobin, src, res.Program.NumSteps())
			})
		}
	}
}

// benchGoBuild times `go build` of src as a fresh package under testdata.
func benchGoBuild(b *testing.B, gobin string, src []byte, steps int) {
	dir, err := os.MkdirTemp("testdata", "buildbench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "schedule_gen.go")
	pkg := "./" + filepath.ToSlash(dir)
	// The nonce makes every iteration's file new to the build cache, across
	// runs too; it only ever lands in a comment.
	nonce := time.Now().UnixNano()
	var peakKiB int64
	var cpu time.Duration // user + system time of the go command and its children
	i := 0
	for b.Loop() {
		b.StopTimer()
		body := fmt.Appendf(append([]byte(nil), src...), "\n// buildbench nonce %d-%d: defeats the build cache.\n", nonce, i)
		i++
		if err := os.WriteFile(file, body, 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(gobin, "build", pkg)
		b.StartTimer()
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
		peakKiB = max(peakKiB, maxRSSKiB(cmd.ProcessState))
		cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	if steps > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(steps), "ns/step")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(steps), "cpu-ns/step")
		b.ReportMetric(float64(steps), "steps")
	}
	b.ReportMetric(float64(len(src))/1024, "src-KiB")
	if peakKiB > 0 {
		b.ReportMetric(float64(peakKiB)/1024, "peak-RSS-MiB")
	}
}

// maxRSSKiB returns the peak resident set of a finished child in KiB, or 0
// where the platform does not report it. On Linux the rusage of a reaped
// child covers its own reaped children, so for `go build` it is the larger of
// the go command and the compile it ran. (Reflection keeps this file free of
// per-OS syscall types.)
func maxRSSKiB(ps *os.ProcessState) int64 {
	if ps == nil || runtime.GOOS != "linux" {
		return 0 // the unit of Maxrss differs elsewhere (bytes on darwin)
	}
	v := reflect.ValueOf(ps.SysUsage())
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return 0
	}
	f := v.Elem().FieldByName("Maxrss")
	if !f.IsValid() || !f.CanInt() {
		return 0
	}
	return f.Int()
}
