// Package tuned is the schedule ppgen chose for examples/mlp's uneven model
// (-wide 32: the first and last blocks some 30 times a plain block's cost)
// under the costs `ppgen tune` fitted to a measured run of it:
//
//	mlp -schedule dualpipev -wide 32 -trace run.json     # gen/tune/testdata/dualpipev-wide.json
//	ppgen tune -trace run.json -o wide-model.json        # wide-model.json, this directory
//	ppgen gen -schedule auto -model wide-model.json ...  # the line below
//
// dualpipev, auto's choice under even costs, puts the first and the last
// stage on rank 0, both wide; under the fitted costs auto chooses another
// placement (BENCHMARKS.md "Measured costs": the measured iteration). The
// example runs it as -schedule tuned.
package tuned

//go:generate go tool ppgen gen -schedule auto -model wide-model.json -ranks 4 -micro 8 -table
