package templates

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/launch"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestRenderGolden(t *testing.T) {
	d := Data{Job: "mlp-pp", Ranks: 4, Port: 29500, Image: "registry.example/trainer:1", GPUs: 1,
		Command: []string{"/app/trainer", "-schedule", "zbv", "-note", "it's quoted"}}
	for _, kind := range Kinds {
		got, err := Render(kind, d)
		if err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", kind+".golden")
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from %s:\n%s", kind, golden, got)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	ok := Data{Job: "j", Ranks: 2, Port: 29500, Image: "img", Command: []string{"t"}}
	tests := []struct {
		kind string
		mod  func(d *Data)
		want string
	}{
		{"pbs", func(d *Data) {}, `template "pbs": want one of k8s, slurm, slurm-mpi`},
		{"slurm", func(d *Data) { d.Job = "Bad_Name" }, `job name "Bad_Name"`},
		{"slurm", func(d *Data) { d.Ranks = 0 }, "ranks = 0; want 1..65536"},
		{"k8s", func(d *Data) { d.Ranks = 65537 }, "ranks = 65537; want 1..65536"},
		{"slurm", func(d *Data) { d.GPUs = -1 }, "gpus = -1; want 0..64 per rank"},
		{"k8s", func(d *Data) { d.GPUs = 65 }, "gpus = 65"},
		{"slurm", func(d *Data) { d.Port = 70000 }, "port = 70000"},
		{"slurm", func(d *Data) { d.Command = nil }, "no trainer command"},
		{"k8s", func(d *Data) { d.Image = "" }, "needs a container image"},
		{"slurm-mpi", func(d *Data) { d.MPI = "pmix; rm -rf /" }, `MPI plugin "pmix; rm -rf /": want an srun --mpi name`},
		// An image is one YAML string: no newline that starts a key, no
		// " #" that starts a comment, no quote, nothing outside an OCI
		// reference's characters.
		{"k8s", func(d *Data) { d.Image = "img:1\n  securityContext: {privileged: true}" }, `image "img:1\n  securityContext: {privileged: true}" holds '\n'; want a container image reference`},
		{"k8s", func(d *Data) { d.Image = "img #x" }, `image "img #x" holds ' '`},
		{"k8s", func(d *Data) { d.Image = "img#x" }, `image "img#x" holds '#'`},
		{"k8s", func(d *Data) { d.Image = `img"x` }, `image "img\"x" holds '"'`},
		{"k8s", func(d *Data) { d.Image = "img'x" }, `image "img'x" holds '\''`},
		{"k8s", func(d *Data) { d.Image = "img\tx" }, `holds '\t'`},
		{"k8s", func(d *Data) { d.Image = "img:1\x00" }, `holds '\x00'`},
		{"k8s", func(d *Data) { d.Image = "img,x" }, `holds ','`},
		{"k8s", func(d *Data) { d.Image = "imgé" }, `holds 'é'`},
		{"k8s", func(d *Data) { d.Image = "-img" }, `image "-img" starts with '-'`},
		{"k8s", func(d *Data) { d.Image = "@img" }, `image "@img" starts with '@'`},
		{"slurm", func(d *Data) { d.Image = "a b" }, `image "a b" holds ' '`},
		{"k8s", func(d *Data) { d.Command = []string{"t", "\xff"} }, `trainer argument "\xff" is not valid UTF-8`},
	}
	for _, tc := range tests {
		d := ok
		tc.mod(&d)
		_, err := Render(tc.kind, d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: error %v, want %q", tc.kind, d, err, tc.want)
		}
	}
}

// TestK8sImage: an image reference of any allowed shape reaches the Job
// as one double-quoted YAML string.
func TestK8sImage(t *testing.T) {
	for _, image := range []string{
		"img",
		"registry.example:5000/team/trainer_x-y.z:v1.2",
		"trainer@sha256:0123456789abcdef",
		"Registry.example/trainer:1.0+build.7",
	} {
		d := Data{Job: "j", Ranks: 2, Port: 29500, Image: image, Command: []string{"t"}}
		got, err := Render("k8s", d)
		if err != nil {
			t.Errorf("image %q: %v", image, err)
			continue
		}
		if want := "\n          image: \"" + image + "\"\n"; !strings.Contains(string(got), want) {
			t.Errorf("image %q: the Job lacks %q:\n%s", image, want, got)
		}
	}
}

