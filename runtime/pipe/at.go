package pipe

import "github.com/ppgen/ppgen/abi"

// At is a step's constant arguments packed into one word, the form
// generated code passes them in: the boundary package's abi.At, whose doc
// gives the layout. The stage is in bits 48–63, the micro-batch in bits
// 32–47, then two 16-bit fields whose meaning depends on the step:
//
//	F, B, I          (slot, src)   src: the local source slot, or -1
//	DATA_LOAD, W     (slot, -1)
//	SEND_F, RECV_F,
//	SEND_B, RECV_B   (peer, slot)
//
// Each field holds 0 to 65534, or 0xffff for -1, so a constant reads in hex
// groups: 0x0003_0011_0002_ffff is stage 3, micro-batch 17, slot 2, no source
// slot. New refuses Specs whose stages, micro-batches, ranks or slots per
// rank do not fit, so every valid step has an At; Interpret takes an Op's
// fields as ints and reports those that no At can hold.
// The step methods' fast paths decode with At.Fields (0xffff as 65535,
// outside every valid range just as -1 is), their slow paths, which explain
// the error, with At.Unpack.
type At = abi.At

// atNone is the field value that stands for -1.
const atNone = abi.FieldNone

// atMax is the most of any field a valid step uses: 65535 stages,
// micro-batches, ranks and slots (indices up to 65534).
const atMax = abi.MaxCount

// PackAt packs stage, micro and the two step-specific fields c and d into an
// At. ok is false when a value is below -1 or above 65534.
func PackAt(stage, micro, c, d int) (a At, ok bool) { return abi.PackAt(stage, micro, c, d) }
