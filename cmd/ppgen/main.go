// Command ppgen compiles pipeline-parallel training schedules ahead of time.
//
// It computes the exec order of every rank for a schedule family, lowers it
// with data loads, transfers and buffer slots, proves it deadlock-free under
// rendezvous semantics, simulates it, and emits Go source: one straight-line
// function per rank that links against github.com/ppgen/ppgen/runtime/pipe.
//
// Usage:
//
//	ppgen <command> [flags]
//
// Commands:
//
//	list      schedule families and their constraints
//	show      print the lowered program (or -compute-only order) as text or CSV
//	verify    prove a schedule safe; exit 1 with the diagnosis when it is not
//	sim       simulate with a cost model: makespan, bubbles, busy time, peak memory
//	partition split a -model's layers into a schedule's stages for the least makespan
//	gen       verify, then write the Go source of a schedule
//	diff      diff generated files with what ppgen generates now (exit 1 when they differ)
//	check     fail when generated files are stale, edited or unsafe (writes nothing)
//	vet       analyze generated files: send/receive matching, constants, fingerprint
//	trace     simulate and write a Chrome trace (Perfetto, chrome://tracing)
//	import    read a schedule from PyTorch's CSV, verify it, optionally emit Go
//	export    write a schedule in PyTorch's CSV form
//	launch    start N local processes of a command as the ranks of one job
//	template  write a SLURM script or Kubernetes Job for a trainer
//	report    write an HTML page about a schedule: verification, simulation, timeline, program
//	tune      fit a model description (-model FILE) to a measured timeline
//	checkpoint inspect a checkpoint (verify its shards) or convert it to another layout
//	version   print the module version, VCS revision and Go version (also ppgen -version)
//
// ppgen NAME -h (or ppgen help NAME) prints a command's usage line, what it
// does and its flags, on stdout.
//
// Schedule flags, the same for every command that takes a schedule:
//
//	-schedule NAME     family (see `ppgen list`), or auto: the fastest family and
//	                   V under -cost whose activation memory fits -mem;
//	                   PyTorch's and torchtitan's names (GPipe, 1F1B,
//	                   Interleaved1F1B, LoopedBFS, InterleavedZeroBubble,
//	                   ZBVZeroBubble, DualPipeV; any case, with or without
//	                   the Schedule prefix) name the same families
//	-mem X             auto: activation memory limit (micro-batches of a
//	                   rank's share of the model; 0: none)
//	-cost MODEL        auto: the cost model it chooses by (sim and trace: the
//	                   cost model they simulate, used by auto too)
//	-model FILE        a model description (docs/model.md; ppgen tune fits
//	                   one) whose layers give the per-stage costs: auto's
//	                   candidates' in any command, what sim, trace, report
//	                   and partition simulate, and gen's Spec.Layers; -mem is
//	                   then each rank's peak activations plus params
//	-partition P       with -model: even (default) or auto (gen/partition's
//	                   split for the schedule's order; auto tries both)
//	-fsdp N            add UNSHARD/RESHARD/REDUCE_GRAD, at most N stages
//	                   unsharded per rank at once
//	-fsdp-prefetch K   with -fsdp: issue each UNSHARD up to K compute steps
//	                   before the step that needs it, as the window allows
//	                   (sim runs it on an FSDP stream, behind that compute)
//	-swap N            swap out the activations of chunks whose forward and
//	                   backward are at least N compute steps apart; -swap
//	                   auto: -schedule auto -mem X chooses N per candidate,
//	                   beside its recompute policies (priced by -cost swap=)
//	-ship-labels       load labels with the input on the first stage's rank
//	                   and ship them along the pipe (DATA_SEND/DATA_RECV)
//	-batch             merge each run of adjacent transfers of a rank into
//	                   one batch (BATCH_BEGIN .. BATCH_END) issued as one group
//	-tie A:B           stages A and B share a parameter (repeatable, or a list
//	                   0:7,1:6): TIE_GRAD sums their gradients before OPT_STEP
//	-ranks P           pipeline ranks
//	-virtual V         virtual stages per rank (0: the family's default)
//	-micro M           micro-batches per iteration
//	-placement X       loop, v, or a stage->rank table such as 1,0,3,2: gpipe
//	                   and 1f1b take any table of one stage per rank, the
//	                   other families only their own placement
//	-less-memory       interleaved: smaller warm-up
//	-split             split B into I and W
//	-overlap           pair a backward with the next forward
//	-dxdw-in-overlap   run the paired backward as I then W
//	-comm-order O      timed (default: by the cost model's ideal timeline),
//	                   late (receives hoisted only as rendezvous demands) or
//	                   eager (each receive as early as its producer allows,
//	                   modelled on PyTorch's _add_send_recv; equal to
//	                   PyTorch's own lowering for GPipe only)
//	-in FILE           (verify, sim, show, gen) read a schedule from a CSV in
//	                   PyTorch's form, or from ppgen's text form, instead
//
// show:   -compute-only  print only F, B, I, W steps; -format text|csv
//
// sim:    -cost F=1,B=2,W=1,comm=0 (B is the full backward, B = I + W: of B,
// I and W a key not given is derived from the other two, with defaults B=2,
// W=1, and all three given must agree; per-stage lists like F=1:1:1:1.4;
// other keys data, overlap, unshard, reduce, opt, swap;
// act=SIZE[:SIZE...],bw=RATE make each
// activation or gradient transfer take comm + size/bw; param=SIZE[:SIZE...]
// and dp=N (with bw) add to each UNSHARD and REDUCE_GRAD the ring cost of
// its all-gather or reduce-scatter over N ranks, (N-1)·comm + (N-1)/N ·
// size/bw), -json (one object: schedule and virtual, for auto the family
// and V it chose, then makespan, bubble, bubble_span, peak_activations,
// busy, lower_bound), -grid,
// -svg FILE (an SVG timeline: one lane per rank, boxes coloured by kind with
// their micro-batch, idle time, a legend and a title with P, V, M, bubbles and
// peak activations; -svg-width PIXELS), -compare LIST (one table of makespan,
// both bubbles and peak activations for each family of a comma-separated list
// such as 1f1b,interleaved:4,zbv at the same -ranks and -micro; the cost is
// one rank's share of the model, each of a family's V stages per rank costing
// 1/V of it; with -svg the timelines are stacked on one time scale, with
// -json it is an array). docs/visual.md shows the outputs.
//
// trace:  ppgen trace (-schedule ... | -in FILE) [-cost ...] [-o FILE.json]
// writes the Chrome trace-event JSON of the simulation (stdout without -o):
// a process per rank with threads compute, comm and swap (and fsdp, the
// all-gathers of UNSHARD, when the program has them), a complete event
// per step with its simulated times (one cost unit = 1 ms), a flow arrow
// from each send to its receive; otherData holds the summary, the cost, the
// command line and the schedule (for auto, the family it chose). It loads in
// ui.perfetto.dev and chrome://tracing.
//
// import: ppgen import -from torch-csv FILE [-o out.go -package P -name PREFIX
// -schedule-name N -table -helper N -max-activations N -drop-fsdp] reads a schedule in the CSV
// form that torch.distributed.pipelining dumps and loads (_dump_csv /
// _load_csv; - for stdin), compute-only or with PyTorch's transfers, verifies
// it (exit 1 with the diagnosis when unsafe, e.g. receives that deadlock under
// rendezvous) and with -o emits its Go source. A file with transfers gets the
// DATA_LOAD and OPT_STEP steps PyTorch leaves implicit. Its FSDP actions
// (UNSHARD, RESHARD, REDUCE_GRAD) are kept where the file has them and
// verified (a stage computes only while unsharded; one REDUCE_GRAD after its
// last backward; REDUCE_GRAD alone is fine); runtime/pipe runs them through
// pipe.Sharded. -drop-fsdp drops them instead (for FSDP actions verify
// rejects, or stages that are not sharded). -from torch-csv-legacy reads
// PyTorch 2.4 to 2.6 names (BW = full backward, B = input gradient when the
// chunk has a W).
//
// export: ppgen export -to torch-csv (-schedule ... | -in FILE)
// [-compute-only] [-no-reduce-grad] [-o FILE] writes a schedule for a PyTorch
// runtime: the compute order (_load_csv format "compute_only"), or the
// lowered program without data and optimizer steps and with REDUCE_GRAD after
// each stage's last backward (format "compute_comms"). -to torch-csv-legacy
// writes PyTorch 2.4 to 2.6 names.
//
// Long runs (lowering a large schedule, -schedule auto's search and
// syntheses, partition, sim -compare, trace, report, import, export) report
// their progress on stderr: a progress bar when it is a terminal, else
// (a CI log, go generate) a log/slog line every 5 seconds saying what is
// done and left, nothing when the work ends sooner. PPGEN_PROGRESS sets that
// period (a duration of at least 1s, e.g. 30s) or turns the lines off (off).
//
// gen:    -o FILE (default $GOFILE with _gen.go, or stdout with -o -),
// -package NAME (default $GOPACKAGE, else the output directory's name),
// -table (also emit the program as data for the interpreter),
// -helper N (steps per helper function)
//
// diff, check and vet take package patterns (./...) or generated files.
// For a pattern they find every `ppgen gen` //go:generate line of the
// matching packages (go tool ppgen gen, go run .../cmd/ppgen gen, ppgen gen;
// $GOFILE and $GOPACKAGE expanded, paths relative to the package) and every
// file with the ppgen header that no directive writes; a file alone is
// regenerated from the invocation its header records. Nothing is written.
//
// diff:   ppgen diff [-U N] PATTERNS|FILES prints a unified diff from each
// file on disk to what ppgen generates now; exit 0 when all are the same, 1
// when one differs (or is missing), 2 on an error.
//
// check:  ppgen check [-v] PATTERNS|FILES regenerates (and so verifies) each
// file in memory, reports a file that differs as "file:line: stale or
// edited" at its first differing line, and vets the file on disk (below);
// exit 1 when any file is stale, edited, missing or unsafe. CI runs
// `go tool ppgen check ./...` (docs/ci.md).
//
// vet:    ppgen vet [-v] PATTERNS|FILES runs the gen/vet analyzer over the
// files with the ppgen header and prints "file:line:col: message" like go
// vet: each rank's sends must have matching receives on the peer in the same
// FIFO order per (src, dst, channel), every step argument must be an integer
// constant, steps must fit the Spec, the rank functions must still hash to
// the Fingerprint constant (a hand edit is reported at the edited line when
// the header's invocation regenerates the file), the Ranks table must list
// every rank once, and the program must pass verify. Like check and diff it
// exits 2 when the patterns hold no generated file. cmd/ppgenvet runs the
// same analyzer under `go vet -vettool`.
//
// launch: ppgen launch -n N [-port P] [-grace 10s] -- CMD ARGS... starts N
// (1..1024) processes of CMD with RANK, LOCAL_RANK, WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT and PPGEN_TOKEN set (the launcher's
// PPGEN_TOKEN, or a new random one per job), prefixes their output with
// "[rank N] ", and when one fails kills the rest after the grace period (at
// most 10m) and exits 2 naming the rank that caused the failure: one killed
// by a signal (its peers' errors follow from its death), else the one that
// failed first. SIGINT and
// SIGTERM are forwarded to the ranks; on Linux a killed launcher takes its
// ranks with it.
//
// template: ppgen template -kind slurm|slurm-mpi|k8s -ranks N [-job NAME] [-port 29500]
// [-image IMG] [-gpus G] [-o FILE] -- CMD ARGS... writes a SLURM batch script
// (srun, one task per rank; MASTER_ADDR from the node list; a random
// PPGEN_TOKEN made at run time) or a Kubernetes indexed Job with a headless
// Service (RANK from the completion index; PPGEN_TOKEN from a Secret
// JOB-token that you create per job, as the file's comment shows).
//
// report: ppgen report (-schedule ... | -in FILE) [-cost ...] [-svg-width W]
// -o FILE.html writes one self-contained HTML page (inline style and SVG, no
// scripts; the same bytes on a rerun): the schedule and its lowering passes,
// the verification summary, the simulated makespan and bubbles under -cost,
// a table per rank (stages, steps, busy, idle, peak activations, slots, and
// peak unsharded stages with -fsdp), the SVG timeline and the lowered program.
//
// tune:   ppgen tune -trace FILE.json [-o MODEL.json] [-stages N] [-copies C] fits a
// model description (docs/model.md) to a measured timeline, the Chrome trace
// pipe.Timeline writes (examples/mlp -trace): one layer per stage (stage0,
// stage1, ...) whose F, I and W are the medians of the stage's calls of each
// kind, in ms; comm and bw fitted to the recorded sends (comm + size/bw,
// size in KiB, by least squares over the median send of each size; one size:
// the median send and no bw), act the median activation send in KiB, params
// 1. It writes the model (stdout without -o) and a table
// of the fitted costs (stdout with -o FILE, else stderr); -stages N refuses a
// trace of another stage count; -copies 2 fits a trace of dualpipe (two model
// copies: stage s runs the layers of stage s mod S/2). -schedule auto -model MODEL.json then chooses
// by the measured costs (gen takes -model for auto too).
//
// Exit status: 0 success; 1 the schedule is unsafe (it deadlocks, a step
// runs before what it needs, transfers do not match, ...: any command that
// verifies, check included) or differs (diff); 2 bad input (flags, a
// malformed or incomplete schedule file, a schedule over the size limits or
// one a pass refuses to lower) or any other error, with a one-line reason on
// stderr and nothing written. Output that cannot be written (stdout or
// stderr on a full disk, a closed pipe) is such an error too, whatever the
// command: exit 2 naming the stream ("writing stdout: ...").
//
// Output files (-o, sim -svg) are written atomically (a temporary file in the
// same directory, then a rename) and only into a directory that exists:
// ppgen creates no directories.
//
// From //go:generate in a trainer package:
//
//	//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8
//
// writes schedule_gen.go (named after $GOFILE) in package $GOPACKAGE; add
// `tool github.com/ppgen/ppgen/cmd/ppgen` to the trainer's go.mod (Go 1.24+).
package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/verify"
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"list", "schedule families and their constraints", runList},
		{"show", "print the lowered program as text or CSV", runShow},
		{"verify", "prove a schedule safe (exit 1 with the diagnosis when not)", runVerify},
		{"sim", "simulate a schedule with a cost model", runSim},
		{"partition", "split a model's layers into a schedule's stages for the least makespan", runPartition},
		{"gen", "verify, then write the Go source of a schedule", runGen},
		{"diff", "diff generated files with what ppgen generates now (exit 1 when they differ)", runDiff},
		{"check", "fail when generated files are stale, edited or unsafe (writes nothing)", runCheck},
		{"vet", "analyze generated files: send/receive matching, constants, fingerprint", runVet},
		{"trace", "simulate and write a Chrome trace (Perfetto, chrome://tracing)", runTrace},
		{"import", "read a schedule from PyTorch's CSV, verify it, optionally emit Go", runImport},
		{"export", "write a schedule as PyTorch's CSV", runExport},
		{"launch", "start N local processes of a command as the ranks of one job", runLaunch},
		{"template", "write a SLURM script or Kubernetes Job that runs a trainer on N ranks", runTemplate},
		{"report", "write an HTML page: the schedule, its verification, simulation, timeline and program", runReport},
		{"tune", "fit a model description (-model) to a measured timeline (pipe.Timeline's trace)", runTune},
		{"checkpoint", "inspect a checkpoint (verify its shards) or convert it to another layout", runCheckpoint},
		{"version", "print ppgen's module version, VCS revision and Go version", runVersion},
	}
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one ppgen invocation and returns its exit status. Every
// command writes through checkedWriters: output it could not write (a full
// disk, a closed pipe) fails the invocation with exit 2 and a line naming
// the stream and the error, whether or not the command checked the write.
func run(args []string, stdout, stderr io.Writer) int {
	out := &checkedWriter{name: "stdout", w: stdout}
	errOut := &checkedWriter{name: "stderr", w: stderr}
	name, code := dispatch(args, out, errOut)
	if code == 2 {
		return code // the command's own error is already on stderr
	}
	if err := cmp.Or(out.Err(), errOut.Err()); err != nil {
		// An exit 1 (unsafe, or diff's differences) whose output was lost
		// becomes an error too.
		fmt.Fprintf(errOut, "%s: %v\n", name, err)
		return 2
	}
	return code
}

