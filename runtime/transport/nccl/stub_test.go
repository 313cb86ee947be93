//go:build linux && (amd64 || arm64)

package nccl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// The tests run against the test double in testdata/ncclstub (see stub.h):
// a CUDA runtime and NCCL with the same C ABI, built here with the system C
// compiler. Multi-process tests re-run this test binary as the ranks
// (TestChild).

var (
	stubOnce sync.Once
	stubPath string
	stubErr  error
	stubDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if stubDir != "" {
		os.RemoveAll(stubDir)
	}
	os.Exit(code)
}

// stub returns the path of the test double's library (both the CUDA
// runtime and NCCL), building it once; it skips the test when there is no
// C compiler.
func stub(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NCCLTEST_STUB"); p != "" {
		return p // a child: the parent built it
	}
	stubOnce.Do(func() {
		cc := os.Getenv("CC")
		if cc == "" {
			cc = "cc"
		}
		if _, err := exec.LookPath(cc); err != nil {
			stubErr = fmt.Errorf("skip: no C compiler (%s: %v): the NCCL transport's tests build their test double (testdata/ncclstub) with one; install gcc or clang, or set CC", cc, err)
			return
		}
		dir, err := os.MkdirTemp("", "ncclstub")
		if err != nil {
			stubErr = err
			return
		}
		stubDir = dir
		out := filepath.Join(dir, "libncclstub.so")
		cmd := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", out,
			filepath.Join("testdata", "ncclstub", "cudart.c"), filepath.Join("testdata", "ncclstub", "nccl.c"), "-lpthread")
		if msg, err := cmd.CombinedOutput(); err != nil {
			stubErr = fmt.Errorf("building the test double: %v\n%s", err, msg)
			return
		}
		stubPath = out
	})
	if stubErr != nil {
		if strings.HasPrefix(stubErr.Error(), "skip: ") {
			t.Skip(strings.TrimPrefix(stubErr.Error(), "skip: "))
		}
		t.Fatal(stubErr)
	}
	return stubPath
}

