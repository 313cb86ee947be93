package pipe

import (
	"slices"
	"testing"
)

func TestDecodeOps(t *testing.T) {
	// The kinds' letters round-trip in abi (TestKindOfCode); here, how
	// DecodeOps uses them.
	got := DecodeOps("LrFsOX?", []At{
		0x0000_0003_0003_ffff, // 0DATA_LOAD3 slot 3
		0x0001_0000_0000_0004, // 1RECV_F0 peer 0, slot 4
		0x0003_0011_0002_0001, // 3F17 slot 2, src slot 1
		0x0000_0003_0001_0003, // 0SEND_F3 peer 1, slot 3
		0xffff_ffff_ffff_ffff, // OPT_STEP
		0xffff_ffff_ffff_ffff, // an overlap header
		0x0000_0000_0000_0000, // an unknown letter
		0x0000_0000_0000_0000, // beyond the kinds
	})
	want := []Op{
		{OpDataLoad, 0, 3, -1, 3, -1},
		{OpRecvF, 1, 0, 0, 4, -1},
		{OpForward, 3, 17, -1, 2, 1},
		{OpSendF, 0, 3, 1, 3, -1},
		{OpOptStep, -1, -1, -1, -1, -1},
		{OpOverlapFB, -1, -1, -1, -1, -1},
		{OpInvalid, 0, 0, -1, 0, 0},
		{OpInvalid, -1, -1, -1, -1, -1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("DecodeOps:\n got %v\nwant %v", got, want)
	}
}
