package torch

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/verify"
)

// TestRead: the dialects' names, hand-translated.
func TestRead(t *testing.T) {
	for _, tc := range []struct {
		csv  string
		d    Dialect
		want string // text form; "" for an error
	}{
		{"0F0,0B0\n", Current, "rank 0: 0F0 0B0\n"},
		{"0F0,0I0,0W0\n", Current, "rank 0: 0F0 0I0 0W0\n"},
		{"0F0,0BW0\n", Legacy, "rank 0: 0F0 0B0\n"},
		{"0F0,0B0,0W0\n", Legacy, "rank 0: 0F0 0I0 0W0\n"},
		{"0F0,0B0\n", Legacy, "rank 0: 0F0 0B0\n"},
		{"0F0,0I0,0W0\n", Legacy, ""},
		{"0F0,0BW0\n", Current, ""},
	} {
		p, err := Read(strings.NewReader(tc.csv), tc.d)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s %q: read %q, want an error", tc.d, tc.csv, ir.FormatText(p))
		case tc.want != "" && err != nil:
			t.Errorf("%s %q: %v", tc.d, tc.csv, err)
		case tc.want != "" && ir.FormatText(p) != tc.want:
			t.Errorf("%s %q: read %q, want %q", tc.d, tc.csv, ir.FormatText(p), tc.want)
		}
	}
}

func text(t *testing.T, s string) ir.Program {
	t.Helper()
	p, err := ir.ReadText(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWrite: what Write leaves out, adds and refuses.
func TestWrite(t *testing.T) {
	lowered := "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0 OPT_STEP\n"
	for _, tc := range []struct {
		name, program string
		d             Dialect
		o             WriteOptions
		want          string // the CSV, or the error's text
		fails         bool
	}{
		{"data and optimizer steps left out", lowered, Current, WriteOptions{},
			"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", false},
		{"REDUCE_GRAD after the last backward and its transfers", lowered, Current, WriteOptions{ReduceGrad: true},
			"0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD\n1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD\n", false},
		{"legacy names", "rank 0: 0F0 0I0 0W0\n", Legacy, WriteOptions{}, "0F0,0B0,0W0\n", false},
		{"legacy has no REDUCE_GRAD", "rank 0: 0F0 0B0 0REDUCE_GRAD\n", Legacy, WriteOptions{}, "PyTorch 2.4 to 2.6 have no REDUCE_GRAD", true},
		{"no OVERLAP_B_F", "rank 0: 0F0 0F1 (0B0;0F1)OVERLAP_B_F 0B1\n", Current, WriteOptions{}, "OVERLAP_B_F", true},
		{"no forward-only program (PyTorch's _validate_schedule wants the backwards)", "rank 0: 0F0 0SEND_F0\nrank 1: 1RECV_F0 1F0\n", Current, WriteOptions{}, "forward-only", true},
		{"batches that only make it safe are refused", "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 BATCH_BEGIN 0SEND_F1 0RECV_B0 BATCH_END 0B0 0RECV_B1 0B1 OPT_STEP\n" +
			"rank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 BATCH_BEGIN 1SEND_B0 1RECV_F1 BATCH_END 1DATA_LOAD1 1F1 1B1 1SEND_B1 OPT_STEP\n", Current, WriteOptions{}, "without them it is not safe: deadlock", true},
		{"batches it does not need go", "rank 0: 0DATA_LOAD0 BATCH_BEGIN 0F0 BATCH_END 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0 OPT_STEP\n", Current, WriteOptions{},
			"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", false},
	} {
		var b bytes.Buffer
		err := Write(&b, text(t, tc.program), tc.d, tc.o)
		switch {
		case tc.fails && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		case tc.fails && b.Len() > 0:
			t.Errorf("%s: wrote %q before failing", tc.name, b.String())
		case !tc.fails && (err != nil || b.String() != tc.want):
			t.Errorf("%s: wrote %q (%v), want %q", tc.name, b.String(), err, tc.want)
		}
	}
	two := text(t, "rank 0: 0F0 0B0\n")
	two.Copies = 2
	if err := Write(new(bytes.Buffer), two, Current, WriteOptions{}); err == nil || !strings.Contains(err.Error(), "2 model copies") {
		t.Errorf("two copies: %v", err)
	}
}

// TestImport: notes, the legacy hint, and the FSDP actions kept, refused
// with a hint, or dropped.
func TestImport(t *testing.T) {
	comms := "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"
	im, err := Import("two.csv", strings.NewReader(comms), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// DATA_LOAD before the F of the first and the last stage, one OPT_STEP per rank.
	if im.Form() != "with comms" || len(im.Notes) != 1 || im.Notes[0] != "added 4 DATA_LOAD and OPT_STEP steps PyTorch leaves implicit" {
		t.Errorf("form %q notes %q", im.Form(), im.Notes)
	}
	if _, err := Import("bw.csv", strings.NewReader("0F0,0BW0\n"), ImportOptions{}); err == nil || !strings.Contains(err.Error(), "bw.csv: ") || !strings.Contains(err.Error(), "use -from torch-csv-legacy") {
		t.Errorf("BW in current names: %v", err)
	}
	sharded := "0F0,0UNSHARD,0B0\n" // computes before its UNSHARD
	_, err = Import("s.csv", strings.NewReader(sharded), ImportOptions{})
	var ve *verify.Error
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "pass -drop-fsdp") {
		t.Errorf("sharded compute: %v; want a *verify.Error with the -drop-fsdp hint", err)
	}
	im, err = Import("s.csv", strings.NewReader(sharded), ImportOptions{DropFSDP: true, Lower: gen.Options{}})
	if err != nil || len(im.Notes) == 0 || !strings.HasPrefix(im.Notes[0], "dropped 1 FSDP actions") {
		t.Errorf("-drop-fsdp: %v, notes %q", err, im.Notes)
	}
}
