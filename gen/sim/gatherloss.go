package sim

import "github.com/ppgen/ppgen/abi"

// GATHER_LOSS (-gather-loss) is a collective (collective.go): the ranks'
// n-th meet, and each then exchanges its losses with every other rank in
// turn, P−1 exchanges of a few numbers, so it takes (P−1)·Comm.
func init() {
	declareCollective(abi.GatherLoss, func(c *Cost, ranks int) float64 { return float64(max(ranks-1, 0)) * c.Comm })
}
