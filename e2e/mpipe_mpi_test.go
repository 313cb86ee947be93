//go:build mpi

package e2e_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
	"github.com/ppgen/ppgen/runtime/transport/mpi/mpitest"
)

// mpipeMPIChild is set in the environment of the ranks TestMPIMPipe starts
// under mpirun: "MODE,TOWER", TOWER one of none, frozen, owner (trainable,
// owner backward) and first (trainable, Config.TowerAtFirst).
const mpipeMPIChild = "PPGEN_E2E_MPI_MPIPE"

// mpipeMPICfg is the program TestMPIMPipe runs: 3 ranks, V = 2, M = 7.
var mpipeMPICfg = ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}

// TestMPIMPipe runs mpipe over MPI, one rank per process under mpirun -np
// 3, in both ownership modes, without a tower (T = 0), with a frozen one and
// with a trainable one with and without owner backward: each rank's stage
// and tower parameters and the losses equal a sequential run's (exactly;
// within 1e-12 with a trainable tower), and each rank loads only the
// inputs of the micro-batches it owns.
func TestMPIMPipe(t *testing.T) {
	if v := os.Getenv(mpipeMPIChild); v != "" {
		mode, tower, _ := strings.Cut(v, ",")
		mpipeMPIRank(t, mode, tower)
		return
	}
	if testing.Short() {
		t.Skip("starts mpirun jobs")
	}
	for _, tc := range []struct{ mode, tower string }{
		{passes.OwnersMin, "none"}, {passes.OwnersFull, "none"}, {passes.OwnersFull, "frozen"},
		{passes.OwnersMin, "owner"}, {passes.OwnersFull, "owner"}, {passes.OwnersFull, "first"},
	} {
		t.Run(tc.mode+"/"+tc.tower, func(t *testing.T) {
			n := mpipeMPICfg.Ranks
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			argv := mpitest.Args(t, n, os.Args[0], "-test.run", "^TestMPIMPipe$", "-test.v")
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), mpipeMPIChild+"="+tc.mode+","+tc.tower)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
			}
			if got := strings.Count(string(out), "mpipe MPI rank ok"); got != n {
				t.Fatalf("%d ranks passed, want %d:\n%s", got, n, out)
			}
		})
	}
}

// mpipeMPIRank runs this process's rank of TestMPIMPipe's program.
func mpipeMPIRank(t *testing.T, mode, towerKind string) {
	const iters = 3
	p := lowered(t, mpipeMPICfg, gen.Options{Passes: passes.Options{MpipeOwners: mode}})
	sp := p.spec
	tr, err := mpi.New(mpi.Config{Timeout: 60 * time.Second, Fingerprint: sp.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	r := tr.Rank()
	all := tame(newStages(sp.Stages))
	stages := map[int]pipe.Stage{}
	var mine []int
	for s, rr := range sp.RankOf {
		if rr == r {
			stages[s] = all[s]
			mine = append(mine, s)
		}
	}
	d := &data{}
	counts := &countingData{d: d}
	tower := newAffineTower()
	cfg := pipe.Config{Rank: r, Spec: sp, Stages: stages, Loss: mse{}, Data: counts, Transport: tr,
		OptStep: func() error {
			for _, s := range mine {
				all[s].Step()
			}
			if towerKind == "owner" || towerKind == "first" {
				tower.step()
			}
			return nil
		}}
	switch towerKind {
	case "frozen":
		cfg.Data = pipe.WithPreprocess(counts, func(_ int, in *tensor.Dense) (*tensor.Dense, error) { return frozenTower(in), nil })
	case "owner", "first":
		cfg.Tower, cfg.TowerAtFirst = tower, towerKind == "first"
	}
	x, err := pipe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	fn := rankFns(p, "interp")[r]
	var got [][]float64
	for it := range iters {
		d.Iter = it
		if err := pipe.Run(x, fn); err != nil {
			t.Fatalf("rank %d, iteration %d: %v", r, it, err)
		}
		if sp.RankOf[sp.Stages-1] == r {
			got = append(got, x.Losses())
		}
	}
	ref := tame(newStages(sp.Stages))
	var want [][]float64
	tol := 0.0
	refTower := newAffineTower()
	switch towerKind {
	case "none":
		want = sequentialWithTower(ref, nil, sp.Micro, iters)
	case "frozen":
		want = sequentialWithTower(ref, frozenTower, sp.Micro, iters)
	default:
		want, tol = sequentialTrainableTower(ref, refTower, sp.Micro, iters), 1e-12
		if math.Abs(tower.a-refTower.a) > tol || math.Abs(tower.b-refTower.b) > tol {
			t.Errorf("rank %d's tower: (%v, %v), want (%v, %v)", r, tower.a, tower.b, refTower.a, refTower.b)
		}
	}
	for it := range got {
		for m := range got[it] {
			if !(math.Abs(got[it][m]-want[it][m]) <= tol) {
				t.Errorf("rank %d iteration %d micro %d: loss %v, want %v", r, it, m, got[it][m], want[it][m])
			}
		}
	}
	for _, s := range mine {
		if math.Abs(all[s].A-ref[s].A) > tol || math.Abs(all[s].B-ref[s].B) > tol {
			t.Errorf("rank %d stage %d params: got (%v, %v), want (%v, %v)", r, s, all[s].A, all[s].B, ref[s].A, ref[s].B)
		}
	}
	wantLoads := sp.Inputs(r)
	for it := range iters {
		n := len(wantLoads)
		loads := slices.Clone(counts.inputs[min(it*n, len(counts.inputs)):min((it+1)*n, len(counts.inputs))])
		slices.Sort(loads)
		if !slices.Equal(loads, wantLoads) {
			t.Errorf("rank %d iteration %d loaded the inputs of %v; want %v", r, it, loads, wantLoads)
		}
	}
	if len(counts.inputs) != iters*len(wantLoads) {
		t.Errorf("rank %d loaded %d inputs in %d iterations; want %d", r, len(counts.inputs), iters, iters*len(wantLoads))
	}
	if !t.Failed() {
		fmt.Printf("mpipe MPI rank ok: rank %d, %s, tower %s\n", r, mode, towerKind)
	}
}