func dialSelf(t *testing.T, cfg Config) *Transport {
	t.Helper()
	lib := stub(t)
	cfg.TCP.World, cfg.TCP.Rank = 1, 0
	if cfg.CUDARTLib == "" {
		cfg.CUDARTLib = lib
	}
	if cfg.NCCLLib == "" {
		cfg.NCCLLib = lib
	}
	tr, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// sample is tensor i of a test: its dtype and shape from the table, its
// values from (from, i), so a receiver can tell what it got.
type sample struct {
	dt   tensor.Dtype
	dims []int
}

var samples = []sample{
	{tensor.Float32, []int{2, 3}},
	{tensor.Float64, []int{5}},
	{tensor.Float32, nil}, // scalar
	{tensor.Float64, nil}, // scalar
	{tensor.Float32, []int{0}},
	{tensor.Float64, []int{3, 0, 2}},
	{tensor.Float32, []int{1 << 18}}, // 1 MiB: more than a socket buffer
	{tensor.Float64, []int{2, 2, 2, 2}},
}

func value(from, i, k int) float64 { return float64(from*1000+i) + float64(k)/8 - 0.25 }

func (s sample) make(from, i int) *tensor.Dense {
	n := 1
	for _, d := range s.dims {
		n *= d
	}
	if s.dt == tensor.Float32 {
		v := make([]float32, n)
		for k := range v {
			v[k] = float32(value(from, i, k))
		}
		if s.dims == nil {
			return tensor.New(tensor.FromScalar(v[0]))
		}
		return tensor.New(tensor.WithShape(s.dims...), tensor.WithBacking(v))
	}
	v := make([]float64, n)
	for k := range v {
		v[k] = value(from, i, k)
	}
	if s.dims == nil {
		return tensor.New(tensor.FromScalar(v[0]))
	}
	return tensor.New(tensor.WithShape(s.dims...), tensor.WithBacking(v))
}

// check compares x with sample i from rank from.
func (s sample) check(x *tensor.Dense, from, i int) error {
	if x == nil {
		return fmt.Errorf("sample %d: nil tensor", i)
	}
	if x.Dtype() != s.dt {
		return fmt.Errorf("sample %d: dtype %v, want %v", i, x.Dtype(), s.dt)
	}
	want := tensor.Shape(s.dims)
	if s.dims == nil {
		want = tensor.ScalarShape()
	}
	if !x.Shape().Eq(want) {
		return fmt.Errorf("sample %d: shape %v, want %v", i, x.Shape(), want)
	}
	var got []float64
	if s.dt == tensor.Float32 {
		for _, f := range x.Float32s() {
			got = append(got, float64(f))
		}
	} else {
		got = x.Float64s()
	}
	n := want.TotalSize()
	if s.dims == nil {
		n = 1
	}
	if len(got) < n {
		return fmt.Errorf("sample %d: %d values, want %d", i, len(got), n)
	}
	for k := range n {
		w := value(from, i, k)
		if s.dt == tensor.Float32 {
			w = float64(float32(w))
		}
		if got[k] != w {
			return fmt.Errorf("sample %d from rank %d: value %d is %v, want %v", i, from, k, got[k], w)
		}
	}
	return nil
}

func TestSelfRoundTrip(t *testing.T) {
	tr := dialSelf(t, Config{})
	for i, s := range samples {
		ch := abi.ActChannel + abi.Channel(i%wire.Channels)
		tag := transport.Tag{Stage: int32(i), Micro: int32(-i)}
		if err := tr.Send(0, ch, tag, s.make(0, i)); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		got, x, err := tr.Recv(0, ch)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if got != tag {
			t.Errorf("sample %d: tag %v, want %v", i, got, tag)
		}
		if err := s.check(x, 0, i); err != nil {
			t.Error(err)
		}
	}
}

// TestSelfFIFO: FIFO per channel, whatever the order of the channels.
func TestSelfFIFO(t *testing.T) {
	tr := dialSelf(t, Config{})
	sends := []abi.Channel{abi.ActChannel, abi.GradChannel, abi.ActChannel, abi.DataChannel, abi.GradChannel}
	for i, ch := range sends {
		if err := tr.Send(0, ch, transport.Tag{Stage: int32(ch), Micro: int32(i)}, samples[i].make(0, i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []struct {
		ch abi.Channel
		i  int
	}{{abi.GradChannel, 1}, {abi.DataChannel, 3}, {abi.ActChannel, 0}, {abi.GradChannel, 4}, {abi.ActChannel, 2}} {
		tag, x, err := tr.Recv(0, want.ch)
		if err != nil {
			t.Fatal(err)
		}
		if tag.Micro != int32(want.i) {
			t.Errorf("recv %s: message %d, want %d", want.ch, tag.Micro, want.i)
		}
		if err := samples[want.i].check(x, 0, want.i); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := tr.Recv(0, abi.ActChannel); err == nil || !strings.Contains(err.Error(), "nothing was sent to this rank on act") {
		t.Errorf("recv with nothing sent: %v, want \"nothing was sent to this rank on act\"", err)
	}
}

// TestSelfBatch: a batch is one NCCL group (the test double logs groups).
func TestSelfBatch(t *testing.T) {
	log := filepath.Join(t.TempDir(), "groups")
	t.Setenv("NCCLSTUB_LOG", log)
	tr := dialSelf(t, Config{})
	ops := []transport.BatchOp{
		{Peer: 0, Ch: abi.ActChannel, Send: true, Tag: transport.Tag{Stage: 1, Micro: 2}, T: samples[0].make(0, 0)},
		{Peer: 0, Ch: abi.GradChannel, Send: true, Tag: transport.Tag{Stage: 3, Micro: 4}, T: samples[6].make(0, 6)},
		{Peer: 0, Ch: abi.GradChannel},
		{Peer: 0, Ch: abi.ActChannel},
	}
	if err := tr.Batch(ops); err != nil {
		t.Fatal(err)
	}
	if ops[2].Tag != (transport.Tag{Stage: 3, Micro: 4}) || ops[3].Tag != (transport.Tag{Stage: 1, Micro: 2}) {
		t.Errorf("tags %v %v, want (3,4) and (1,2)", ops[2].Tag, ops[3].Tag)
	}
	if err := samples[6].check(ops[2].T, 0, 6); err != nil {
		t.Error(err)
	}
	if err := samples[0].check(ops[3].T, 0, 0); err != nil {
		t.Error(err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 || strings.Count(lines[0], "send0:") != 2 || strings.Count(lines[0], "recv0:") != 2 {
		t.Errorf("groups issued:\n%s\nwant one group of 2 sends and 2 receives", b)
	}
	// A receive from self in a batch with no send first is refused before
	// anything is issued.
	err = tr.Batch([]transport.BatchOp{{Peer: 0, Ch: abi.DataChannel}})
	if err == nil || !strings.Contains(err.Error(), "batch op 0 (recv data from rank 0)") {
		t.Errorf("unmatched self receive: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	lib := stub(t)
	for _, c := range []struct {
		name         string
		cudart, nccl string
		devices      string
		is           error
		wants        []string
	}{
		{"no cudart", "/nonexistent/libcudart.so", lib, "", ErrNoLibrary,
			[]string{"CUDA runtime library /nonexistent/libcudart.so", CUDARTLibVar, "install the CUDA runtime"}},
		{"no nccl", lib, "/nonexistent/libnccl.so.2", "", ErrNoLibrary,
			[]string{"NCCL library /nonexistent/libnccl.so.2", NCCLLibVar, "install NCCL 2"}},
		{"wrong library", lib, "libc.so.6", "", ErrNoLibrary,
			[]string{"libc.so.6 has no symbol ncclGetUniqueId"}},
		{"no device", lib, lib, "0", ErrNoDevice,
			[]string{"no CUDA-capable device", "nvidia-smi", "one GPU per rank"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.devices != "" {
				t.Setenv("NCCLSTUB_DEVICES", c.devices)
			}
			_, err := Dial(context.Background(), Config{TCP: transport.TCPConfig{World: 1}, CUDARTLib: c.cudart, NCCLLib: c.nccl})
			if !errors.Is(err, c.is) {
				t.Fatalf("error %v, want %v", err, c.is)
			}
			for _, w := range c.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestSelfAsyncError: the watchdog sees the communicator's asynchronous
// error and ends the blocked operation, naming the rank.
func TestSelfAsyncError(t *testing.T) {
	t.Setenv("NCCLSTUB_FAIL_RANK", "0")
	t.Setenv("NCCLSTUB_FAIL_GROUP", "1")
	tr := dialSelf(t, Config{TCP: transport.TCPConfig{Timeout: time.Minute}})
	if err := tr.Send(0, abi.ActChannel, transport.Tag{}, samples[0].make(0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.Recv(0, abi.ActChannel); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := tr.Send(0, abi.ActChannel, transport.Tag{}, samples[0].make(0, 0))
	if err == nil {
		t.Fatal("send on a failed communicator succeeded")
	}
	for _, w := range []string{"transport: rank 0: send act to rank 0: NCCL asynchronous error on device 0: ncclCommGetAsyncError: unhandled system error", "(code 2, NCCL "} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the failure took %v to surface (watch interval %v)", d, DefaultWatchInterval)
	}
	if err := tr.Send(0, abi.ActChannel, transport.Tag{}, samples[0].make(0, 0)); err == nil {
		t.Error("a send after the failure succeeded")
	}
}

// world runs the scenario on n ranks, each a child process, and returns
// their outputs. The ranks load the test double, except in a "gpu-"
// scenario (the libraries of the loader's search path, or the environment's
// PPGEN_CUDART_LIB and PPGEN_NCCL_LIB).
func world(t *testing.T, n int, scenario string, env ...string) []string {
	t.Helper()
	lib := ""
	if !strings.HasPrefix(scenario, "gpu-") {
		lib = stub(t)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	outs := make([]bytes.Buffer, n)
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		c := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestChild$", "-test.v=false")
		c.Env = append(os.Environ(), "NCCLTEST_SCENARIO="+scenario, "NCCLTEST_RANK="+strconv.Itoa(r), "NCCLTEST_WORLD="+strconv.Itoa(n),
			"NCCLTEST_ADDR="+addr)
		if lib != "" {
			c.Env = append(c.Env, "NCCLTEST_STUB="+lib, NCCLLibVar+"="+lib, CUDARTLibVar+"="+lib)
		}
		for _, e := range env {
			// "R<rank>:K=V" is for that rank only.
			if rest, ok := strings.CutPrefix(e, "R"+strconv.Itoa(r)+":"); ok {
				c.Env = append(c.Env, rest)
			} else if !strings.HasPrefix(e, "R") || !strings.Contains(e, ":") {
				c.Env = append(c.Env, e)
			}
		}
		if r == 0 {
			c.ExtraFiles = []*os.File{f}
		}
		c.Stdout, c.Stderr = &outs[r], &outs[r]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = c
	}
	res := make([]string, n)
	for r, c := range cmds {
		_ = c.Wait()
		res[r] = outs[r].String()
	}
	return res
}

// result is a child's last line: "OK" or "ERR: <error>".
func result(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := lines[i]; l == "OK" || strings.HasPrefix(l, "ERR: ") {
			return l
		}
	}
	return "no result: " + out
}

func TestWorld(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			for r, out := range world(t, n, "pipeline") {
				if res := result(out); res != "OK" {
					t.Errorf("rank %d: %s\n%s", r, res, out)
				}
			}
		})
	}
}

func TestWorldAsyncError(t *testing.T) {
	start := time.Now()
	outs := world(t, 3, "ring", "NCCLSTUB_FAIL_RANK=1", "NCCLSTUB_FAIL_GROUP=2")
	if d := time.Since(start); d > 40*time.Second {
		t.Errorf("took %v: the failure was not detected within a bounded time", d)
	}
	for r, out := range outs {
		res := result(out)
		want := "rank 1 aborted: NCCL asynchronous error on device 0: ncclCommGetAsyncError: unhandled system error"
		if r == 1 {
			want = "): NCCL asynchronous error on device 0: ncclCommGetAsyncError: unhandled system error"
		}
		if !strings.HasPrefix(res, "ERR: ") || !strings.Contains(res, want) {
			t.Errorf("rank %d: %s\nwant an error saying %q\n%s", r, res, want, out)
		}
	}
}

func TestWorldAbort(t *testing.T) {
	outs := world(t, 3, "abort")
	defer func() {
		if t.Failed() {
			t.Log(outs)
		}
	}()
	for r, out := range outs {
		res := result(out)
		want := "rank 2 aborted: stage exploded"
		if r == 2 {
			want = "stage exploded"
		}
		if !strings.HasPrefix(res, "ERR: ") || !strings.Contains(res, want) {
			t.Errorf("rank %d: %s\nwant an error saying %q\n%s", r, res, want, out)
		}
	}
}

// TestWorldNoDevice: a rank without a device fails at Dial, and the others
// fail naming it instead of waiting.
func TestWorldNoDevice(t *testing.T) {
	outs := world(t, 3, "pipeline", "R1:NCCLSTUB_DEVICES=0")
	for r, out := range outs {
		want := "rank 1 aborted: transport: rank 1: NCCL: no usable CUDA device"
		if r == 1 {
			want = "transport: rank 1: NCCL: no usable CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected"
		}
		if res := result(out); !strings.Contains(res, want) {
			t.Errorf("rank %d: %s\nwant %q\n%s", r, res, want, out)
		}
	}
}

// TestWorldSharedDevice: more local ranks than GPUs would put two ranks on
// one device, which NCCL refuses as "invalid usage" (seen on an H200 with
// NCCL 2.28): the rank that would share says so and how many ranks this
// host can run, and the other fails naming it.
func TestWorldSharedDevice(t *testing.T) {
	outs := world(t, 2, "shared-device", "NCCLSTUB_DEVICES=1")
	want := "local rank 1 would share device 0 with local rank 0: this host has 1 GPUs and NCCL refuses two ranks of a communicator on one GPU; start at most 1 ranks on this host"
	for r, out := range outs {
		if res := result(out); !strings.Contains(res, want) {
			t.Errorf("rank %d: %s\nwant %q\n%s", r, res, want, out)
		}
	}
}

// TestWorldBufferedBound: messages received ahead of the one awaited are
// bounded (MaxBufferedBytes); past it the rank fails and its peer hears.
func TestWorldBufferedBound(t *testing.T) {
	outs := world(t, 2, "buffered")
	for r, want := range []string{"rank 1 aborted: rank 0 sent 120 bytes on other channels ahead of the awaited message, over MaxBufferedBytes 100",
		"recv act from rank 0: rank 0 sent 120 bytes on other channels ahead of the awaited message, over MaxBufferedBytes 100"} {
		if res := result(outs[r]); !strings.Contains(res, want) {
			t.Errorf("rank %d: %s\nwant %q\n%s", r, res, want, outs[r])
		}
	}
}

// TestWorldGoodbye: a peer that closes is not a failure: the others go on,
// and a send or receive to it fails saying it closed.
func TestWorldGoodbye(t *testing.T) {
	for r, out := range world(t, 3, "goodbye") {
		if res := result(out); res != "OK" {
			t.Errorf("rank %d: %s\n%s", r, res, out)
		}
	}
}

func TestWorldProgressTimeout(t *testing.T) {
	outs := world(t, 2, "timeout")
	res := result(outs[0])
	for _, w := range []string{"transport: rank 0: send act to rank 1: no progress for 1s (PPGEN_TIMEOUT): rank 1 did not read act", "the NCCL operation did not complete"} {
		if !strings.Contains(res, w) {
			t.Errorf("rank 0: %s\nwant %q\n%s", res, w, outs[0])
		}
	}
	if res := result(outs[1]); res != "OK" {
		t.Errorf("rank 1: %s\n%s", res, outs[1])
	}
}

// TestChild is a rank of the tests above, run as a child process.
func TestChild(t *testing.T) {
	sc := os.Getenv("NCCLTEST_SCENARIO")
	if sc == "" {
		t.Skip("a rank of the multi-process tests, run by them")
	}
	err := child(sc)
	if err != nil {
		fmt.Println("ERR:", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	fmt.Println("OK")
	os.Exit(0)
}

func child(sc string) error {
	rank, _ := strconv.Atoi(os.Getenv("NCCLTEST_RANK"))
	n, _ := strconv.Atoi(os.Getenv("NCCLTEST_WORLD"))
	// HeartbeatTimeout is widened from its 6 s: no scenario here tests a
	// hung peer, and a machine loaded to several times its cores can leave
	// a child without CPU for that long (TestWorld/4 failed so once).
	cfg := Config{TCP: transport.TCPConfig{Rank: rank, World: n, MasterAddr: os.Getenv("NCCLTEST_ADDR"), Token: "5ec7e75ec7e75ec7e75ec7e75ec7e75e",
		Timeout: 30 * time.Second, HeartbeatTimeout: 30 * time.Second, Fingerprint: "test"}}
	if sc == "timeout" || sc == "coll-timeout" || sc == "coll-join-timeout" {
		cfg.TCP.Timeout = time.Second
	}
	if strings.HasPrefix(sc, "gpu-") || sc == "shared-device" {
		cfg.Device, cfg.LocalRank = AutoDevice, rank // one GPU per rank
	}
	if sc == "buffered" {
		cfg.MaxBufferedBytes = 100
	}
	if os.Getenv("NCCLTEST_DEBUG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		cfg.TCP.Logger = cfg.Logger
	}
	if rank == 0 {
		ln, err := net.FileListener(os.NewFile(3, "listener"))
		if err != nil {
			return err
		}
		cfg.TCP.Listener = ln
	}
	tr, err := Dial(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	if strings.HasPrefix(sc, "coll") || strings.HasPrefix(sc, "gpu-coll") {
		return collScenario(tr, sc, rank, n) // coll_test.go
	}
	next, prev := (rank+1)%n, (rank+n-1)%n
	switch sc {
	case "pipeline":
		// Forward along the chain: every sample, alternating channels
		// act and data, then the labels of rank 0 arrive on data while
		// rank 1 waits on act (received ahead and kept).
		for i, s := range samples {
			ch := []abi.Channel{abi.ActChannel, abi.DataChannel}[i%2]
			if rank > 0 {
				tag, x, err := tr.Recv(prev, ch)
				if err != nil {
					return err
				}
				if tag != (transport.Tag{Stage: int32(prev), Micro: int32(i)}) {
					return fmt.Errorf("sample %d from rank %d: tag %v", i, prev, tag)
				}
				if err := s.check(x, prev, i); err != nil {
					return err
				}
			}
			if rank < n-1 {
				if err := tr.Send(next, ch, transport.Tag{Stage: int32(rank), Micro: int32(i)}, s.make(rank, i)); err != nil {
					return err
				}
			}
		}
		if rank == 0 {
			if err := tr.Send(1, abi.DataChannel, transport.Tag{Stage: 0, Micro: 100}, samples[1].make(0, 100)); err != nil {
				return err
			}
			if err := tr.Send(1, abi.ActChannel, transport.Tag{Stage: 0, Micro: 101}, samples[0].make(0, 101)); err != nil {
				return err
			}
		}
		if rank == 1 {
			tag, x, err := tr.Recv(0, abi.ActChannel)
			if err != nil || tag.Micro != 101 {
				return fmt.Errorf("act after data: %v %v", tag, err)
			}
			if err := samples[0].check(x, 0, 101); err != nil {
				return err
			}
			tag, x, err = tr.Recv(0, abi.DataChannel)
			if err != nil || tag.Micro != 100 {
				return fmt.Errorf("data kept: %v %v", tag, err)
			}
			if err := samples[1].check(x, 0, 100); err != nil {
				return err
			}
		}
		// Backward: gradients from the last rank to the first.
		for i := range 3 {
			s := samples[(i*3)%len(samples)]
			if rank < n-1 {
				_, x, err := tr.Recv(next, abi.GradChannel)
				if err != nil {
					return err
				}
				if err := s.check(x, next, i); err != nil {
					return err
				}
			}
			if rank > 0 {
				if err := tr.Send(prev, abi.GradChannel, transport.Tag{Stage: int32(rank), Micro: int32(i)}, s.make(rank, i)); err != nil {
					return err
				}
			}
		}
		return ring(tr, rank, n, 3, samples)
	case "ring":
		return ring(tr, rank, n, 10, samples[:2])
	case "abort":
		if err := ring(tr, rank, n, 1, samples[:1]); err != nil {
			return err
		}
		if rank == 2 {
			cause := errors.New("stage exploded")
			time.Sleep(200 * time.Millisecond) // the others wait in a receive from this rank
			tr.Abort(cause)
			return cause
		}
		_, _, err := tr.Recv(prev, abi.ActChannel)
		if rank == 0 && err == nil {
			_, _, err = tr.Recv(2, abi.ActChannel)
		}
		if err == nil {
			_, _, err = tr.Recv(2, abi.GradChannel)
		}
		return err
	case "buffered":
		if rank == 1 {
			_, _, err := tr.Recv(0, abi.ActChannel)
			return err
		}
		for i := range 5 { // 24 bytes each on data, before the act rank 1 waits for
			if err := tr.Send(1, abi.DataChannel, transport.Tag{Micro: int32(i)}, samples[0].make(0, i)); err != nil {
				return err
			}
		}
		if err := tr.Send(1, abi.ActChannel, transport.Tag{}, samples[0].make(0, 9)); err != nil {
			return err
		}
		_, _, err := tr.Recv(1, abi.GradChannel)
		return err
	case "goodbye":
		x := samples[1].make(rank, 0)
		switch rank {
		case 1:
			if _, _, err := tr.Recv(0, abi.ActChannel); err != nil {
				return err
			}
			return tr.Close()
		case 2:
			if _, _, err := tr.Recv(0, abi.ActChannel); err != nil {
				return err
			}
			return tr.Send(0, abi.GradChannel, transport.Tag{}, x)
		}
		if err := tr.Send(1, abi.ActChannel, transport.Tag{}, x); err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond) // rank 1 closes
		if _, _, err := tr.Recv(1, abi.GradChannel); err == nil || !strings.Contains(err.Error(), "recv grad from rank 1: rank 1 closed the connection") {
			return fmt.Errorf("recv from a closed rank: %v", err)
		}
		if err := tr.Send(1, abi.ActChannel, transport.Tag{}, x); err == nil || !strings.Contains(err.Error(), "send act to rank 1: rank 1 closed the connection") {
			return fmt.Errorf("send to a closed rank: %v", err)
		}
		if err := tr.Send(2, abi.ActChannel, transport.Tag{}, x); err != nil {
			return err
		}
		_, y, err := tr.Recv(2, abi.GradChannel)
		if err != nil {
			return err
		}
		return samples[1].check(y, 2, 0)
	case "timeout":
		if rank == 1 {
			time.Sleep(5 * time.Second) // never receives
			return nil
		}
		err := tr.Send(1, abi.ActChannel, transport.Tag{}, samples[6].make(0, 6)) // more than the socket buffers hold
		var pe *transport.ProgressError
		if err != nil && !errors.As(err, &pe) {
			return fmt.Errorf("not a *ProgressError: %w", err)
		}
		if err == nil {
			return errors.New("send to a rank that never receives succeeded")
		}
		return err
	}
	return fmt.Errorf("unknown scenario %q", sc)
}

// ring exchanges samples both ways around the ring in batches: every rank
// sends to both neighbours and receives from both in one batch (one after
// the other it would deadlock: NCCL sends are rendezvous).
func ring(tr *Transport, rank, n, rounds int, ss []sample) error {
	next, prev := (rank+1)%n, (rank+n-1)%n
	for round := range rounds {
		for i, s := range ss {
			k := round*100 + i
			ops := []transport.BatchOp{
				{Peer: next, Ch: abi.ActChannel, Send: true, Tag: transport.Tag{Stage: int32(rank), Micro: int32(k)}, T: s.make(rank, k)},
				{Peer: prev, Ch: abi.GradChannel, Send: true, Tag: transport.Tag{Stage: int32(rank), Micro: int32(k)}, T: s.make(rank, k)},
				{Peer: prev, Ch: abi.ActChannel},
				{Peer: next, Ch: abi.GradChannel},
			}
			if err := tr.Batch(ops); err != nil {
				return err
			}
			if err := s.check(ops[2].T, prev, k); err != nil {
				return err
			}
			if err := s.check(ops[3].T, next, k); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestPanicBecomesError: a panic in the watchdog goroutine becomes the
// rank's error; the process goes on.
func TestPanicBecomesError(t *testing.T) {
	f := func(site string) {
		if site == "watchdog" {
			panic("injected")
		}
	}
	testHook.Store(&f)
	defer testHook.Store(nil)
	tr := dialSelf(t, Config{})
	select {
	case <-tr.failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the panic did not fail the transport")
	}
	err := tr.Send(0, abi.ActChannel, transport.Tag{}, samples[0].make(0, 0))
	if !errors.Is(err, transport.ErrPanicked) || !strings.Contains(err.Error(), "NCCL transport watchdog panicked: injected") {
		t.Errorf("send after the panic: %v", err)
	}
}

// TestUniqueIDByValue: ncclCommInitRank receives the 128-byte id by value
// intact (the test double checks its magic and checksum), and refuses one
// that arrives changed: the check can fail.
func TestUniqueIDByValue(t *testing.T) {
	lib := stub(t)
	l, err := loadLib(lib, lib)
	if err != nil {
		t.Fatal(err)
	}
	var id uniqueID
	if r := l.ncclGetUniqueId(&id); r != ncclSuccess {
		t.Fatal(l.ncclErr("ncclGetUniqueId", r))
	}
	bad := id
	bad.internal[uniqueIDBytes-9] ^= 1 // a byte the checksum covers, just before it
	var comm uintptr
	if r := l.ncclCommInitRank(&comm, 1, bad, 0); r != 4 {
		t.Errorf("a changed id: ncclCommInitRank returned %d, want 4 (ncclInvalidArgument)", r)
	}
	if r := l.ncclCommInitRank(&comm, 1, id, 0); r != ncclSuccess {
		t.Fatalf("the id as made: %v", l.ncclErr("ncclCommInitRank", r))
	}
	if r := l.ncclCommDestroy(comm); r != ncclSuccess {
		t.Error(l.ncclErr("ncclCommDestroy", r))
	}
}
