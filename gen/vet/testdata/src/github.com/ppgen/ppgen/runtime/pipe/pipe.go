// Package pipe is a stub of github.com/ppgen/ppgen/runtime/pipe with the API
// generated code calls, so that analysistest (GOPATH mode over testdata/src)
// can type-check the broken generated files. Only the signatures matter.
package pipe

const SupportPackageIsVersion1 = true

type Spec struct {
	Schedule    string
	Ranks       int
	Stages      int
	Micro       int
	Slots       []int
	RankOf      []int
	Fingerprint string
}

type OpKind uint8

const (
	OpDataLoad OpKind = iota
	OpRecvAct
	OpSendAct
	OpRecvGrad
	OpSendGrad
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
)

type Op struct {
	Kind                          OpKind
	Stage, Micro, Peer, Slot, Src int32
}

type Exec struct{}

func (x *Exec) Err() error                                                           { return nil }
func (x *Exec) DataLoad(stage, micro, slot int)                                      {}
func (x *Exec) RecvAct(stage, micro, peer, slot int)                                 {}
func (x *Exec) SendAct(stage, micro, peer, slot int)                                 {}
func (x *Exec) RecvGrad(stage, micro, peer, slot int)                                {}
func (x *Exec) SendGrad(stage, micro, peer, slot int)                                {}
func (x *Exec) Forward(stage, micro, slot, src int)                                  {}
func (x *Exec) Backward(stage, micro, slot, src int)                                 {}
func (x *Exec) BackwardInput(stage, micro, slot, src int)                            {}
func (x *Exec) BackwardWeight(stage, micro, slot int)                                {}
func (x *Exec) OptStep()                                                             {}
func (x *Exec) OverlapFB(fs, fm, fslot, fsrc int, k OpKind, bs, bm, bslot, bsrc int) {}
func (x *Exec) OverlapBF(k OpKind, bs, bm, bslot, bsrc int, fs, fm, fslot, fsrc int) {}

type At uint64

func (x *Exec) Load(a At)  {}
func (x *Exec) RecvF(a At) {}
func (x *Exec) SendF(a At) {}
func (x *Exec) RecvB(a At) {}
func (x *Exec) SendB(a At) {}
func (x *Exec) F(a At)     {}
func (x *Exec) B(a At)     {}
func (x *Exec) I(a At)     {}
func (x *Exec) W(a At)     {}

func (x *Exec) FAndSend(a At) {}
func (x *Exec) RecvAndF(a At) {}
func (x *Exec) RecvAndB(a At) {}
func (x *Exec) BAndSend(a At) {}
func (x *Exec) RecvAndI(a At) {}
func (x *Exec) IAndSend(a At) {}

func DecodeOps(kinds string, ats []At) []Op { return nil }

func (x *Exec) Unshard(stage int)    {}
func (x *Exec) Reshard(stage int)    {}
func (x *Exec) ReduceGrad(stage int) {}

func (x *Exec) LaunchOffload(a At)                       {}
func (x *Exec) WaitOffload(a At)                         {}
func (x *Exec) LaunchLoad(a At)                          {}
func (x *Exec) WaitLoad(a At)                            {}
func (x *Exec) SwapLaunchOffload(stage, micro, slot int) {}
func (x *Exec) SwapWaitOffload(stage, micro, slot int)   {}
func (x *Exec) SwapLaunchLoad(stage, micro, slot int)    {}
func (x *Exec) SwapWaitLoad(stage, micro, slot int)      {}
