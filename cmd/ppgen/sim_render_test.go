package main

import (
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSVGRenders renders docs/zbv_p4_m8.svg with scripts/render-svg.sh
// (headless Chromium) and checks the picture: the SVG's size, and the
// colours of forward boxes, of a rank's second-stage forwards, of input and
// weight gradients and of idle lanes all present in quantity. It is skipped
// when Chromium is not installed or under -short.
func TestSVGRenders(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no browser")
	}
	found := false
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if _, err := exec.LookPath(b); err == nil {
			found = true
		}
	}
	if !found {
		t.Skip("no Chromium installed (apt-get install -y chromium); the render check needs it")
	}
	out := filepath.Join(t.TempDir(), "zbv.png")
	cmd := exec.Command("sh", "scripts/render-svg.sh", "docs/zbv_p4_m8.svg", out)
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render-svg.sh: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 175 {
		t.Errorf("rendered %dx%d, want the SVG's 1200x175", b.Dx(), b.Dy())
	}
	colours := map[string][3]uint32{
		"F":        {0x4e, 0x79, 0xa7},
		"F, later": {0xaf, 0xc3, 0xd7},
		"I":        {0xf2, 0x8e, 0x2b},
		"W":        {0xb0, 0x7a, 0xa1},
		"idle":     {0xee, 0xee, 0xee},
	}
	count := map[string]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			for name, c := range colours {
				if near8(r>>8, c[0]) && near8(g>>8, c[1]) && near8(bl>>8, c[2]) {
					count[name]++
				}
			}
		}
	}
	for name := range colours {
		// A box is about 22x20 pixels; want the area of several.
		if count[name] < 1500 {
			t.Errorf("%d pixels of the %s colour, want a visible amount (≥ 1500)", count[name], name)
		}
	}
}

func near8(a, b uint32) bool { return a+3 >= b && b+3 >= a }
