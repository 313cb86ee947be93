package main

import (
	"flag"
	"io"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/templates"
)

// runTemplate writes a cluster launch file (SLURM batch script or Kubernetes
// indexed Job) that starts one process of the trainer per pipeline rank,
// each job with its own PPGEN_TOKEN (made by the script at run time, or
// read from a Secret the user creates per job; see package templates), or
// (slurm-mpi) a SLURM batch script that starts the ranks as one MPI job.
func runTemplate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("template", flag.ContinueOnError)
	kind := fs.String("kind", "", "template: "+strings.Join(templates.Kinds, " or "))
	ranks := fs.Int("ranks", 0, "pipeline ranks (one process each), 1..65536")
	job := fs.String("job", "ppgen", "job name")
	port := fs.Int("port", 29500, "MASTER_PORT (k8s, slurm)")
	image := fs.String("image", "", "container image (k8s)")
	gpus := fs.Int("gpus", 0, "GPUs per rank, 0..64 (0: none requested)")
	mpi := fs.String("mpi", templates.DefaultMPI, "slurm-mpi: srun's --mpi plugin (pmix for OpenMPI, pmi2 for MPICH; srun --mpi=list shows them)")
	out := fs.String("o", "-", "output file (- for stdout)")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	if err := templateFlagsApply(fs, *kind); err != nil {
		return err
	}
	if slices.Contains(templates.Kinds, *kind) { // else Render says what kinds there are
		format := formatSlurm
		if *kind == "k8s" {
			format = formatYAML
		}
		if err := checkFormat(namedFile{Name: "-o", Path: *out}, format); err != nil {
			return err
		}
	}
	b, err := templates.Render(*kind, templates.Data{Job: *job, Ranks: *ranks, Port: *port, Image: *image, GPUs: *gpus, MPI: *mpi, Command: fs.Args()})
	if err != nil {
		return &gencmd.UsageError{Msg: err.Error()}
	}
	return writeOutput(*out, b, stdout, stderr, "")
}

// templateFlags are the flags only some kinds of template use: the kinds,
// and why the others have no use for the flag.
var templateFlags = []struct {
	flag  string
	kinds []string
	why   string
}{
	{"image", []string{"k8s"}, "only a Kubernetes Job names a container image; SLURM runs the command on the nodes as they are"},
	{"port", []string{"k8s", "slurm"}, "slurm-mpi's ranks find each other through MPI, not a MASTER_PORT"},
	{"mpi", []string{"slurm-mpi"}, "only slurm-mpi starts the ranks through srun's MPI plugin"},
}

// templateFlagsApply refuses a flag the user set that the template kind
// does not use (it would be silently ignored). An unknown kind is left to
// templates.Render.
func templateFlagsApply(fs *flag.FlagSet, kind string) error {
	if !slices.Contains(templates.Kinds, kind) {
		return nil
	}
	set := setFlags(fs)
	for _, tf := range templateFlags {
		if set[tf.flag] && !slices.Contains(tf.kinds, kind) {
			return usagef("-%s does not apply to -kind %s: %s; drop -%s, or use -kind %s", tf.flag, kind, tf.why, tf.flag, strings.Join(tf.kinds, " or "))
		}
	}
	return nil
}
