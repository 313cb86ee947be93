package swap_test

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/swap"
)

// Offload a chunk's saved tensors to host memory and load them back. A
// wrapper such as runtime/nn's WithSwap calls Track when a forward makes the
// chunk and Untrack when its last backward frees it, so the tier can report
// the resident bytes and their peak.
func Example() {
	tier := swap.NewHost() // or swap.NewFile(dir) to go through files
	defer tier.Close()

	x := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6}))
	y := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{-1, 0, 1, 2, 3, 4}))
	saved := []*tensor.Dense{x, y, x} // x twice: moved once, back as one tensor
	tier.Track(swap.SizeOf(saved))    // forward: 72 bytes resident

	h, err := tier.Offload(saved, "stage 0 chunk 3") // returns at once
	if err != nil {
		fmt.Println(err)
		return
	}
	saved = nil                          // drop our references: the copy holds them until it ends
	if err := tier.Wait(h); err != nil { // SWAP_WAIT_OFFLOAD
		fmt.Println(err)
		return
	}
	fmt.Printf("out: %d bytes offloaded, %d resident\n", tier.OffloadedBytes(), tier.ResidentBytes())

	saved, err = tier.Load(h) // SWAP_LAUNCH_LOAD: synchronous
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("back:", saved[0].Float64s(), saved[1].Float32s(), saved[0] == saved[2])
	tier.Untrack(swap.SizeOf(saved)) // the last backward ran
	st := tier.Stats()
	fmt.Printf("resident %d, peak %d bytes in %d chunk; %d offload, %d load\n", st.ResidentBytes, st.PeakResidentBytes, st.PeakResidentChunks, st.Offloads, st.Loads)
	// Output:
	// out: 72 bytes offloaded, 0 resident
	// back: [1 2 3 4 5 6] [-1 0 1 2 3 4] true
	// resident 0, peak 72 bytes in 1 chunk; 1 offload, 1 load
}
