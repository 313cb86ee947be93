// Command ppgenvet runs the ppgen analyzer (github.com/ppgen/ppgen/gen/vet)
// as a vet tool:
//
//	go build -o ppgenvet github.com/ppgen/ppgen/cmd/ppgenvet
//	go vet -vettool=$PWD/ppgenvet ./...
//
// or, in a module that declares it a tool (go get -tool
// github.com/ppgen/ppgen/cmd/ppgenvet):
//
//	vettool=$(go tool -n ppgenvet); go vet -vettool="${vettool:?ppgenvet is not a tool of this module: go get -tool github.com/ppgen/ppgen/cmd/ppgenvet}" ./...
//
// which fails with that message where the tool is not declared (a bare
// -vettool="$(go tool -n ppgenvet)" is then empty, and go vet runs its own
// analyzers and passes).
//
// It reports, in files ppgen generated, sends without a matching receive in
// FIFO order, non-constant step arguments, rank functions that no longer
// hash to their Fingerprint (at the edited line), a Ranks table that misses
// a rank, and programs gen/verify rejects. `ppgen vet ./...` runs the same
// analyzer without go vet.
//
// It is golang.org/x/tools/go/analysis/unitchecker around that analyzer, so
// it speaks the go command's vet-tool protocol.
package main

import (
	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/ppgen/ppgen/gen/vet"
)

func main() { unitchecker.Main(vet.Analyzer) }
