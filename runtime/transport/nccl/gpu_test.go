//go:build linux && (amd64 || arm64)

package nccl

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// TestGPUSelf runs on a real GPU and NCCL (scripts/gpu-nccl.sh sets
// PPGEN_NCCL_GPU=1; the libraries come from the loader's search path or
// PPGEN_CUDART_LIB and PPGEN_NCCL_LIB): a world of one rank sends every
// sample to itself and receives it, one at a time and as one batch, then
// times a 64 MiB round trip through the device.
func TestGPUSelf(t *testing.T) {
	if os.Getenv("PPGEN_NCCL_GPU") != "1" {
		t.Skip("needs a GPU and NCCL: run scripts/gpu-nccl.sh (PPGEN_NCCL_GPU=1)")
	}
	tr, err := Dial(context.Background(), Config{TCP: transport.TCPConfig{World: 1, Timeout: time.Minute}, Device: AutoDevice})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("device %d, CUDA runtime %s, NCCL %s", tr.Device(), tr.lib.cudartPath, tr.lib.ncclPath)
	for i, s := range samples {
		ch := abi.ActChannel + abi.Channel(i%wire.Channels)
		if err := tr.Send(0, ch, transport.Tag{Stage: 1, Micro: int32(i)}, s.make(0, i)); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		tag, x, err := tr.Recv(0, ch)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if tag != (transport.Tag{Stage: 1, Micro: int32(i)}) {
			t.Errorf("sample %d: tag %v", i, tag)
		}
		if err := s.check(x, 0, i); err != nil {
			t.Error(err)
		}
	}
	ops := []transport.BatchOp{
		{Peer: 0, Ch: abi.ActChannel, Send: true, Tag: transport.Tag{Micro: 1}, T: samples[0].make(0, 1)},
		{Peer: 0, Ch: abi.GradChannel, Send: true, Tag: transport.Tag{Micro: 2}, T: samples[7].make(0, 2)},
		{Peer: 0, Ch: abi.GradChannel},
		{Peer: 0, Ch: abi.ActChannel},
	}
	if err := tr.Batch(ops); err != nil {
		t.Fatal(err)
	}
	if err := samples[7].check(ops[2].T, 0, 2); err != nil {
		t.Error(err)
	}
	if err := samples[0].check(ops[3].T, 0, 1); err != nil {
		t.Error(err)
	}
	big := tensor.New(tensor.WithShape(16<<20), tensor.WithBacking(make([]float32, 16<<20)))
	const rounds = 5
	start := time.Now()
	for range rounds {
		if err := tr.Send(0, abi.ActChannel, transport.Tag{}, big); err != nil {
			t.Fatal(err)
		}
		if _, _, err := tr.Recv(0, abi.ActChannel); err != nil {
			t.Fatal(err)
		}
	}
	d := time.Since(start) / rounds
	t.Logf("64 MiB self send+receive (host to device, NCCL, device to host): %v, %.2f GB/s", d, float64(64<<20)/d.Seconds()/1e9)
}

// TestGPUCollectives runs NCCL's collectives on real GPUs
// (scripts/gpu-nccl.sh; PPGEN_NCCL_GPU=1): a world of one rank with a group
// of one, every collective (within the tolerance of NCCL's own order of
// sums); then, with PPGEN_NCCL_GPUS ≥ 2, TestCollectives's world of up to
// 4 ranks, one GPU each.
func TestGPUCollectives(t *testing.T) {
	if !onGPU() {
		t.Skip("needs a GPU and NCCL: run scripts/gpu-nccl.sh (PPGEN_NCCL_GPU=1)")
	}
	tr, err := Dial(context.Background(), Config{TCP: transport.TCPConfig{World: 1, Timeout: time.Minute}, Device: AutoDevice})
	if err != nil {
		t.Fatal(err)
	}
	g, err := tr.NewGroup([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	if err := groupChecks(g, []int{0}); err != nil {
		t.Error(err)
	}
	if err := tr.Close(); err != nil {
		t.Error(err)
	}
	gpus, _ := strconv.Atoi(os.Getenv("PPGEN_NCCL_GPUS"))
	if gpus < 2 {
		t.Logf("PPGEN_NCCL_GPUS=%q: the multi-rank collectives need 2 GPUs or more, skipped", os.Getenv("PPGEN_NCCL_GPUS"))
		return
	}
	n := min(gpus, 4)
	start := time.Now()
	for r, out := range world(t, n, "gpu-coll") {
		if res := result(out); res != "OK" {
			t.Errorf("rank %d: %s\n%s", r, res, out)
		}
	}
	t.Logf("collectives on %d ranks, one GPU each: %v", n, time.Since(start))
}
