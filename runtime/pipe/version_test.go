package pipe

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
)

// TestVersionGuard: the package declares the constant generated code
// references (abi.VersionGuard), so code gen/emit writes today compiles
// against it.
func TestVersionGuard(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						if n.Name == abi.VersionGuard {
							return
						}
					}
				}
			}
		}
	}
	t.Errorf("runtime/pipe declares no constant %s (abi.Version %d): generated code would not compile", abi.VersionGuard, abi.Version)
}
