package ir

import (
	"slices"
	"strings"
	"testing"
)

// The parsers' fuzz targets. Each checks that the parser never panics and
// that what it accepts round-trips: parse, format, parse gives the same
// program (or placement), and formats the same. The seeds include the
// inputs that once crashed ppgen (huge numbers exhausting memory, a 20-digit
// number overflowing); testdata/fuzz holds them too, so plain `go test`
// replays them.

var textSeeds = []string{
	twoRanks,
	"rank 0: 0F0 0B0\n",
	"0F0 0I0 0W0\n",
	"rank 0: 0DATA_LOAD0 0F0 0B0 OPT_STEP\n",
	"rank 0: 0F0 1F0 (1B0;0F1)OVERLAP_B_F 1F1 1B1 0B0 0B1\n",
	"0B0 OVERLAP_B_F\n", // a bare overlap once parsed and printed as "()OVERLAP_B_F" (issue 35)
	"# comment\n\nrank 0: 0UNSHARD 0F0 0B0 0REDUCE_GRAD 0RESHARD\n",
	"rank 0: 0F4294967296 0B0\n",       // micro 2^32: once out of memory
	"rank 0: 0F100000000\n",            // micro 10^8: once 47 s and 16 GB
	"rank 0: 0F18446744073709551617\n", // 20 digits: once a negative count
	"rank 0: 70000F0 70000B0\n",        // a stage over the packed limit
	"rank 0: 0F65534 0B65534\n",        // the largest micro number
	"rank 0: 0F0 0F2 0B0 0B2\n",        // a gap in the micro numbers
	"rank 0: 0F0 0F1\n",                // forwards without backwards
	"rank 1: 0F0\n",
	"rank 0: (0F0\n",
	"\x00\xff\xfe garbage",
	"\ufeffrank 0: 0F0 0B0\n",       // a UTF-8 byte order mark first
	"\ufeff\ufeffrank 0: 0F0 0B0\n", // only one is dropped
	"rank 0:\t0F0\t0B0\r\n",         // tabs between steps
	"\ufeff",
}

var csvSeeds = []string{
	"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
	"0F0,,3F0,3B0,,0B0\n1F0,2F0,,2B0,1B0,\n",
	"0FORWARD0,None,0FULL_BACKWARD0\n",
	"\"0F0\", 0B0\r\n",
	"0F4294967296,0B0\n",
	"0F100000000\n",
	"0F18446744073709551617,0B0\n",
	"0F0,0B0\n" + strings.Repeat(",", 1000) + "\n",
	"\"0F0\n0B0\"\n",
	"0F0,\"0B0\n",
	"\ufeff0F0,0B0\n",   // a UTF-8 byte order mark first
	"rank 0: 0F0 0B0\n", // the text form, refused with a hint
	"\ufeff\"0F0\",0B0\n",
}

func FuzzParseText(f *testing.F) {
	for _, s := range textSeeds {
		f.Add(s)
	}
	f.Fuzz(textRoundTrip)
}

// textRoundTrip fails unless the text form in, when ParseText accepts it,
// formats to text that parses to the same program and formats the same.
func textRoundTrip(t *testing.T, in string) {
	p, err := ParseText(in)
	if err != nil {
		return
	}
	out := FormatText(p)
	q, err := ParseText(out)
	if err != nil {
		t.Fatalf("ParseText(FormatText(p)) = %v\ninput %q\nformatted %q", err, in, out)
	}
	sameProgram(t, p, q)
	if again := FormatText(q); again != out {
		t.Fatalf("formats differ:\n%q\n%q", out, again)
	}
}

// textTokens is the text form's alphabet for FuzzParseTextTokens: the
// punctuation, a few numbers and every step kind's name.
func textTokens() []string {
	toks := []string{"rank ", ":", " ", "\n", "(", ")", ";", "#", "0", "1", "2", "7", "65535", "4294967296"}
	for _, k := range Kinds() {
		toks = append(toks, k.String())
	}
	return toks
}

// tokenize encodes s as indexes into toks, longest token first; ok is false
// when some byte of s starts no token.
func tokenize(s string, toks []string) (enc []byte, ok bool) {
	for s != "" {
		best := -1
		for i, tok := range toks {
			if strings.HasPrefix(s, tok) && (best < 0 || len(tok) > len(toks[best])) {
				best = i
			}
		}
		if best < 0 {
			return nil, false
		}
		enc = append(enc, byte(best))
		s = s[len(toks[best]):]
	}
	return enc, true
}

