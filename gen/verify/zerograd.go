package verify

import "github.com/ppgen/ppgen/abi"

// zeroGrads checks the ZERO_GRAD steps: at most one per stage, on the
// stage's rank, before every compute step of the stage there.
func (c *checker) zeroGrads() error {
	for r, steps := range c.p.Ranks {
		seen := map[int]int{}
		computed := map[int]bool{}
		for i, st := range steps {
			switch {
			case st.Kind == abi.ZeroGrad:
				if j, dup := seen[st.Stage]; dup {
					return c.fail(r, i, st, Structure, "a second ZERO_GRAD of stage %d (the first at step %d)", st.Stage, j)
				}
				if computed[st.Stage] {
					return c.fail(r, i, st, Order, "ZERO_GRAD of stage %d after a compute step of it", st.Stage)
				}
				seen[st.Stage] = i
			case st.Kind.IsCompute():
				computed[st.Stage] = true
			}
		}
	}
	return nil
}
