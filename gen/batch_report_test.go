package gen_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/internal/doctable"
)

// TestBatchReport lowers every family at P=4, M=8 with and without -batch,
// verifies both, and renders how many transfers coalescing batches and
// what it does to the simulated makespan (comm = 0.5, the rest the default
// cost), as the table of docs/design.md's region "batching": rewritten
// under -update, compared without.
func TestBatchReport(t *testing.T) {
	c := sim.DefaultCost()
	c.Comm = 0.5
	var rows [][]string
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		cfg := ir.Config{Schedule: f.Name, Ranks: 4, Micro: 8}
		plain, err := gen.Lower(cfg, gen.Options{})
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		res, err := gen.Lower(cfg, gen.Options{Passes: passes.Options{Batch: true}})
		if err != nil {
			t.Fatalf("%s -batch: %v", f.Name, err)
		}
		b := passes.CountBatches(res.Program)
		if b.Transfers != plain.Report.Transfers || res.Report.Batches != b.Batches || b.Batches == 0 {
			t.Errorf("%s: %+v, but %d transfers unbatched and verify counted %d batches", f.Name, b, plain.Report.Transfers, res.Report.Batches)
		}
		s0, err := sim.Run(plain.Program, c)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		s1, err := sim.Run(res.Program, c)
		if err != nil {
			t.Fatalf("%s -batch: %v", f.Name, err)
		}
		rows = append(rows, []string{f.Name, fmt.Sprint(b.Transfers), fmt.Sprintf("%d (%.0f %%)", b.Batched, 100*float64(b.Batched)/float64(b.Transfers)),
			fmt.Sprint(b.Batches), fmt.Sprintf("%.2f", float64(b.Batched)/float64(b.Batches)), fmt.Sprint(b.MaxOps),
			fmt.Sprintf("%.2f", s0.Makespan), fmt.Sprintf("%.2f", s1.Makespan)})
	}
	header := []string{"schedule (P=4, M=8)", "transfers", "batched", "batches", "ops per batch", "largest", "makespan", "makespan -batch"}
	const doc, region = "../docs/design.md", "batching"
	if *update {
		if err := doctable.Replace(doc, region, header, rows); err != nil {
			t.Fatal(err)
		}
		return
	}
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := []byte("<!-- BEGIN "+region+" -->\n"), []byte("<!-- END "+region+" -->")
	i, j := bytes.Index(text, begin), bytes.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no region %q", doc, region)
	}
	if got, want := string(text[i+len(begin):j]), doctable.Markdown(header, rows); got != want {
		t.Errorf("%s's table %q is stale (go test ./gen -run TestBatchReport -update rewrites it):\n%s\nwant\n%s", doc, region, got, strings.TrimSpace(want))
	}
}
