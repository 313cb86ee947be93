package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/verify"
)

// batchBase is two ranks whose middle transfers each rank batches; every
// case below edits it.
const batchBase = "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 BATCH_BEGIN 0SEND_F1 0RECV_B0 BATCH_END 0B0 0RECV_B1 0B1 OPT_STEP\n" +
	"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 BATCH_BEGIN 1SEND_B0 1RECV_F1 BATCH_END 1F1 1B1 1SEND_B1 OPT_STEP\n"

func TestBatchRules(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		want           string // "" accepted
	}{
		{"accepted", "", "", ""},
		{"nested", "BATCH_BEGIN 0SEND_F1", "BATCH_BEGIN BATCH_BEGIN 0SEND_F1", "batches do not nest"},
		{"end without begin", "0B0 0RECV_B1", "0B0 BATCH_END 0RECV_B1", "a BATCH_END without a BATCH_BEGIN"},
		{"empty", "0B0 0RECV_B1", "0B0 BATCH_BEGIN BATCH_END 0RECV_B1", "an empty batch"},
		{"never closed", "1B1 1SEND_B1 OPT_STEP", "1B1 OPT_STEP BATCH_BEGIN 1SEND_B1", "never closed"},
		{"compute inside", "0RECV_B0 BATCH_END 0B0", "0RECV_B0 0B0 BATCH_END", "a batch holds only transfers"},
		{"local inside", "1SEND_B0 1RECV_F1 BATCH_END", "1SEND_B0 1DATA_LOAD1 1RECV_F1 BATCH_END", "a batch holds only transfers"},
		{"a batch of one", "0RECV_B1", "BATCH_BEGIN 0RECV_B1 BATCH_END", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := batchBase
			if tc.old != "" {
				if !strings.Contains(text, tc.old) {
					t.Fatalf("%q not in the program", tc.old)
				}
				text = strings.Replace(text, tc.old, tc.new, 1)
				if tc.name == "local inside" {
					text = strings.Replace(text, "1DATA_LOAD1 BATCH_BEGIN", "BATCH_BEGIN", 1)
				}
			}
			p, err := ir.ParseText(text)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.ResolvePeers(); err != nil {
				t.Fatal(err)
			}
			rep, err := verify.Check(p, verify.Options{})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if n := strings.Count(text, "BATCH_BEGIN") - strings.Count(tc.new, "BATCH_BEGIN"); rep.Batches != n {
					t.Errorf("Batches = %d, want %d", rep.Batches, n)
				}
				return
			}
			var ve *verify.Error
			if !errors.As(err, &ve) || ve.Code != verify.Structure || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a structure error containing %q", err, tc.want)
			}
		})
	}
}
