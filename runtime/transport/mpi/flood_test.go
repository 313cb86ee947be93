//go:build mpi

package mpi_test

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
)

// The flood (issue 35): rank 1 sends floodMessages 32-byte tensors to rank
// 0, which receives none until its queue from rank 1 is full. The queue
// must stop at its bound (bytes plus wire.FrameOverhead per message, or
// the message count) and rank 0's resident memory must grow by at most
// 1.5× the byte bound; then rank 0 drains the flood, in order.
const (
	floodBound    = 16 << 20
	floodFrames   = 4096
	floodMessages = 4 * floodBound / (32 + wire.FrameOverhead)
)

// floodVar picks the bound under test: bytes or frames.
const floodVar = "PPGEN_MPI_FLOOD"

// TestMPIFlood floods one rank with tiny messages under each bound.
func TestMPIFlood(t *testing.T) {
	for _, bound := range []string{"bytes", "frames"} {
		t.Run(bound, func(t *testing.T) {
			out, err := runJob(t, 2, "flood", floodVar+"="+bound)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(out, "rank 0: flood ok") {
				t.Fatalf("rank 0 did not report the flood bounded:\n%s", out)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "rank 0: flood") {
					t.Log(line)
				}
			}
		})
	}
}

// residentBytes is this process's resident set (VmRSS).
func residentBytes(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// childFlood is rank 0 (flooded) or rank 1 (flooding).
func childFlood(t *testing.T) {
	cfg := mpi.Config{Timeout: 30 * time.Second, Fingerprint: "flood", RecvQueueBytes: floodBound}
	byFrames := os.Getenv(floodVar) == "frames"
	if byFrames {
		cfg.RecvQueueBytes, cfg.RecvQueueFrames = 1<<30, floodFrames
	}
	tr, err := mpi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Rank() == 1 {
		x := tensor.New(tensor.WithShape(8), tensor.WithBacking(make([]float32, 8)))
		for k := range floodMessages {
			if err := tr.Send(0, abi.DataChannel, transport.Tag{Micro: int32(k)}, x); err != nil {
				t.Fatalf("send %d: %v", k, err)
			}
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	before := residentBytes(t)
	// Wait until the queue stops growing: full.
	var bytes int64
	var frames int
	for last, still := -1, 0; still < 20; time.Sleep(20 * time.Millisecond) {
		bytes, frames, _, _ = mpi.QueueStats(tr, 1)
		if frames == last {
			still++
		} else {
			last, still = frames, 0
		}
	}
	grew := residentBytes(t) - before
	_, _, peakBytes, peakFrames := mpi.QueueStats(tr, 1)
	fmt.Printf("rank 0: flood of %d-byte messages: queue full at %d messages, %d bytes charged (peak %d, %d messages); resident grew %.1f MiB (%.2f× the %d MiB byte bound)\n",
		32, frames, bytes, peakBytes, peakFrames, float64(grew)/(1<<20), float64(grew)/floodBound, floodBound>>20)
	frame := int64(32 + wire.FrameOverhead)
	switch {
	case frames >= floodMessages:
		t.Fatalf("the whole flood (%d messages) was queued: no bound", frames)
	case !byFrames && (peakBytes > floodBound+wire.Channels*frame || bytes < floodBound-frame):
		t.Fatalf("queue peaked at %d bytes, stopped at %d: want it full at the %d-byte bound (within a message per channel)", peakBytes, bytes, floodBound)
	case byFrames && (peakFrames > floodFrames+wire.Channels || frames < floodFrames):
		t.Fatalf("queue peaked at %d messages, stopped at %d: want it full at the %d-message bound", peakFrames, frames, floodFrames)
	case !byFrames && !raceEnabled && float64(grew) > 1.5*floodBound:
		t.Fatalf("resident memory grew %d bytes, over 1.5× the %d-byte bound", grew, floodBound)
	}
	for k := range floodMessages {
		tag, x, err := tr.Recv(1, abi.DataChannel)
		if err != nil {
			t.Fatalf("recv %d: %v", k, err)
		}
		if tag.Micro != int32(k) || len(x.Float32s()) != 8 {
			t.Fatalf("message %d: tag %v, %d elements", k, tag, len(x.Float32s()))
		}
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("rank 0: flood ok")
}