// dispatch runs the command of args and returns its name for messages
// ("ppgen sim"; "ppgen" for no command) and its exit status, having written
// its error, if any, to stderr.
func dispatch(args []string, stdout, stderr io.Writer) (string, int) {
	if len(args) == 2 && args[0] == "help" {
		args = []string{args[1], "-h"} // ppgen help NAME: the command's -h
	}
	switch {
	case len(args) == 0:
		usage(stderr)
		return "ppgen", 2
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		usage(stdout)
		return "ppgen", 0
	case args[0] == "-version" || args[0] == "--version":
		args[0] = "version"
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		name := "ppgen " + c.name
		err := c.run(args[1:], stdout, stderr)
		var help helpRequest
		if errors.As(err, &help) {
			printHelp(stdout, c.name, help.fs)
			return name, 0
		}
		code := exitCode(err)
		if code != 0 {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		return name, code
	}
	fmt.Fprintf(stderr, "ppgen: unknown command %q; run `ppgen help` for the list\n", args[0])
	return "ppgen", 2
}

// A checkedWriter is stdout or stderr as a command sees it: it passes
// writes to w and remembers the first that fails (a short write counts),
// after which it writes nothing more and returns that error again. run
// checks Err when the command is done. Safe for concurrent use (launch
// copies the ranks' output from goroutines; a progress bar redraws from
// its own).
type checkedWriter struct {
	name string // "stdout" or "stderr", for the error
	w    io.Writer

	mu  sync.Mutex
	err error
}

func (c *checkedWriter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		c.err = fmt.Errorf("writing %s: %w", c.name, err)
		return n, c.err
	}
	return n, nil
}

