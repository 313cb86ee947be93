package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ppgen/ppgen/examples/charlm/program/onef1b"
	"github.com/ppgen/ppgen/examples/charlm/program/zbv"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// program is one generated program: its Spec and its rank functions.
type program struct {
	Spec    pipe.Spec
	Ranks   []func(*pipe.Exec) error
	Program [][]pipe.Op // the steps as data (-table), which name -trace's calls; nil without
}

// schedule is a training program and the forward-only program of the same
// family and placement that evaluates the validation loss.
type schedule struct {
	train, eval program
}

// catalog holds the programs generated under program/ (go generate): one
// package per schedule, its validation program generated beside the
// training program with -name Eval.
var catalog = map[string]schedule{
	"zbv":  {program{zbv.Spec, zbv.Ranks[:], zbv.Program}, program{zbv.EvalSpec, zbv.EvalRanks[:], nil}},
	"1f1b": {program{onef1b.Spec, onef1b.Ranks[:], onef1b.Program}, program{onef1b.EvalSpec, onef1b.EvalRanks[:], nil}},
}

func scheduleNames() []string {
	names := make([]string, 0, len(catalog))
	for n := range catalog {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// lookup returns the schedule name names (runtime/train checks that its
// two programs place the stages alike).
func lookup(name string) (schedule, error) {
	s, ok := catalog[name]
	if !ok {
		return schedule{}, fmt.Errorf("-schedule %q is not compiled in; choose one of %s", name, strings.Join(scheduleNames(), ", "))
	}
	return s, nil
}
