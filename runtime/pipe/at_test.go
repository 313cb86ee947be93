package pipe

import "testing"

func TestAtRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		stage, micro, c, d int
		want               At
		ok                 bool
	}{
		{3, 17, 2, -1, 0x0003_0011_0002_ffff, true},
		{0, 0, 0, 0, 0, true},
		{-1, -1, -1, -1, 0xffff_ffff_ffff_ffff, true},
		{65534, 65534, 65534, 65534, 0xfffe_fffe_fffe_fffe, true},
		{65535, 0, 0, 0, 0, false},
		{0, -2, 0, 0, 0, false},
		{0, 0, 1 << 20, 0, 0, false},
		{0, 0, 0, -1 << 40, 0, false},
	} {
		a, ok := PackAt(tc.stage, tc.micro, tc.c, tc.d)
		if ok != tc.ok {
			t.Errorf("PackAt(%d, %d, %d, %d): ok = %v, want %v", tc.stage, tc.micro, tc.c, tc.d, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if a != tc.want {
			t.Errorf("PackAt(%d, %d, %d, %d) = %#x, want %#x", tc.stage, tc.micro, tc.c, tc.d, uint64(a), uint64(tc.want))
		}
		if s, m, c, d := a.Unpack(); s != tc.stage || m != tc.micro || c != tc.c || d != tc.d {
			t.Errorf("%#x.Unpack() = %d, %d, %d, %d", uint64(a), s, m, c, d)
		}
	}
}
