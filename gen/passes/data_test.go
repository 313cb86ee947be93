package passes

import (
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

func TestInsertData(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "two stages on two ranks: input on stage 0, labels on the last",
			in:   "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1",
			want: "rank 0: 0DATA_LOAD0 0F0 0DATA_LOAD1 0F1 0B0 0B1\nrank 1: 1DATA_LOAD0 1F0 1B0 1DATA_LOAD1 1F1 1B1\n",
		},
		{
			name: "single stage: one load serves input and labels",
			in:   "rank 0: 0F0 0B0 0F1 0B1",
			want: "rank 0: 0DATA_LOAD0 0F0 0B0 0DATA_LOAD1 0F1 0B1\n",
		},
		{
			name: "V placement: first and last stage on rank 0",
			in:   "rank 0: 0F0 3F0 3B0 0B0\nrank 1: 1F0 2F0 2B0 1B0",
			want: "rank 0: 0DATA_LOAD0 0F0 3DATA_LOAD0 3F0 3B0 0B0\nrank 1: 1F0 2F0 2B0 1B0\n",
		},
		{
			name: "forward inside an overlap: load before the composite",
			in:   "rank 0: 0F0 (0F1;0B0)OVERLAP_F_B 0B1",
			want: "rank 0: 0DATA_LOAD0 0F0 0DATA_LOAD1 (0F1;0B0)OVERLAP_F_B 0B1\n",
		},
		{
			name: "idempotent: existing loads are kept, not repeated",
			in:   "rank 0: 0DATA_LOAD0 0F0 0B0 0F1 0B1",
			want: "rank 0: 0DATA_LOAD0 0F0 0B0 0DATA_LOAD1 0F1 0B1\n",
		},
		{
			name: "middle stages get nothing",
			in:   "rank 0: 0F0 0B0\nrank 1: 1F0 1B0\nrank 2: 2F0 2B0",
			want: "rank 0: 0DATA_LOAD0 0F0 0B0\nrank 1: 1F0 1B0\nrank 2: 2DATA_LOAD0 2F0 2B0\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := mustParse(tc.in)
			before := ir.FormatText(in)
			got := InsertData(in)
			if s := ir.FormatText(got); s != tc.want {
				t.Errorf("got\n%swant\n%s", s, tc.want)
			}
			if ir.FormatText(in) != before {
				t.Errorf("input modified")
			}
			if again := ir.FormatText(InsertData(got)); again != tc.want {
				t.Errorf("not idempotent:\n%s", again)
			}
		})
	}
}

func TestInsertOptStep(t *testing.T) {
	in := mustParse("rank 0: 0F0 0B0\nrank 1: 1F0 1B0 OPT_STEP\n")
	got := ir.FormatText(InsertOptStep(in))
	want := "rank 0: 0F0 0B0 OPT_STEP\nrank 1: 1F0 1B0 OPT_STEP\n"
	if got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
	if ir.FormatText(in) != "rank 0: 0F0 0B0\nrank 1: 1F0 1B0 OPT_STEP\n" {
		t.Errorf("input modified")
	}
}
