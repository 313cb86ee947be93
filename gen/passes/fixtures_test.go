package passes

import "github.com/ppgen/ppgen/gen/internal/testprog"

// Fixtures shared with gen/verify's tests (gen/internal/testprog).
var (
	oneF1B         = testprog.OneF1B
	gpipe          = testprog.GPipe
	interleaved    = testprog.Interleaved
	vshape         = testprog.VShape
	zbLike         = testprog.ZBLike
	mustParse      = testprog.MustParse
	randomFeasible = testprog.RandomFeasible
	randomOrder    = testprog.RandomOrder
	fuseRandom     = testprog.FuseRandom
)

// orderOf maps the tests' eager flag to a comm order: eager or late (the
// timed order has tests of its own).
func orderOf(eager bool) CommOrder {
	if eager {
		return Eager
	}
	return Late
}
