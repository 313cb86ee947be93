//go:build linux && (amd64 || arm64)

package nccl

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The C types of the calls used, as Go sees them through purego: every
// cudaError_t and ncclResult_t is a C int (int32), every handle
// (cudaStream_t, ncclComm_t) and device pointer an address (uintptr), every
// host pointer an unsafe.Pointer (so the Go memory stays alive during the
// call).
const (
	cudaSuccess           = 0
	cudaErrorNotReady     = 600
	cudaMemcpyHostToDev   = 1
	cudaMemcpyDevToHost   = 2
	ncclSuccess           = 0
	ncclRemoteError       = 6
	ncclInProgress        = 7
	ncclUint8             = 1
	ncclFloat32           = 7
	ncclFloat64           = 8
	ncclSum               = 0   // ncclRedOp_t
	uniqueIDBytes         = 128 // NCCL_UNIQUE_ID_BYTES
	deviceAlign           = 256 // offsets of the payloads in the device arena
	defaultDeviceCountMax = 1 << 16
)

// uniqueID is ncclUniqueId: typedef struct { char internal[128]; }. It is
// passed by value to ncclCommInitRank, which purego supports on linux/amd64
// (System V: an aggregate over 16 bytes is copied onto the stack, purego's
// placeStack) and linux/arm64 (AAPCS64: an aggregate over 16 bytes is copied
// by the caller and passed by reference); the test double checks the bytes
// it receives.
type uniqueID struct {
	internal [uniqueIDBytes]byte
}

// lib is the CUDA runtime and NCCL, resolved at run time.
type lib struct {
	cudartPath, ncclPath string

	cudaGetDeviceCount    func(count *int32) int32
	cudaSetDevice         func(dev int32) int32
	cudaStreamCreate      func(s *uintptr) int32
	cudaStreamDestroy     func(s uintptr) int32
	cudaStreamQuery       func(s uintptr) int32
	cudaStreamSynchronize func(s uintptr) int32
	cudaMalloc            func(p *uintptr, n uintptr) int32
	cudaFree              func(p uintptr) int32
	// cudaMemcpyAsync, bound twice: host to device and device to host.
	memcpyH2D          func(dst uintptr, src unsafe.Pointer, n uintptr, kind int32, s uintptr) int32
	memcpyD2H          func(dst unsafe.Pointer, src uintptr, n uintptr, kind int32, s uintptr) int32
	cudaGetErrorString func(e int32) string

	ncclGetUniqueId       func(id *uniqueID) int32
	ncclCommInitRank      func(comm *uintptr, nranks int32, id uniqueID, rank int32) int32
	ncclSend              func(buf uintptr, count uintptr, dt int32, peer int32, comm uintptr, s uintptr) int32
	ncclRecv              func(buf uintptr, count uintptr, dt int32, peer int32, comm uintptr, s uintptr) int32
	ncclGroupStart        func() int32
	ncclGroupEnd          func() int32
	ncclCommGetAsyncError func(comm uintptr, res *int32) int32
	ncclCommAbort         func(comm uintptr) int32
	ncclCommDestroy       func(comm uintptr) int32
	ncclGetErrorString    func(r int32) string

	// The collectives (coll.go), each on device buffers, in place where
	// send and receive buffer are one.
	ncclAllReduce     func(send, recv uintptr, count uintptr, dt int32, op int32, comm uintptr, s uintptr) int32
	ncclAllGather     func(send, recv uintptr, sendcount uintptr, dt int32, comm uintptr, s uintptr) int32
	ncclReduceScatter func(send, recv uintptr, recvcount uintptr, dt int32, op int32, comm uintptr, s uintptr) int32
	ncclBroadcast     func(send, recv uintptr, count uintptr, dt int32, root int32, comm uintptr, s uintptr) int32
}

// The environment variables that override where the libraries are loaded from.
const (
	NCCLLibVar   = "PPGEN_NCCL_LIB"
	CUDARTLibVar = "PPGEN_CUDART_LIB"
)

// Default names, tried in order when no path is given.
var (
	ncclNames   = []string{"libnccl.so.2", "libnccl.so"}
	cudartNames = []string{"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so.11"}
)

const (
	cudartInstall = "install the CUDA runtime (e.g. the cuda-cudart package of NVIDIA's CUDA repository, or pip install nvidia-cuda-runtime-cu12 and point " +
		CUDARTLibVar + " at its lib/libcudart.so.12)"
	ncclInstall = "install NCCL 2 (e.g. apt-get install libnccl2 from NVIDIA's CUDA repository, or pip install nvidia-nccl-cu12 and point " +
		NCCLLibVar + " at its lib/libnccl.so.2)"
)

var (
	libsMu sync.Mutex
	libs   = map[[2]string]*lib{}
)

