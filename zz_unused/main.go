package main

import (
	"fmt"
	"go/types"
	"os"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedSyntax | packages.NeedFiles, Tests: os.Getenv("T") != ""}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		panic(err)
	}
	uses := map[string]int{}
	key := func(o types.Object) string {
		if o.Pkg() == nil {
			return ""
		}
		if f, ok := o.(*types.Func); ok {
			return f.FullName()
		}
		if v, ok := o.(*types.Var); ok && v.IsField() {
			return "" // skip fields
		}
		return o.Pkg().Path() + "." + o.Name()
	}
	decls := map[string]string{}
	for _, p := range pkgs {
		for id, o := range p.TypesInfo.Uses {
			pos := p.Fset.Position(id.Pos())
			if strings.HasSuffix(pos.Filename, "_test.go") && os.Getenv("U") == "" {
				continue
			}
			uses[key(o)]++
		}
		for id, o := range p.TypesInfo.Defs {
			if o == nil || !o.Exported() {
				continue
			}
			pos := p.Fset.Position(id.Pos())
			if strings.HasSuffix(pos.Filename, "_test.go") {
				continue
			}
			if _, ok := o.(*types.Var); ok && o.Parent() != o.Pkg().Scope() {
				continue
			}
			if _, ok := o.(*types.Const); ok && o.Parent() != o.Pkg().Scope() {
				continue
			}
			if _, ok := o.(*types.TypeName); ok && o.Parent() != o.Pkg().Scope() {
				continue
			}
			k := key(o)
			if k != "" {
				decls[k] = pos.String()
			}
		}
	}
	var out []string
	for k, pos := range decls {
		if uses[k] == 0 {
			out = append(out, pos+" "+k)
		}
	}
	sort.Strings(out)
	for _, s := range out {
		fmt.Println(s)
	}
}
