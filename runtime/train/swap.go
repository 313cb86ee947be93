package train

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/swap"
)

// SwapTiers offloads each stage's saved activations to a swap tier of its
// rank at a program's swap steps (-swap): its Wrap is a Config.WrapStage
// that makes each stage an nn.Swapping on its world rank's tier, made by
// New when the rank builds its first stage. A nil tier from New leaves the
// stages as they are (the swap steps then do nothing). Close the tiers
// after the job; Tier reports what each one did (swap.Tier.Stats).
type SwapTiers struct {
	// New makes a rank's tier: swap.NewHost, or swap.NewFile(dir).
	New func() (*swap.Tier, error)

	mu sync.Mutex
	by map[int]*swap.Tier
}

// Wrap is a Config.WrapStage: stage seq of world rank rank as an
// nn.Swapping on the rank's tier.
func (t *SwapTiers) Wrap(rank, stage int, seq *nn.Sequential) (nn.ParamStage, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tier, ok := t.by[rank]
	if !ok {
		if t.New == nil {
			return nil, errors.New("train: SwapTiers.New is nil")
		}
		var err error
		if tier, err = t.New(); err != nil {
			return nil, fmt.Errorf("the swap tier of rank %d: %w", rank, err)
		}
		if t.by == nil {
			t.by = map[int]*swap.Tier{}
		}
		t.by[rank] = tier
	}
	if tier == nil {
		return seq, nil
	}
	return &nn.Swapping{Sequential: seq, Tier: tier, Name: fmt.Sprintf("stage %d", stage)}, nil
}

// Tier returns world rank rank's tier: nil if the rank built no stage in
// this process or New returned none.
func (t *SwapTiers) Tier(rank int) *swap.Tier {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.by[rank]
}

// Close closes every tier and returns the first error.
func (t *SwapTiers) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first error
	for _, tier := range t.by {
		if tier == nil {
			continue
		}
		if err := tier.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
