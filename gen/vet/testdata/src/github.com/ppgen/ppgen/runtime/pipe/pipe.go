// Package pipe is a stub of github.com/ppgen/ppgen/runtime/pipe with the API
// generated code calls, so that analysistest (GOPATH mode over testdata/src)
// can type-check the broken generated files. Only the names and signatures
// matter: TestStubMatchesRuntime checks them against runtime/pipe's sources.
package pipe

const SupportPackageIsVersion2 = true

type Spec struct {
	Schedule        string
	Ranks           int
	Stages          int
	Micro           int
	Slots           []int
	RankOf          []int
	Fingerprint     string
	Copies          int
	Owned           int
	ShipLabels      bool
	ForwardOnly     bool
	Ties            []Tie
	Layers          [][2]int
	Recompute       []int
	RecomputeShare  []float64
	RecomputeLayers [][]int
	RecomputeCost   []float64
}

type Tie struct{ A, B int }

type OpKind uint8

const (
	OpInvalid OpKind = iota
	OpDataLoad
	OpRecvF
	OpSendF
	OpRecvB
	OpSendB
	OpForward
	OpBackward
	OpBackwardInput
	OpBackwardWeight
	OpOptStep
	OpOverlapFB
	OpOverlapBF
	OpUnshard
	OpReshard
	OpReduceGrad
	OpSwapLaunchOffload
	OpSwapWaitOffload
	OpSwapLaunchLoad
	OpSwapWaitLoad
	OpMpipeRecv
	OpMpipeSend
	OpDataRecv
	OpDataSend
	OpBatchBegin
	OpBatchEnd
	OpTieGrad
	OpAllReduce
	OpRecompute
	OpGatherLoss
)

type Op struct {
	Kind                          OpKind
	Stage, Micro, Peer, Slot, Src int32
}

type At uint64

func DecodeOps(kinds string, ats []At) []Op { return nil }

type Exec struct{}

func (x *Exec) Err() error { return nil }

func (x *Exec) DataLoad(a At)  {}
func (x *Exec) RecvF(a At)     {}
func (x *Exec) SendF(a At)     {}
func (x *Exec) RecvB(a At)     {}
func (x *Exec) SendB(a At)     {}
func (x *Exec) F(a At)         {}
func (x *Exec) B(a At)         {}
func (x *Exec) I(a At)         {}
func (x *Exec) W(a At)         {}
func (x *Exec) OptStep()       {}
func (x *Exec) AllReduce()     {}
func (x *Exec) Recompute(a At) {}
func (x *Exec) GatherLoss()    {}

func (x *Exec) OverlapFB(fStage, fMicro, fSlot, fSrc int, bKind OpKind, bStage, bMicro, bSlot, bSrc int) {
}
func (x *Exec) OverlapBF(bKind OpKind, bStage, bMicro, bSlot, bSrc int, fStage, fMicro, fSlot, fSrc int) {
}

func (x *Exec) Unshard(stage int)    {}
func (x *Exec) Reshard(stage int)    {}
func (x *Exec) ReduceGrad(stage int) {}
func (x *Exec) TieGrad(stage int)    {}

func (x *Exec) SwapLaunchOffload(a At) {}
func (x *Exec) SwapWaitOffload(a At)   {}
func (x *Exec) SwapLaunchLoad(a At)    {}
func (x *Exec) SwapWaitLoad(a At)      {}

func (x *Exec) DataRecv(a At)  {}
func (x *Exec) DataSend(a At)  {}
func (x *Exec) MpipeRecv(a At) {}
func (x *Exec) MpipeSend(a At) {}

func (x *Exec) BatchBegin() {}
func (x *Exec) BatchEnd()   {}

func (x *Exec) FAndSend(a At)       {}
func (x *Exec) RecvAndF(a At)       {}
func (x *Exec) RecvAndB(a At)       {}
func (x *Exec) BAndSend(a At)       {}
func (x *Exec) RecvAndI(a At)       {}
func (x *Exec) IAndSend(a At)       {}
func (x *Exec) LabelsAndSendF(a At) {}
func (x *Exec) LabelsAndRecvF(a At) {}
