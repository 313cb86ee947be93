package vet

import (
	"go/ast"

	"github.com/ppgen/ppgen/gen/ir"
)

// readTies reads a Spec's Ties literal, []pipe.Tie{{A: 0, B: 3}, ...}
// (keyed or positional elements), reporting what it cannot read.
func (m *model) readTies(e ast.Expr) ([]ir.Tie, bool) {
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		m.report(e, "Spec.Ties is not a []pipe.Tie literal")
		return nil, false
	}
	var out []ir.Tie
	for i, x := range cl.Elts {
		el, ok := x.(*ast.CompositeLit)
		if !ok || len(el.Elts) != 2 {
			m.report(x, "Spec.Ties[%d] is not a pipe.Tie{A: a, B: b} literal", i)
			return nil, false
		}
		var v [2]int
		for j, f := range el.Elts {
			if kv, ok := f.(*ast.KeyValueExpr); ok {
				k, _ := kv.Key.(*ast.Ident)
				if k == nil || (k.Name != "A" && k.Name != "B") {
					m.report(f, "Spec.Ties[%d] has a field other than A and B", i)
					return nil, false
				}
				if k.Name == "B" {
					j = 1
				} else {
					j = 0
				}
				f = kv.Value
			}
			n, ok := intLit(f)
			if !ok {
				m.report(f, "Spec.Ties[%d] is not two integer constants", i)
				return nil, false
			}
			v[j] = n
		}
		out = append(out, ir.Tie{A: v[0], B: v[1]})
	}
	return out, true
}
