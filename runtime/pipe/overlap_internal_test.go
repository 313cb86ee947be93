package pipe

import (
	"slices"
	"testing"

	"gorgonia.org/tensor"
)

type ptrStage struct{ n int }

func (*ptrStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error)          { return x, nil, nil }
func (*ptrStage) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) { return dy, nil }
func (*ptrStage) BackwardWeight(any, *tensor.Dense) error                      { return nil }

type valStage struct{ n int }

func (valStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error)          { return x, nil, nil }
func (valStage) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) { return dy, nil }
func (valStage) BackwardWeight(any, *tensor.Dense) error                      { return nil }

type mapStage map[string]int

func (mapStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error)          { return x, nil, nil }
func (mapStage) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) { return dy, nil }
func (mapStage) BackwardWeight(any, *tensor.Dense) error                      { return nil }

// TestStageGroups: distinct pointers (and maps) are distinct groups, one
// pointer twice is one group, absent stages are -1, and every value-typed
// stage joins one group (it may share state invisibly).
func TestStageGroups(t *testing.T) {
	a, b := &ptrStage{1}, &ptrStage{2}
	m1, m2 := mapStage{}, mapStage{}
	for _, tc := range []struct {
		name   string
		stages []Stage
		want   []int
	}{
		{"distinct pointers", []Stage{a, nil, b}, []int{0, -1, 1}},
		{"one pointer twice", []Stage{a, b, a}, []int{0, 1, 0}},
		{"values", []Stage{valStage{1}, a, valStage{2}}, []int{0, 1, 0}},
		{"maps", []Stage{m1, m2, m1}, []int{0, 1, 0}},
		{"empty", nil, []int{}},
	} {
		if got := stageGroups(tc.stages); !slices.Equal(got, tc.want) {
			t.Errorf("%s: groups %v, want %v", tc.name, got, tc.want)
		}
	}
}