// TestEveryJobGetsAToken: the SLURM script makes a token at run time
// before srun (keeping one the caller set), the Kubernetes Job reads one
// from a required Secret; neither file holds a token, and both are the
// same on every render.
func TestEveryJobGetsAToken(t *testing.T) {
	d := Data{Job: "j", Ranks: 2, Port: 29500, Image: "img", Command: []string{"t"}}
	slurm, err := Render("slurm", d)
	if err != nil {
		t.Fatal(err)
	}
	s := string(slurm)
	tok := strings.Index(s, `export PPGEN_TOKEN="${PPGEN_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}"`)
	if tok < 0 || tok > strings.Index(s, "\nsrun ") {
		t.Errorf("the SLURM script does not make a token before srun:\n%s", s)
	}
	k8s, err := Render("k8s", d)
	if err != nil {
		t.Fatal(err)
	}
	k := string(k8s)
	for _, want := range []string{"- name: PPGEN_TOKEN\n              valueFrom:\n                secretKeyRef:\n                  name: j-token\n                  key: token\n                  optional: false\n",
		"kubectl create secret generic j-token --from-literal=token="} {
		if !strings.Contains(k, want) {
			t.Errorf("the Job lacks %q:\n%s", want, k)
		}
	}
	for _, out := range []string{s, k} {
		if strings.Contains(out, "PPGEN_ALLOW_NO_TOKEN") {
			t.Errorf("a template opts out of authentication:\n%s", out)
		}
	}
	again, _ := Render("slurm", d)
	if string(again) != s {
		t.Error("two renders differ")
	}
}

// TestSlurmScriptMakesAToken runs the SLURM script with stand-ins for
// scontrol and srun: the trainer sees a new random 32-hex-digit token, or
// the one the caller set.
func TestSlurmScriptMakesAToken(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"scontrol": "#!/bin/sh\necho node1\n",
		"srun":     "#!/bin/sh\nshift\nexec \"$@\"\n", // drop --kill-on-bad-exit=1
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, err := Render("slurm", Data{Job: "j", Ranks: 2, Port: 29500, Command: []string{"sh", "-c", "echo token=$PPGEN_TOKEN addr=$MASTER_ADDR"}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "job.sbatch")
	if err := os.WriteFile(path, script, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(env ...string) string {
		c := exec.Command(bash, path)
		c.Env = append([]string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH"), "SLURM_JOB_NODELIST=node[1-2]"}, env...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return string(out)
	}
	a, b := run(), run()
	re := regexp.MustCompile(`^token=([0-9a-f]{32}) addr=node1\n$`)
	if !re.MatchString(a) || !re.MatchString(b) || a == b {
		t.Errorf("want a new random token per job: %q, %q", a, b)
	}
	if got := run("PPGEN_TOKEN=mine"); got != "token=mine addr=node1\n" {
		t.Errorf("the caller's token is not kept: %q", got)
	}
}

// TestSlurmMPIScript runs the slurm-mpi script with a stand-in for srun:
// it starts the trainer through the MPI plugin asked for (pmix by
// default), with no token or rendezvous of ppgen's own.
func TestSlurmMPIScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "srun"), []byte("#!/bin/sh\necho srun $1 $2\nshift 2\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ mpi, want string }{{"", "--mpi=pmix"}, {"pmi2", "--mpi=pmi2"}} {
		script, err := Render("slurm-mpi", Data{Job: "j", Ranks: 4, Port: 29500, MPI: tc.mpi, Command: []string{"sh", "-c", "echo token=$PPGEN_TOKEN addr=$MASTER_ADDR"}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(script), "export ") {
			t.Errorf("the MPI script sets up ppgen's TCP rendezvous:\n%s", script)
		}
		path := filepath.Join(dir, "job.sbatch")
		if err := os.WriteFile(path, script, 0o644); err != nil {
			t.Fatal(err)
		}
		c := exec.Command(bash, path)
		c.Env = []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if want := "srun --kill-on-bad-exit=1 " + tc.want + "\ntoken= addr=\n"; string(out) != want {
			t.Errorf("MPI %q: output %q, want %q", tc.mpi, out, want)
		}
	}
}

// TestMaxRanksIsLaunchs: the templates accept what a rank accepts.
func TestMaxRanksIsLaunchs(t *testing.T) {
	if MaxRanks != launch.MaxWorld {
		t.Errorf("MaxRanks = %d, launch.MaxWorld = %d", MaxRanks, launch.MaxWorld)
	}
}

func TestShellQuote(t *testing.T) {
	got := shellQuote([]string{"a", "b c", "it's", "", "-x=1"})
	want := `a 'b c' 'it'\''s' '' -x=1`
	if got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}
