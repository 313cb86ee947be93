//go:build mpi

package mpi_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
	"github.com/ppgen/ppgen/runtime/transport/mpi/mpitest"
)

// pingPongSizes size BenchmarkMPIThroughput: 4 MiB and 4 KiB float32
// tensors, each round one message there and one back, as many rounds as
// take about 100 ms over shared memory.
var pingPongSizes = []struct {
	name          string
	bytes, rounds int
}{{"4MiB", 4 << 20, 200}, {"4KiB", 4 << 10, 20000}}

// pingPongVar tells a ping-pong rank its message size and rounds.
const pingPongVar = "PPGEN_MPI_PINGPONG"

// BenchmarkMPIThroughput runs a 2-rank ping-pong of 4 MiB (and, over
// shared memory, 4 KiB) tensors through
// the MPI transport under mpirun, over shared memory (OpenMPI's default
// for ranks on one node) and over its TCP transport (--mca btl self,tcp),
// with buffered and with synchronous sends, and reports GB/s (bytes moved
// both ways over the wall time of the rounds, on rank 0). Run it with
// -benchtime 1x: each run is one mpirun job. The raw sub-benchmarks are
// the baseline: the same ping-pong in C with blocking MPI_Send/MPI_Recv on
// a reused buffer (testdata/pingpong.c, compiled here with mpicc), run
// beside the others because a shared machine's figures drift.
func BenchmarkMPIThroughput(b *testing.B) {
	raw := ""
	if mpicc, err := exec.LookPath("mpicc"); err == nil {
		raw = filepath.Join(b.TempDir(), "pingpong")
		if out, err := exec.Command(mpicc, "-O2", "-o", raw, filepath.Join("testdata", "pingpong.c")).CombinedOutput(); err != nil {
			b.Fatalf("mpicc: %v\n%s", err, out)
		}
	}
	for _, link := range []struct {
		name string
		mca  []string
	}{{"shm", nil}, {"tcp", []string{"--mca", "btl", "self,tcp"}}} {
		for _, size := range pingPongSizes {
			if link.name == "tcp" && size.bytes < 1<<20 {
				continue
			}
			for _, mode := range []string{"raw", "buffered", "sync"} {
				b.Run(link.name+"/"+size.name+"/"+mode, func(b *testing.B) {
					args := append(link.mca, os.Args[0], "-test.run=^TestMPIChild$")
					if mode == "raw" {
						if raw == "" {
							b.Skip("no mpicc for the raw MPI baseline")
						}
						args = append(link.mca, raw, strconv.Itoa(size.bytes), strconv.Itoa(size.rounds))
					}
					argv := mpitest.Args(b, 2, args...)
					sync := mode == "sync"
					var best float64
					for range b.N {
						cmd := execCommand(argv)
						cmd.Env = append(os.Environ(), scenarioVar+"=ping-pong", "PPGEN_MPI_SYNC="+strconv.FormatBool(sync),
							fmt.Sprintf("%s=%d,%d", pingPongVar, size.bytes, size.rounds))
						out, err := cmd.CombinedOutput()
						if err != nil {
							b.Fatalf("%v\n%s", err, out)
						}
						m := regexp.MustCompile(`ping-pong: ([0-9.]+) GB/s`).FindSubmatch(out)
						if m == nil {
							b.Fatalf("no figure in the output:\n%s", out)
						}
						v, _ := strconv.ParseFloat(string(m[1]), 64)
						best = max(best, v)
					}
					b.ReportMetric(best, "GB/s")
				})
			}
		}
	}
}

// childPingPong is rank 0 or 1 of the ping-pong. Each rank hands every
// tensor it received back (transport.Recycler) once done with it, as
// runtime/pipe does, so receives land in reused memory.
func childPingPong(t *testing.T, sync bool) {
	bytes, rounds := 4<<20, 200
	if v := os.Getenv(pingPongVar); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d", &bytes, &rounds); err != nil || bytes < 4 || rounds < 1 {
			t.Fatalf("%s=%q: want BYTES,ROUNDS", pingPongVar, v)
		}
	}
	tr, err := mpi.New(mpi.Config{Sync: sync, Timeout: time.Minute, Fingerprint: "ping-pong"})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := tr.(transport.Recycler)
	recycle := func(x *tensor.Dense) {
		if rec != nil {
			rec.Recycle(x)
		}
	}
	r := tr.Rank()
	x := tensor.New(tensor.WithShape(bytes/4), tensor.WithBacking(make([]float32, bytes/4)))
	round := func() {
		if r == 0 {
			if err := tr.Send(1, abi.ActChannel, transport.Tag{}, x); err != nil {
				t.Fatal(err)
			}
			_, y, err := tr.Recv(1, abi.GradChannel)
			if err != nil {
				t.Fatal(err)
			}
			recycle(y)
			return
		}
		_, y, err := tr.Recv(0, abi.ActChannel)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Send(0, abi.GradChannel, transport.Tag{}, y); err != nil {
			t.Fatal(err)
		}
		recycle(y)
	}
	for range 10 { // warm up
		round()
	}
	start := time.Now()
	for range rounds {
		round()
	}
	el := time.Since(start)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if r == 0 {
		fmt.Printf("ping-pong: %.2f GB/s (%d rounds of 2 x %d bytes in %v)\n", float64(2*rounds*bytes)/el.Seconds()/1e9, rounds, bytes, el)
	}
}
