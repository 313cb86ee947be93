package verify_test

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
	fuseRandom     = testprog.FuseRandom
)
