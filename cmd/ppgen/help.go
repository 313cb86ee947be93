package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ppgen/ppgen/gen/gencmd"
)

// helpRequest is what a command returns for -h or -help: run prints the
// command's help (usage line, description, flags) to stdout and exits 0.
type helpRequest struct{ fs *flag.FlagSet }

func (h helpRequest) Error() string        { return "help requested" }
func (h helpRequest) Is(target error) bool { return target == errHelp }

// flagError maps an error of fs.Parse: -h becomes a helpRequest, anything
// else a usage error (exit 2).
func flagError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return helpRequest{fs}
	}
	return &gencmd.UsageError{Msg: err.Error()}
}

// help is what `ppgen NAME -h` prints before the flags.
type help struct {
	usage string // after "usage: ppgen NAME"
	doc   string // one paragraph
}

// helps holds every command's help; TestHelp checks each command has one.
var helps = map[string]help{
	"list": {"",
		"Lists the schedule families with their default virtual stages per rank (V), the constraints on ranks, virtual stages and micro-batches, and a summary; the last row is -schedule auto."},
	"show": {" (-schedule NAME -ranks P -micro M | -in FILE) [flags]",
		"Lowers the schedule (data loads, transfers, FSDP and swap steps, the optimizer step) and prints one line per rank in ppgen's text form, or in PyTorch's pipelining CSV with -format csv; -compute-only prints the F, B, I, W order before lowering. The output reads back with -in."},
	"verify": {" (-schedule NAME -ranks P -micro M | -in FILE) [flags]",
		"Lowers the schedule and proves it safe: one forward and one backward per chunk, every step's preconditions, FIFO matching of sends and receives, deadlock freedom under rendezvous semantics, slot lifetimes and the activation limit. Prints a one-line summary and exits 0, or exits 1 with the rank, step and reason (a deadlock names the ring of ranks); bad input exits 2."},
	"sim": {" (-schedule NAME -ranks P -micro M | -in FILE | -compare LIST -ranks P -micro M) [flags]",
		"Simulates the lowered schedule under a cost model (-cost F=1,B=2,W=1,comm=0: B is the full backward, I and W its halves; per-stage lists like F=1:1:1:1.4; other keys data, overlap, unshard, reduce, opt, swap, act, bw, and param with dp for the FSDP collectives' ring cost) and prints the makespan, whole-iteration and stage-span bubbles, busy time and peak activations per rank; -grid adds a text timeline, -svg FILE an SVG one, -json prints JSON, and -compare LIST puts several families side by side."},
	"partition": {" -model FILE -ranks P [-virtual V] [-schedule FAMILY] [-micro M] [-mem LIMIT]",
		"Splits the layers of a model description (docs/model.md) into the S = P·V contiguous stages of the schedule (default 1f1b, or interleaved with -virtual V > 1; -micro default 2P) so that the schedule's simulated makespan is smallest, within -mem (each rank's peak activations plus parameters, in the model's units), and prints each stage's layers, costs and rank, the makespan against the even split, the lower bound and the peak memory. -partition auto on sim, trace and report runs a schedule with that split; -schedule auto -partition auto tries every family with it."},
	"gen": {" (-schedule NAME -ranks P -micro M | -in FILE) [-o FILE] [flags]",
		"Lowers and verifies the schedule, then writes its Go source: one straight-line function per rank, the Spec, the Fingerprint and the Ranks table, linked against runtime/pipe. -o defaults to $GOFILE with _gen.go under go generate, else schedule_gen.go (- for stdout); the file is replaced atomically, its directory must exist, and nothing is written when verification fails."},
	"diff": {" [-U N] PATTERNS | FILES",
		"Regenerates each generated file in memory, from the //go:generate lines of the packages (./...) or from the invocation a file's header records, and prints a unified diff from the file on disk. Writes nothing; exits 0 when all are the same, 1 when one differs or is missing, 2 on an error or when nothing matched."},
	"check": {" [-v] PATTERNS | FILES",
		"Regenerates each generated file in memory (and so verifies it), reports a file that differs as file:line: stale or edited, and vets the file on disk. Writes nothing; exits 1 when a file is stale, edited, missing or unsafe, 2 on an error or when nothing matched. CI runs go tool ppgen check ./..."},
	"vet": {" [-v] PATTERNS | FILES",
		"Runs the gen/vet analyzer over the ppgen-generated files of the packages (or the files named): sends matched by receives in FIFO order, constant step arguments that fit the Spec, the rank functions still hashing to the Fingerprint, the Ranks table, and verify. Prints file:line:col: message like go vet; exits 1 on a problem, 2 on an error or when no generated file matched."},
	"trace": {" (-schedule NAME -ranks P -micro M | -in FILE) [-cost MODEL] [-o FILE.json]",
		"Simulates the schedule and writes the Chrome trace-event JSON (stdout without -o): a process per rank with compute, comm and swap threads (and fsdp with -fsdp), one event per step at its simulated time (one cost unit = 1 ms), an arrow from each send to its receive. It loads in ui.perfetto.dev and chrome://tracing."},
	"import": {" -from torch-csv|torch-csv-legacy FILE [-o FILE.go] [flags]",
		"Reads a schedule in the CSV form torch.distributed.pipelining dumps (- for stdin), compute-only or with its transfers, adds the DATA_LOAD and OPT_STEP steps PyTorch leaves implicit, verifies it (exit 1 with the diagnosis when unsafe) and with -o writes its Go source. FSDP actions are kept and verified unless -drop-fsdp."},
	"export": {" -to torch-csv|torch-csv-legacy (-schedule NAME -ranks P -micro M | -in FILE) [-compute-only] [-o FILE]",
		"Writes the schedule for a PyTorch runtime's _load_csv: the lowered program without data and optimizer steps, with REDUCE_GRAD after each stage's last backward (format compute_comms), or with -compute-only the compute order alone (format compute_only)."},
	"launch": {" -n N [-port P] [-grace D] -- CMD [ARGS...]",
		"Starts N local processes of CMD as the ranks of one job with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT and PPGEN_TOKEN set, prefixes their output with [rank N], and when one fails stops the rest after the grace period and exits 2 naming it."},
	"template": {" -kind slurm|slurm-mpi|k8s -ranks N [flags] -- CMD [ARGS...]",
		"Writes a SLURM batch script (srun, one task per rank, MASTER_ADDR from the node list), a SLURM batch script for a trainer on the MPI transport (slurm-mpi: srun --mpi=pmix, one MPI rank per task) or a Kubernetes indexed Job with a headless Service (RANK from the completion index) that runs CMD as the ranks of one job; to stdout unless -o."},
	"report": {" (-schedule NAME -ranks P -micro M | -in FILE) [-cost MODEL] -o FILE.html",
		"Writes one self-contained HTML page about the schedule (inline style and SVG, no scripts, the same bytes on a rerun): its lowering passes, the verification summary, the simulated makespan and bubbles under -cost, a table per rank, the SVG timeline and the lowered program."},
	"tune": {" -trace FILE.json [-o MODEL.json] [-stages N] [-copies C]",
		"Fits a model description (docs/model.md) to a measured timeline, the Chrome trace runtime/pipe.Timeline writes (the -trace of examples/mlp): one layer per stage, named stage0, stage1, ..., whose F, I and W are the medians of that stage's calls of each kind, in milliseconds (and R, where the stage has RECOMPUTE calls: the whole stage's, the median call divided by the share of the stage's R it re-ran under a selective policy, -recompute-cost or the trace's); comm and bw fitted to the recorded sends (comm + KiB/bw, by least squares over the median send of each size; one size: the median send, no bw), act the median activation send in KiB, params 1. Writes the model (stdout without -o) and prints a table of the fitted costs; -schedule auto -model FILE then chooses by them. A trace of a schedule with two model copies (dualpipe) needs -copies 2."},
	"checkpoint": {" inspect DIR | convert -in DIR -out DIR2 -partition BOUNDS [-dp N] [-fsdp] [-schedule NAME]",
		"Reads a checkpoint of runtime/checkpoint (docs/checkpoints.md). inspect prints its step, the layout that wrote it, the state it records and a row per shard (file, size, CRC-32C, layers), reading every shard to verify its checksum; a corrupt or missing shard exits 2 naming the file. convert writes the checkpoint again under another layout, its layers regrouped by -partition into one stage per pipeline rank, over -dp replicas (FSDP-sharded with -fsdp): parameters and optimizer state by layer, a tower's (runtime/train's Config.Tower) in world rank 0's shard, the step and the named state; per-rank blobs are not carried over."},
	"version": {"",
		"Prints ppgen's module path and version ((devel) for a build from a checkout), the VCS revision and whether the tree was modified when the build recorded them, and the Go version it was built with. ppgen -version prints the same."},
}

