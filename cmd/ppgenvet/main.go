// Command ppgenvet runs the ppgen analyzer (github.com/ppgen/ppgen/gen/vet)
// as a vet tool:
//
//	go build -o ppgenvet github.com/ppgen/ppgen/cmd/ppgenvet
//	go vet -vettool=$PWD/ppgenvet ./...
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
