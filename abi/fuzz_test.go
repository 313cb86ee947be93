package abi

import "testing"

// FuzzParseKind: ParseKind accepts exactly the names and aliases of valid
// kinds and round-trips through String; a byte is a kind letter exactly
// when KindOfCode maps it to a kind with that Code.
func FuzzParseKind(f *testing.F) {
	for _, s := range []string{"F", "FULL_BACKWARD", "BWD_SEND", "INVALID", "OVERLAP_F_B", "", "Kind(3)", "LFsrRS?"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, ok := ParseKind(s)
		if ok != k.Valid() {
			t.Fatalf("ParseKind(%q) = %v, %v", s, k, ok)
		}
		if ok {
			if back, ok2 := ParseKind(k.String()); !ok2 || back != k {
				t.Fatalf("ParseKind(%q) = %v, but its String %q parses to %v, %v", s, k, k.String(), back, ok2)
			}
			named := s == k.String()
			for _, a := range k.Aliases() {
				named = named || s == a
			}
			if !named {
				t.Fatalf("ParseKind(%q) = %v, which neither is nor has that alias", s, k)
			}
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if k := KindOfCode(c); k != Invalid && k.Code() != c {
				t.Fatalf("KindOfCode(%q) = %v, whose Code is %q", c, k, k.Code())
			}
		}
	})
}

// FuzzAt: every At unpacks to fields in [-1, MaxIndex] that pack back to it,
// Fields agrees with Unpack, and for every kind Operands then Pack gives the
// At back unless the kind's layout drops a field the At sets.
func FuzzAt(f *testing.F) {
	for _, v := range []uint64{0, 0x0003_0011_0002_ffff, 0xffff_ffff_ffff_ffff, 0xfffe_fffe_fffe_fffe, 0x0001_0000_0000_0004} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint64) {
		a := At(v)
		s, m, c, d := a.Unpack()
		for _, x := range []int{s, m, c, d} {
			if x < -1 || x > MaxIndex {
				t.Fatalf("%s.Unpack() = %d, %d, %d, %d: a field outside [-1, %d]", formatAt(a), s, m, c, d, MaxIndex)
			}
		}
		b, ok := PackAt(s, m, c, d)
		if !ok || b != a {
			t.Fatalf("PackAt(%s.Unpack()) = %s, %v", formatAt(a), formatAt(b), ok)
		}
		rs, rm, rc, rd := a.Fields()
		raw := func(x int) int { return x & FieldNone }
		if rs != raw(s) || rm != raw(m) || rc != raw(c) || rd != raw(d) {
			t.Fatalf("%s.Fields() = %d, %d, %d, %d; Unpack %d, %d, %d, %d", formatAt(a), rs, rm, rc, rd, s, m, c, d)
		}
		for _, k := range Kinds() {
			stage, micro, peer, slot, src := a.Operands(k)
			b, ok := k.Pack(stage, micro, peer, slot, src)
			// Pack writes -1 in a local step's low field.
			drops := k.Shape() != ArgsComm && k.Shape() != ArgsCompute && d != -1
			if !ok || (b != a) != drops {
				t.Fatalf("%v: Pack(%s.Operands) = %s, %v", k, formatAt(a), formatAt(b), ok)
			}
		}
	})
}