// loadLib opens the CUDA runtime and NCCL: the paths given (Config, else
// the environment variables), else the default names through the dynamic
// loader's search path. Libraries stay loaded for the life of the process.
func loadLib(cudart, nccl string) (*lib, error) {
	key := [2]string{cudart, nccl}
	libsMu.Lock()
	defer libsMu.Unlock()
	if l := libs[key]; l != nil {
		return l, nil
	}
	l := &lib{}
	hc, pc, err := openFirst("CUDA runtime", cudart, CUDARTLibVar, cudartNames, cudartInstall)
	if err != nil {
		return nil, err
	}
	hn, pn, err := openFirst("NCCL", nccl, NCCLLibVar, ncclNames, ncclInstall)
	if err != nil {
		return nil, err
	}
	l.cudartPath, l.ncclPath = pc, pn
	type fn struct {
		ptr  any
		name string
	}
	cuda := []fn{
		{&l.cudaGetDeviceCount, "cudaGetDeviceCount"}, {&l.cudaSetDevice, "cudaSetDevice"},
		{&l.cudaStreamCreate, "cudaStreamCreate"}, {&l.cudaStreamDestroy, "cudaStreamDestroy"},
		{&l.cudaStreamQuery, "cudaStreamQuery"}, {&l.cudaStreamSynchronize, "cudaStreamSynchronize"},
		{&l.cudaMalloc, "cudaMalloc"}, {&l.cudaFree, "cudaFree"},
		{&l.memcpyH2D, "cudaMemcpyAsync"}, {&l.memcpyD2H, "cudaMemcpyAsync"},
		{&l.cudaGetErrorString, "cudaGetErrorString"},
	}
	nc := []fn{
		{&l.ncclGetUniqueId, "ncclGetUniqueId"}, {&l.ncclCommInitRank, "ncclCommInitRank"},
		{&l.ncclSend, "ncclSend"}, {&l.ncclRecv, "ncclRecv"},
		{&l.ncclGroupStart, "ncclGroupStart"}, {&l.ncclGroupEnd, "ncclGroupEnd"},
		{&l.ncclCommGetAsyncError, "ncclCommGetAsyncError"}, {&l.ncclCommAbort, "ncclCommAbort"},
		{&l.ncclCommDestroy, "ncclCommDestroy"}, {&l.ncclGetErrorString, "ncclGetErrorString"},
		{&l.ncclAllReduce, "ncclAllReduce"}, {&l.ncclAllGather, "ncclAllGather"},
		{&l.ncclReduceScatter, "ncclReduceScatter"}, {&l.ncclBroadcast, "ncclBroadcast"},
	}
	for _, f := range cuda {
		if err := bind(f.ptr, hc, f.name, pc); err != nil {
			return nil, err
		}
	}
	for _, f := range nc {
		if err := bind(f.ptr, hn, f.name, pn); err != nil {
			return nil, err
		}
	}
	libs[key] = l
	return l, nil
}

// openFirst opens path (from the Config or the environment variable envVar)
// or else the first of names that the dynamic loader finds.
func openFirst(what, path, envVar string, names []string, install string) (uintptr, string, error) {
	tried := names
	if path != "" {
		tried = []string{path}
	}
	var why []string
	for _, p := range tried {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, p, nil
		}
		msg := err.Error()
		if msg == "" {
			msg = p + ": cannot be opened"
		}
		why = append(why, msg)
	}
	if path != "" {
		return 0, "", fmt.Errorf("%w: cannot load the %s library %s (%s): fix the path in %s, or %s",
			ErrNoLibrary, what, path, strings.Join(why, "; "), envVar, install)
	}
	return 0, "", fmt.Errorf("%w: cannot load the %s library: tried %s (%s): %s, or set %s to the library's path",
		ErrNoLibrary, what, strings.Join(names, ", "), strings.Join(why, "; "), install, envVar)
}

// bind resolves name in the library h (at path) into the Go function *fptr.
func bind(fptr any, h uintptr, name, path string) (err error) {
	sym, err := purego.Dlsym(h, name)
	if err != nil {
		return fmt.Errorf("%w: %s has no symbol %s (%v): is it the right library and version?", ErrNoLibrary, path, name, err)
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: cannot bind %s of %s: %v", ErrNoLibrary, name, path, v)
		}
	}()
	purego.RegisterFunc(fptr, sym)
	return nil
}

// cudaErr is the error of a failed CUDA runtime call, or nil.
func (l *lib) cudaErr(call string, code int32) error {
	if code == cudaSuccess {
		return nil
	}
	return &CallError{Call: call, Code: int(code), Msg: l.cudaGetErrorString(code), Lib: "CUDA runtime " + l.cudartPath}
}

// ncclErr is the error of a failed NCCL call, or nil.
func (l *lib) ncclErr(call string, code int32) error {
	if code == ncclSuccess {
		return nil
	}
	return &CallError{Call: call, Code: int(code), Msg: l.ncclGetErrorString(code), Lib: "NCCL " + l.ncclPath}
}
