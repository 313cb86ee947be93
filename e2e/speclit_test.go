package e2e_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/generated/dualpipe"
	"github.com/ppgen/ppgen/generated/dualpipev"
	"github.com/ppgen/ppgen/generated/fsdpswap"
	"github.com/ppgen/ppgen/generated/gpipe"
	"github.com/ppgen/ppgen/generated/interleaved"
	"github.com/ppgen/ppgen/generated/interleavedoverlap"
	"github.com/ppgen/ppgen/generated/interleavedsplit"
	"github.com/ppgen/ppgen/generated/mpipe"
	"github.com/ppgen/ppgen/generated/onef1b"
	"github.com/ppgen/ppgen/generated/onef1btie"
	"github.com/ppgen/ppgen/generated/shiplabels"
	"github.com/ppgen/ppgen/generated/zbh1"
	"github.com/ppgen/ppgen/generated/zbv"
	"github.com/ppgen/ppgen/generated/zbvbatch"
	"github.com/ppgen/ppgen/generated/zbvtie"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// emittedSpec reads the Spec an emitted file declares (`var Spec =
// pipe.Spec{...}`, its Fingerprint constant resolved) into a pipe.Spec
// value, field by field through reflection: the emitted source is the one
// description of a program's Spec, so a field the emitter starts writing is
// read here without a second copy of emit's rules. A field or expression it
// cannot read is an error naming it.
func emittedSpec(f *ast.File, dst any) error {
	consts := map[string]ast.Expr{}
	var lit *ast.CompositeLit
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range gd.Specs {
			vs, ok := s.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
				continue
			}
			switch name := vs.Names[0].Name; {
			case gd.Tok == token.CONST:
				consts[name] = vs.Values[0]
			case gd.Tok == token.VAR && name == "Spec":
				cl, ok := vs.Values[0].(*ast.CompositeLit)
				if !ok {
					return fmt.Errorf("var Spec is a %T, not a composite literal", vs.Values[0])
				}
				lit = cl
			}
		}
	}
	if lit == nil {
		return fmt.Errorf("no var Spec = pipe.Spec{...} in the file")
	}
	return decodeLit(lit, reflect.ValueOf(dst).Elem(), consts, "Spec")
}

// decodeLit stores the constant expression e into v: basic literals,
// negations, true/false, named constants of the file, and composite
// literals of slices, arrays and structs (keyed or not).
func decodeLit(e ast.Expr, v reflect.Value, consts map[string]ast.Expr, path string) error {
	switch e := e.(type) {
	case *ast.ParenExpr:
		return decodeLit(e.X, v, consts, path)
	case *ast.Ident:
		switch {
		case e.Name == "true" || e.Name == "false":
			if v.Kind() != reflect.Bool {
				return fmt.Errorf("%s: %s for a %s", path, e.Name, v.Type())
			}
			v.SetBool(e.Name == "true")
			return nil
		case e.Name == "nil":
			v.SetZero()
			return nil
		case consts[e.Name] != nil:
			c := consts[e.Name]
			delete(consts, e.Name) // a constant defined by itself stops here
			defer func() { consts[e.Name] = c }()
			return decodeLit(c, v, consts, path)
		}
		return fmt.Errorf("%s: identifier %s is not a constant of the file", path, e.Name)
	case *ast.UnaryExpr:
		if e.Op != token.SUB {
			return fmt.Errorf("%s: unary %s", path, e.Op)
		}
		if err := decodeLit(e.X, v, consts, path); err != nil {
			return err
		}
		switch v.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			v.SetInt(-v.Int())
		case reflect.Float32, reflect.Float64:
			v.SetFloat(-v.Float())
		default:
			return fmt.Errorf("%s: negated %s", path, v.Type())
		}
		return nil
	case *ast.BasicLit:
		switch v.Kind() {
		case reflect.String:
			s, err := strconv.Unquote(e.Value)
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			v.SetString(s)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n, err := strconv.ParseInt(e.Value, 0, v.Type().Bits())
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			v.SetInt(n)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n, err := strconv.ParseUint(e.Value, 0, v.Type().Bits())
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			v.SetUint(n)
		case reflect.Float32, reflect.Float64:
			x, err := strconv.ParseFloat(e.Value, v.Type().Bits())
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			v.SetFloat(x)
		default:
			return fmt.Errorf("%s: literal %s for a %s", path, e.Value, v.Type())
		}
		return nil
	case *ast.CompositeLit:
		switch v.Kind() {
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), len(e.Elts), len(e.Elts)))
			fallthrough
		case reflect.Array:
			if len(e.Elts) > v.Len() {
				return fmt.Errorf("%s: %d elements for a %s", path, len(e.Elts), v.Type())
			}
			for i, el := range e.Elts {
				if _, ok := el.(*ast.KeyValueExpr); ok {
					return fmt.Errorf("%s: an indexed element", path)
				}
				if err := decodeLit(el, v.Index(i), consts, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			return nil
		case reflect.Struct:
			for i, el := range e.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					k, ok := kv.Key.(*ast.Ident)
					if !ok {
						return fmt.Errorf("%s: a field key %T", path, kv.Key)
					}
					fv := v.FieldByName(k.Name)
					if !fv.IsValid() || !fv.CanSet() {
						return fmt.Errorf("%s: %s has no exported field %s", path, v.Type(), k.Name)
					}
					if err := decodeLit(kv.Value, fv, consts, path+"."+k.Name); err != nil {
						return err
					}
					continue
				}
				if i >= v.NumField() {
					return fmt.Errorf("%s: %d values for a %s", path, len(e.Elts), v.Type())
				}
				if err := decodeLit(el, v.Field(i), consts, fmt.Sprintf("%s.%s", path, v.Type().Field(i).Name)); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("%s: a composite literal for a %s", path, v.Type())
	}
	return fmt.Errorf("%s: expression %T is not a constant the test reads", path, e)
}

