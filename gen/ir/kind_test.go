package ir

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/ppgen/ppgen/abi"
)

// TestKindAliasesAreAbis: every constant of kind.go is abi's under the same
// name (ir.Forward = abi.Forward), so gen/ir adds no spelling of a kind; a
// kind without one here is named abi.X (new kinds need no line here).
func TestKindAliasesAreAbis(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "kind.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	goNames := map[string]bool{}
	for _, k := range append(abi.Kinds(), abi.Invalid) {
		goNames[k.GoName()] = true
	}
	kinds := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			sel, ok := v.Values[0].(*ast.SelectorExpr)
			if x, isIdent := sel.X.(*ast.Ident); !ok || !isIdent || x.Name != "abi" {
				t.Errorf("%s is not an abi constant", v.Names[0].Name)
				continue
			}
			if v.Names[0].Name != sel.Sel.Name {
				t.Errorf("ir.%s = abi.%s: a second spelling", v.Names[0].Name, sel.Sel.Name)
			}
			if goNames[sel.Sel.Name] {
				kinds++
			}
		}
	}
	if kinds == 0 {
		t.Error("no kind aliases found in kind.go")
	}
}