// printHelp writes the help of command c: the usage line, its paragraph
// and its flags (fs; nil or empty: none).
func printHelp(w io.Writer, name string, fs *flag.FlagSet) {
	h := helps[name]
	fmt.Fprintf(w, "usage: ppgen %s%s\n\n", name, h.usage)
	fmt.Fprintln(w, wrap(h.doc, 78))
	n := 0
	if fs != nil {
		fs.VisitAll(func(*flag.Flag) { n++ })
	}
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nflags:")
	printFlags(w, fs)
}

// printFlags is flag.PrintDefaults without its one surprise: a back-quoted
// word in a flag's usage ("see `ppgen list`") is not taken as the flag's
// placeholder. The placeholder is the value's type, as for a usage without
// back quotes, and the usage is printed as written.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, _ := flag.UnquoteUsage(&flag.Flag{Value: f.Value})
		if g, ok := f.Value.(flag.Getter); ok && typ == "value" {
			switch g.Get().(type) {
			case int:
				typ = "int" // an int flag of its own type (gencmd's -ranks, -micro)
			case string:
				typ = "string" // gencmd's -schedule
			}
		}
		line := "  -" + f.Name
		if typ != "" {
			line += " " + typ
		}
		usage := strings.ReplaceAll(f.Usage, "\n", "\n    \t")
		switch def := f.DefValue; {
		case zeroDefault(def):
		case typ == "string":
			usage += fmt.Sprintf(" (default %q)", def)
		default:
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
}

// zeroDefault reports whether def is the zero value of a flag's type, so
// that "(default ...)" is left out, as flag.PrintDefaults does.
func zeroDefault(def string) bool {
	switch def {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// wrap breaks s into lines of at most width columns at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	col := 0
	for _, word := range strings.Fields(s) {
		n := len([]rune(word))
		switch {
		case col == 0:
		case col+1+n > width:
			b.WriteByte('\n')
			col = 0
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += n
	}
	return b.String()
}
