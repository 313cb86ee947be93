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

// fingerprint is what the world's ranks check at their one rendezvous:
// both programs' fingerprints (pipe.Fingerprints), so that every rank runs
// the same training and validation programs, and one transport serves the
// Execs of both.
func (s schedule) fingerprint() string {
	return pipe.Fingerprints(s.train.Spec.Fingerprint, s.eval.Spec.Fingerprint)
}

// lastRank is the rank holding the last stage: it computes the losses.
func (s schedule) lastRank() int { return s.train.Spec.RankOf[s.train.Spec.Stages-1] }

func scheduleNames() []string {
	names := make([]string, 0, len(catalog))
	for n := range catalog {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func lookup(name string) (schedule, error) {
	s, ok := catalog[name]
	if !ok {
		return schedule{}, fmt.Errorf("-schedule %q is not compiled in; choose one of %s", name, strings.Join(scheduleNames(), ", "))
	}
	t, e := s.train.Spec, s.eval.Spec
	if !e.ForwardOnly || t.Ranks != e.Ranks || t.Stages != e.Stages || t.Micro != e.Micro || fmt.Sprint(t.RankOf) != fmt.Sprint(e.RankOf) {
		return schedule{}, fmt.Errorf("-schedule %s: the validation program (%v stages on %v) does not place the stages as the training program (%v on %v)", name, e.Stages, e.RankOf, t.Stages, t.RankOf)
	}
	return s, nil
}
