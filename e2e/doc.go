// Package e2e holds the tests that need both sides of the boundary: the
// compiler (gen/, and the code it generated under generated/) and the
// runtime (runtime/). Neither side's tests may import the other
// (internal/deps checks it), so the tests that run generated or freshly
// lowered programs on runtime/pipe live here: the pipelines against a
// sequential reference, failures across ranks, timelines, overlaps, swap,
// and the step-overhead benchmark.
//
//	go test ./e2e/
//	go test -run '^$' -bench StepOverhead -count 6 -cpu 1 ./e2e/
//
// The package has no code of its own beyond the generated program in
// onerank/.
package e2e
