package e2e_test

import "github.com/ppgen/ppgen/runtime/pipe/pipetest"

// The test model (runtime/pipe/pipetest) under the short names the tests use.
type (
	affine = pipetest.Affine
	mse    = pipetest.MSE
	data   = pipetest.Data
)

var (
	newStages  = pipetest.NewStages
	sequential = pipetest.Sequential
	sameFloats = pipetest.SameFloats
)