// Err returns the first write error, or nil.
func (c *checkedWriter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Unwrap returns the writer c writes to (isTerminal looks through it).
func (c *checkedWriter) Unwrap() io.Writer { return c.w }

// exitCode maps a command's error to the exit status, by the error's
// type: 0 for none (or -h); 1 for an unsafe program (unsafeProgram) or
// output that differs (unsafeError: diff, check, vet); 2 for everything
// else: bad flags, unreadable or malformed input, a program over the size
// limits, a schedule a pass refuses to lower, and ppgen's own invariants
// (gen.InternalError, whose message asks for a report).
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, new(unsafeError)), unsafeProgram(err):
		return 1
	}
	return 2
}

// unsafeProgram reports whether err is verify's rejection of a well-formed,
// complete program: a deadlock, a step before what it needs, unmatched or
// mismatched transfers, a step run twice, too many live activations,
// inconsistent slots, FSDP or swap steps out of order or missing, OPT_STEP on
// some ranks only, a chunk without its forward or backward. A malformed
// program (verify.Error's Malformed: a step outside the program) is bad
// input, and a failure of what ppgen itself built is a gen.InternalError:
// neither is unsafe.
func unsafeProgram(err error) bool {
	if errors.As(err, new(*gen.InternalError)) {
		return false
	}
	if errors.As(err, new(*verify.DeadlockError)) {
		return true
	}
	var ve *verify.Error
	return errors.As(err, &ve) && !ve.Malformed()
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ppgen <command> [flags]   (ppgen <command> -h or ppgen help <command> for its flags)")
	fmt.Fprintln(w)
	width := 0
	for _, c := range commands() {
		width = max(width, len(c.name))
	}
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
}
