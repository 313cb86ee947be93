package model

import (
	"slices"
	"strings"
	"testing"
)

const llm = `{"layers": [
  {"name": "embed", "F": 0.3, "I": 0, "W": 0.3, "act": 1, "params": 4},
  {"name": "block0", "F": 1, "I": 1, "W": 1, "act": 1, "params": 1},
  {"name": "block1", "F": 1, "B": 2, "act": 1, "params": 1},
  {"name": "head", "F": 3, "B": 6, "W": 3, "act": 4, "params": 4}
 ], "comm": 0.1, "bw": 10}`

func TestReadAndCost(t *testing.T) {
	m, err := Read(strings.NewReader(llm))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 4 || m.Comm != 0.1 || m.BW != 10 {
		t.Fatalf("read %+v", m)
	}
	// block1 gave B alone: I = W = 1; head B and W: I = 3.
	if l := m.Layers[2]; l.I != 1 || l.W != 1 {
		t.Errorf("block1 = %+v, want I = W = 1", l)
	}
	if l := m.Layers[3]; l.I != 3 || l.W != 3 {
		t.Errorf("head = %+v, want I = W = 3", l)
	}
	p, err := Even(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Cost(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		got, want []float64
	}{
		{"F", c.F, []float64{1.3, 4}},
		{"I", c.I, []float64{1, 4}},
		{"W", c.W, []float64{1.3, 4}},
		{"B", c.B, []float64{2.3, 8}},
		{"act", c.Act, []float64{1, 4}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if c.Comm != 0.1 || c.BW != 10 {
		t.Errorf("comm %g bw %g", c.Comm, c.BW)
	}
}

func TestEven(t *testing.T) {
	for _, tc := range []struct {
		n, s int
		want []int
	}{
		{4, 2, []int{0, 2, 4}},
		{5, 2, []int{0, 3, 5}},
		{7, 3, []int{0, 3, 5, 7}},
		{3, 3, []int{0, 1, 2, 3}},
		{1, 1, []int{0, 1}},
	} {
		p, err := Even(tc.n, tc.s)
		if err != nil || !slices.Equal(p.Bounds, tc.want) {
			t.Errorf("Even(%d, %d) = %v, %v; want %v", tc.n, tc.s, p.Bounds, err, tc.want)
		}
	}
	if _, err := Even(3, 4); err == nil || !strings.Contains(err.Error(), "3 layers cannot fill 4 stages") {
		t.Errorf("Even(3, 4): %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, "EOF"},
		{`{"layers": []}`, "no layers"},
		{`{"layers": [{"F": 1, "act": 1, "params": 1}]}`, "layer 0: no backward"},
		{`{"layers": [{"name": "x", "B": 1, "act": 1, "params": 1}]}`, `layer 0 ("x"): F is missing`},
		{`{"layers": [{"F": -1, "B": 1, "act": 1, "params": 1}]}`, "F = -1; want a finite value"},
		{`{"layers": [{"F": 1, "B": 1, "W": 2, "act": 1, "params": 1}]}`, "B = 1 is less than its part"},
		{`{"layers": [{"F": 1, "B": 3, "I": 1, "W": 1, "act": 1, "params": 1}]}`, "B = 3 but I + W = 2"},
		{`{"layers": [{"F": 1, "B": 1, "act": 1, "params": 1, "flops": 2}]}`, `unknown field "flops"`},
		{`{"layers": [{"F": 1, "B": 1, "act": 1, "params": 1}], "bw": -1}`, "bw = -1"},
		{`{"layers": [{"F": 1e300, "B": 1, "act": 1, "params": 1}]}`, "F = 1e+300"},
		{`{"layers": [{"F": 1, "B": 1, "act": 1, "params": 1}]} {}`, "text after"},
		{`{"layers": [{"F": 1, "B": 1, "act": 1, "params": 1}], "comm": 1, "comm": 2}`, `key "comm" given twice`},
		{`{"layers": [{"F": 1, "B": 1, "act": 1, "params": 1}], "layers": [{"F": 2, "B": 1, "act": 1, "params": 1}]}`, `key "layers" given twice`},
		{`{"layers": [{"F": 1, "B": 1, "act": 1, "params": 1, "F": 2}]}`, `layer 0: key "F" given twice`},
		{`{"layers": [{"F": 1, "B": 1, "act": 1, "params": 1}, {"F": 1, "B": 1, "act": 1, "params": 1, "Act": 2}]}`, `layer 1: key "Act" given twice (keys match whatever their case)`},
		{`{"layers": [{"name": "` + strings.Repeat("n", MaxName+1) + `", "F": 1, "B": 1, "act": 1, "params": 1}]}`, "name of 257 bytes"},
	} {
		_, err := Read(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Read(%.60q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	many := `{"layers": [` + strings.Repeat(`{"F":1,"B":1,"act":1,"params":1},`, MaxLayers) + `{"F":1,"B":1,"act":1,"params":1}]}`
	if _, err := Read(strings.NewReader(many)); err == nil || !strings.Contains(err.Error(), "more than 65535 layers") {
		t.Errorf("MaxLayers+1 layers: %v", err)
	}
	if _, err := Read(strings.NewReader(`{"layer": []}`)); err == nil || !strings.Contains(err.Error(), `unknown key "layer"`) {
		t.Errorf("a misspelt top-level key: %v", err)
	}
	big := strings.NewReader(`{"layers": [` + strings.Repeat(" ", MaxBytes) + `]}`)
	if _, err := Read(big); err == nil || !strings.Contains(err.Error(), "over 16 MiB") {
		t.Errorf("a file over the limit: %v", err)
	}
}

// FuzzRead: any input is read or refused with an error, and a read model's
// every even split gives a cost model the simulator accepts.
func FuzzRead(f *testing.F) {
	f.Add(llm)
	f.Add(`{"layers": [{"F": 1, "B": 2, "act": 1, "params": 1}]}`)
	f.Add(`{"layers": [{"F": 0, "I": 0, "W": 0, "act": 0, "params": 0}], "bw": 1e-9}`)
	f.Add(`{"layers": [{"F": 1, "f": 2, "B": 2, "act": 1, "params": 1}], "comm": 1, "comm": 2}`)
	f.Add(`{"layers": [{"name": "embed", "F": 1, "B": 2, "act": 1, "params": 1, "recompute": true}, {"F": 1, "B": 2, "R": 0.5, "act": 1, "params": 1, "recompute": false}]}`)
	f.Add(`{"layers": [{"F": 1, "B": 2, "act": 1, "params": 1, "recompute": 1}]}`)
	f.Add(`{"layers": [{"F": 1, "B": 2, "act": 1, "params": 1, "recompute": true, "recompute": true}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		m, err := Read(strings.NewReader(in))
		if err != nil {
			return
		}
		for s := 1; s <= min(len(m.Layers), 4); s++ {
			p, err := Even(len(m.Layers), s)
			if err != nil {
				t.Fatalf("Even(%d, %d): %v", len(m.Layers), s, err)
			}
			if _, err := m.Cost(p); err != nil {
				t.Fatalf("Cost of a read model, %d stages: %v", s, err)
			}
		}
	})
}
