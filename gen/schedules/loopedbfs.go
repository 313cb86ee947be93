package schedules

import "github.com/ppgen/ppgen/gen/ir"

func init() {
	Register(Family{
		Name:           "looped-bfs",
		Aliases:        []string{"LoopedBFS"}, // PyTorch: ScheduleLoopedBFS
		Summary:        "Looped BFS: breadth-first over local stages, all micro-batches per stage (GPipe per chunk)",
		Constraints:    "any ranks ≥ 1, virtual ≥ 1 and micro ≥ 1",
		DefaultVirtual: 2,
		Build:          buildLoopedBFS,
	})
}

// buildLoopedBFS returns the order of PyTorch's ScheduleLoopedBFS
// (breadth-first pipeline parallelism, arXiv 2211.05953). Rank r holds the
// stages r, r+P, ..., r+(V-1)P (loop placement) and runs
//
//   - forwards: for each local stage in ascending order, F(s, 0), ..., F(s, M-1);
//   - backwards: for each local stage in descending order, B(s, M-1), ..., B(s, 0).
//
// Backwards run in descending micro-batch order, as PyTorch's does (the last
// forward's activations are the first freed). All V·M chunks are live at the
// turn. With V = 1 this is GPipe except for the backward micro-batch order.
func buildLoopedBFS(cfg ir.Config) (ir.Program, error) {
	const name = "looped-bfs"
	p, err := classicProgram(name, cfg, false)
	if err != nil {
		return ir.Program{}, err
	}
	if err := classicNoLessMemory(name, cfg); err != nil {
		return ir.Program{}, err
	}
	m := cfg.Micro
	for r := range p.Ranks {
		steps := make([]ir.Step, 0, 2*cfg.Virtual*m)
		for c := 0; c < cfg.Virtual; c++ {
			for i := 0; i < m; i++ {
				steps = append(steps, classicFwd(c*cfg.Ranks+r, i))
			}
		}
		for c := cfg.Virtual - 1; c >= 0; c-- {
			for i := m - 1; i >= 0; i-- {
				steps = append(steps, classicBwd(c*cfg.Ranks+r, i))
			}
		}
		p.Ranks[r] = steps
	}
	return p, nil
}