// FuzzParseTextTokens is FuzzParseText over the grammar's tokens rather
// than bytes: each input byte picks a token (modulo their number), so a
// mutation swaps, inserts or drops whole step kinds and punctuation, and
// token-level crashers (issue 35's bare overlap: "0F0 0I0 0W0" with W made
// OVERLAP_B_F, one byte of the encoding) are a few mutations away rather than
// over a minute of byte flips. The seeds are textSeeds that tokenize.
func FuzzParseTextTokens(f *testing.F) {
	toks := textTokens()
	if len(toks) > 256 {
		f.Fatalf("%d tokens: a byte cannot pick each", len(toks))
	}
	for _, s := range textSeeds {
		if enc, ok := tokenize(s, toks); ok {
			f.Add(enc)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 512 {
			return
		}
		var b strings.Builder
		for _, c := range in {
			b.WriteString(toks[int(c)%len(toks)])
		}
		textRoundTrip(t, b.String())
	})
}

func FuzzParseCSV(f *testing.F) {
	for _, s := range csvSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ParseCSV(strings.NewReader(in))
		if err != nil {
			return
		}
		out := FormatCSV(p)
		q, err := ParseCSV(strings.NewReader(string(out)))
		if err != nil {
			t.Fatalf("ParseCSV(FormatCSV(p)) = %v\ninput %q\nformatted %q", err, in, out)
		}
		sameProgram(t, p, q)
		if again := FormatCSV(q); string(again) != string(out) {
			t.Fatalf("formats differ:\n%q\n%q", out, again)
		}
	})
}

func FuzzParsePlacement(f *testing.F) {
	for _, s := range []struct {
		text     string
		ranks, v int
	}{
		{"loop", 4, 2}, {"v", 4, 2}, {"", 2, 1}, {"0,1,1,0", 2, 2}, {"0,x", 2, 1},
		{"0,0", 2, 1}, {"loop", 70000, 1}, {"loop", 4, 1 << 40}, {"v", 40000, 2},
		{"0,18446744073709551617", 2, 1}, {"1,-1", 2, 1}, {"loop", -1, 1},
	} {
		f.Add(s.text, s.ranks, s.v)
	}
	f.Fuzz(func(t *testing.T, text string, ranks, virtual int) {
		p, err := ParsePlacement(text, ranks, virtual)
		if err != nil {
			return
		}
		q, err := ParsePlacement(p.String(), ranks, virtual)
		if err != nil {
			t.Fatalf("ParsePlacement(%q) = %v (from %q)", p.String(), err, text)
		}
		if p.Name != q.Name || p.NumRanks != q.NumRanks || !slices.Equal(p.RankOf, q.RankOf) {
			t.Fatalf("round trip of %q: %+v != %+v", text, p, q)
		}
	})
}

// sameProgram fails unless p and q hold the same placement, micro-batch
// count, copies and steps (peers included).
func sameProgram(t *testing.T, p, q Program) {
	t.Helper()
	if p.Placement.Name != q.Placement.Name || p.Placement.NumRanks != q.Placement.NumRanks || !slices.Equal(p.Placement.RankOf, q.Placement.RankOf) {
		t.Fatalf("placements differ: %+v != %+v", p.Placement, q.Placement)
	}
	if p.Micro != q.Micro || p.Copies != q.Copies || len(p.Ranks) != len(q.Ranks) {
		t.Fatalf("M %d/%d, copies %d/%d, ranks %d/%d", p.Micro, q.Micro, p.Copies, q.Copies, len(p.Ranks), len(q.Ranks))
	}
	for r := range p.Ranks {
		if !slices.EqualFunc(p.Ranks[r], q.Ranks[r], Step.Equal) {
			t.Fatalf("rank %d differs:\n%v\n%v", r, p.Ranks[r], q.Ranks[r])
		}
	}
}

// FuzzParseTies: -tie's parser never panics; what it accepts is normalized
// (A < B, both in 0..MaxIndex), its String form reads back to the same ties,
// and CheckTies agrees with a direct check of the range and of a stage in
// two ties.
func FuzzParseTies(f *testing.F) {
	for _, s := range []string{"0:3", "3:0", "0:7,1:6", "3:3", "0", "a:b", "-1:2", "0:3,", " 1 : 2 ", "0:65535", "0:18446744073709551617", "0:3,0:2", "::", ","} {
		f.Add(s, 8)
	}
	f.Fuzz(func(t *testing.T, s string, stages int) {
		ties, err := ParseTies(s)
		if err != nil {
			return
		}
		parts := make([]string, len(ties))
		for i, x := range ties {
			if x.A >= x.B || x.A < 0 || x.B > MaxIndex {
				t.Fatalf("ParseTies(%q) gave %v", s, x)
			}
			parts[i] = x.String()
		}
		again, err := ParseTies(strings.Join(parts, ","))
		if err != nil || !slices.Equal(again, ties) {
			t.Fatalf("ParseTies(%q) = %v, read back as %v (%v)", s, ties, again, err)
		}
		ok := true
		seen := map[int]bool{}
		for _, x := range ties {
			ok = ok && x.B < stages && !seen[x.A] && !seen[x.B]
			seen[x.A], seen[x.B] = true, true
		}
		if err := CheckTies(ties, stages); (err == nil) != ok {
			t.Fatalf("CheckTies(%v, %d) = %v; want ok=%v", ties, stages, err, ok)
		}
	})
}