// TestEmittedSpecReadsTheCatalog: emittedSpec reads every catalog
// package's Spec from its source as the compiler does (copies, owners,
// shipped labels, ties, batches, overlaps), so a Spec read back from an
// emitted file at test time is the one the generated code would declare.
func TestEmittedSpecReadsTheCatalog(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range []struct {
		dir  string
		spec pipe.Spec
	}{
		{"dualpipe", dualpipe.Spec}, {"dualpipev", dualpipev.Spec}, {"fsdpswap", fsdpswap.Spec},
		{"gpipe", gpipe.Spec}, {"interleaved", interleaved.Spec}, {"interleavedoverlap", interleavedoverlap.Spec},
		{"interleavedsplit", interleavedsplit.Spec}, {"mpipe", mpipe.Spec}, {"onef1b", onef1b.Spec},
		{"onef1btie", onef1btie.Spec}, {"shiplabels", shiplabels.Spec}, {"zbh1", zbh1.Spec},
		{"zbv", zbv.Spec}, {"zbvbatch", zbvbatch.Spec}, {"zbvtie", zbvtie.Spec},
	} {
		seen[c.dir] = true
		t.Run(c.dir, func(t *testing.T) {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "generated", c.dir, "schedule_gen.go"), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got pipe.Spec
			if err := emittedSpec(f, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.spec) {
				t.Errorf("read %+v\ncompiled %+v", got, c.spec)
			}
		})
	}
	dirs, err := filepath.Glob(filepath.Join("..", "generated", "*", "schedule_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if dir := filepath.Base(filepath.Dir(d)); !seen[dir] {
			t.Errorf("generated/%s is not in this test's table: add it", dir)
		}
	}
}

// TestEmittedSpecRefuses: what emittedSpec cannot read is an error that
// names the field, not a zero value.
func TestEmittedSpecRefuses(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`var Spec = pipe.Spec{Ranks: f()}`, "Spec.Ranks: expression *ast.CallExpr"},
		{`var Spec = pipe.Spec{Bogus: 1}`, "has no exported field Bogus"},
		{`var Spec = pipe.Spec{Fingerprint: Fingerprint}`, "identifier Fingerprint is not a constant"},
		{`var Spec = pipe.Spec{Slots: []int{1, "a"}}`, "Spec.Slots[1]"},
		{`var Other = 1`, "no var Spec"},
	} {
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", "package p\n"+tc.src, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got pipe.Spec
		if err := emittedSpec(f, &got); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.src, err, tc.want)
		}
	}
}
