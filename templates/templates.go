// Package templates renders the files ppgen writes from templates: the
// cluster launch files for a trainer (a SLURM batch script and a Kubernetes
// indexed Job, each starting one process per pipeline rank with the
// environment runtime/launch reads: RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, or SLURM's own variables; and a SLURM batch script that
// starts the ranks as one MPI job, srun --mpi=pmix, for a trainer on the
// MPI transport), text/template files, and the HTML
// report of a schedule (ppgen report), an html/template file. All are
// embedded in the binary.
//
// The TCP launch files give every job its own PPGEN_TOKEN, the secret the
// ranks' TCP handshake proves, and never write one into the file (the
// output is deterministic and may be committed): the SLURM script makes a
// random token at run time, before srun, unless PPGEN_TOKEN is already set;
// the Kubernetes Job reads it from a Secret named JOB-token, which the
// user creates per job (the file's comment says how) and without which
// the pods do not start.
package templates

import (
	"bytes"
	"embed"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"unicode/utf8"
)

//go:embed *.tmpl
var files embed.FS

// reportFile is the HTML report's template (html/template).
const reportFile = "report.html.tmpl"

// Bounds of Data's numbers. MaxRanks is runtime/launch's MaxWorld, the
// largest WORLD_SIZE a rank accepts.
const (
	MaxRanks = 65536
	MaxGPUs  = 64
)

// Kinds lists the templates by name.
var Kinds = []string{"k8s", "slurm", "slurm-mpi"}

var fileOf = map[string]string{"slurm": "slurm.sbatch.tmpl", "slurm-mpi": "slurm-mpi.sbatch.tmpl", "k8s": "k8s-job.yaml.tmpl"}

// Data is what a template needs.
type Data struct {
	Job     string   // job name: lower-case letters, digits and '-'
	Ranks   int      // pipeline ranks = processes
	Port    int      // MASTER_PORT
	Image   string   // container image (k8s): an OCI reference (checkImage)
	GPUs    int      // GPUs per rank (0: none requested)
	MPI     string   // slurm-mpi: srun's --mpi plugin ("" = DefaultMPI)
	Command []string // the trainer command and its arguments
}

// DefaultMPI is slurm-mpi's srun --mpi plugin when Data.MPI is empty:
// PMIx, which OpenMPI's processes use under srun.
const DefaultMPI = "pmix"

var jobName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// mpiPlugin is an srun --mpi plugin name, e.g. pmix, pmix_v4, pmi2.
var mpiPlugin = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// checkImage checks a container image reference (empty: none given): the
// characters of an OCI reference (registry.example/team/trainer:1,
// trainer@sha256:...), which need no quoting in YAML or a shell, starting
// with a letter or digit. The k8s template also writes it quoted, so a
// reference is never read as more YAML than one string.
func checkImage(image string) error {
	alnum := func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }
	for i, r := range image {
		switch {
		case !alnum(r) && !strings.ContainsRune("._-/:@+", r):
			return fmt.Errorf("image %q holds %q; want a container image reference such as registry.example/trainer:1 or trainer@sha256:HEX (letters, digits and . _ - / : @ + only)", image, r)
		case i == 0 && !alnum(r):
			return fmt.Errorf("image %q starts with %q; want a container image reference that starts with a letter or digit, such as registry.example/trainer:1", image, r)
		}
	}
	return nil
}

// Render renders the named template (one of Kinds).
func Render(kind string, d Data) ([]byte, error) {
	file, ok := fileOf[kind]
	if !ok {
		return nil, fmt.Errorf("template %q: want one of %s", kind, strings.Join(Kinds, ", "))
	}
	if d.MPI == "" {
		d.MPI = DefaultMPI
	}
	switch {
	case !mpiPlugin.MatchString(d.MPI):
		return nil, fmt.Errorf("MPI plugin %q: want an srun --mpi name such as pmix or pmi2 (srun --mpi=list shows them)", d.MPI)
	case !jobName.MatchString(d.Job) || len(d.Job) > 52:
		return nil, fmt.Errorf("job name %q: want lower-case letters, digits and '-', at most 52 characters (Kubernetes and SLURM both accept that)", d.Job)
	case d.Ranks < 1 || d.Ranks > MaxRanks:
		return nil, fmt.Errorf("ranks = %d; want 1..%d", d.Ranks, MaxRanks)
	case d.Port < 1 || d.Port > 65535:
		return nil, fmt.Errorf("port = %d; want 1..65535", d.Port)
	case d.GPUs < 0 || d.GPUs > MaxGPUs:
		return nil, fmt.Errorf("gpus = %d; want 0..%d per rank", d.GPUs, MaxGPUs)
	case len(d.Command) == 0:
		return nil, fmt.Errorf("no trainer command given")
	case kind == "k8s" && d.Image == "":
		return nil, fmt.Errorf("the k8s template needs a container image (-image)")
	}
	if err := checkImage(d.Image); err != nil {
		return nil, err
	}
	if kind == "k8s" {
		// The Job holds the command as YAML double-quoted strings, whose
		// escapes are Unicode code points: a word that is not UTF-8 would
		// reach the pod changed (and the API server rejects it).
		for _, w := range d.Command {
			if !utf8.ValidString(w) {
				return nil, fmt.Errorf("trainer argument %q is not valid UTF-8, which a Kubernetes Job cannot hold; pass it in UTF-8 (or use -kind slurm)", w)
			}
		}
	}
	t, err := template.New(file).Funcs(template.FuncMap{
		"shell": shellQuote,
		"yaml":  yamlQuote,
	}).ParseFS(files, file)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// shellQuote quotes words for a POSIX shell.
func shellQuote(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w != "" && !strings.ContainsFunc(w, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r == ',' ||
				(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) {
			out[i] = w
			continue
		}
		out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// yamlQuote renders words as a YAML flow sequence of double-quoted strings.
func yamlQuote(words []string) string {
	out := slices.Clone(words)
	for i, w := range out {
		out[i] = fmt.Sprintf("%q", w)
	}
	return "[" + strings.Join(out, ", ") + "]"
}
