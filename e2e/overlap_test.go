package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ppgen/ppgen/generated/dualpipev"
	"github.com/ppgen/ppgen/generated/interleavedoverlap"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// catalogProgs are generated programs with overlap steps (the committed
// catalog; generated code imports only runtime/pipe, so these tests may use it).
var catalogProgs = []struct {
	name  string
	spec  pipe.Spec
	ranks []func(*pipe.Exec) error
	ops   [][]pipe.Op
}{
	{"dualpipev", dualpipev.Spec, dualpipev.Ranks[:], dualpipev.Program},
	{"interleaved-overlap", interleavedoverlap.Spec, interleavedoverlap.Ranks[:], interleavedoverlap.Program},
}

// TestOverlapCatalogMatchesSequential runs the generated overlap programs on
// affine stages, over both transports, as generated calls, through Interpret
// and through interpretKeyed, with concurrent and serial overlaps, and
// requires losses and parameters equal to a sequential run.
func TestOverlapCatalogMatchesSequential(t *testing.T) {
	for _, c := range catalogProgs {
		for _, tk := range []string{"inproc", "tcp"} {
			for _, mode := range []string{"straight", "interp", "keyed"} {
				for _, serial := range []bool{false, true} {
					if tk == "tcp" && serial {
						continue // the serial path does not depend on the transport
					}
					t.Run(fmt.Sprintf("%s/%s/%s/serial=%v", c.name, tk, mode, serial), func(t *testing.T) {
						p := prog{name: c.name, spec: c.spec, straight: c.ranks, ops: c.ops}
						var trs []transport.Transport
						if tk == "inproc" {
							trs = inprocWorld(c.spec.Ranks, 20*time.Second)
						} else {
							trs = tcpWorld(t, c.spec.Ranks, c.spec.Fingerprint, nil)
						}
						g := newRig(t, p, trs, false)
						if serial {
							for r, x := range g.xs {
								x.Close()
								g.xs[r] = newSerialExec(t, g, r)
							}
						}
						fns := rankFns(p, mode)
						tame(g.stages)
						got := g.train(t, 3, fns)
						ref := tame(newStages(c.spec.Stages))
						want := sequential(ref, c.spec.Micro, len(got), false)
						for it := range want {
							if !sameFloats(got[it], want[it]) {
								t.Errorf("iteration %d losses:\n got %v\nwant %v", it, got[it], want[it])
							}
						}
						for s := range ref {
							if g.stages[s].A != ref[s].A || g.stages[s].B != ref[s].B {
								t.Errorf("stage %d params: got (%v, %v), want (%v, %v)", s, g.stages[s].A, g.stages[s].B, ref[s].A, ref[s].B)
							}
						}
					})
				}
			}
		}
	}
}

// newSerialExec is rank r's Exec of g again, with SerialOverlap.
func newSerialExec(t *testing.T, g *rig, r int) *pipe.Exec {
	t.Helper()
	stages := map[int]pipe.Stage{}
	var mine []*affine
	for s, rr := range g.p.spec.RankOf {
		if rr == r {
			stages[s] = g.stages[s]
			mine = append(mine, g.stages[s])
		}
	}
	x, err := pipe.New(pipe.Config{
		Rank: r, Spec: g.p.spec, Stages: stages, Loss: mse{}, Data: g.data, Transport: g.trs[r], SerialOverlap: true,
		OptStep: func() error {
			for _, s := range mine {
				s.Step()
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// tame sets parameters that keep a deep affine model (8 stages) finite
// under training: a product of slopes near 1.
func tame(stages []*affine) []*affine {
	for i, st := range stages {
		st.A, st.B = 1-float64(i%3)/16, float64(i%3-1)/16
	}
	return stages
}
