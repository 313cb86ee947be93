package sim

import (
	"slices"

	"github.com/ppgen/ppgen/abi"
)

// A rendezvous kind (abi's IsRendezvous: TIE_GRAD, ALL_REDUCE) is timed as a
// meet (clMeet): its steps on several ranks start together. Which steps
// meet, and what each waits for, is the kind's own: its file declares a
// function that fills the dependencies, peers and costs of the kind's
// events after the transfers are matched (tie.go's tieDeps,
// collective.go's collectiveDeps), so that build.go needs no edit for a new
// rendezvous kind. The functions run in kind order, whatever the order of
// the init functions that declare them.

// meetDeps are the declared functions, in kind order; meetKinds their kinds.
var (
	meetDeps  []func(*simulator)
	meetKinds []abi.Kind
)

// declareMeet declares fill as the dependencies of rendezvous kind k; its
// file calls it from an init function.
func declareMeet(k abi.Kind, fill func(*simulator)) {
	i, _ := slices.BinarySearch(meetKinds, k)
	meetKinds = slices.Insert(meetKinds, i, k)
	meetDeps = slices.Insert(meetDeps, i, fill)
}
