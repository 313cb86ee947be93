package abi

// Shape is the operand list of a step kind: which of a step's stage,
// micro-batch, peer, slot and source slot it carries, and so the arguments
// of its unpacked runtime method and the two step-specific fields of its At.
type Shape uint8

// The shapes of steps.
const (
	ArgsNone    Shape = iota // (): OPT_STEP, ALL_REDUCE, the batch brackets
	ArgsLocal                // (stage, micro, slot): DATA_LOAD, W, the swap steps; At (slot, -1)
	ArgsComm                 // (stage, micro, peer, slot): the transfers; At (peer, slot)
	ArgsCompute              // (stage, micro, slot, src): F, B, I; At (slot, src), src the local source slot or -1
	ArgsOverlap              // the sub-steps' operands in order: (stage, micro, slot, src) for F, (kind, stage, micro, slot, src) for B, I or W
	ArgsStage                // (stage): the FSDP steps, TIE_GRAD
)

// Args returns the names of the operands of an unpacked runtime call of
// this shape, in order; nil for ArgsNone and ArgsOverlap (whose calls take
// the sub-steps' operands).
func (s Shape) Args() []string {
	switch s {
	case ArgsLocal:
		return []string{"stage", "micro", "slot"}
	case ArgsComm:
		return []string{"stage", "micro", "peer", "slot"}
	case ArgsCompute:
		return []string{"stage", "micro", "slot", "src"}
	case ArgsStage:
		return []string{"stage"}
	}
	return nil
}

// Packed reports whether the runtime method of a step of this shape takes
// its operands as one At (ArgsLocal, ArgsComm, ArgsCompute).
func (s Shape) Packed() bool { return s == ArgsLocal || s == ArgsComm || s == ArgsCompute }

// At is a step's constant operands packed into one word: the form generated
// code passes them in, because a call with one constant argument costs the
// Go compiler about half as much as a call with four, and a generated rank
// holds thousands of calls. The stage is in bits 48–63, the micro-batch in
// bits 32–47, then two 16-bit fields c and d whose meaning depends on the
// step's Shape (Kind.AtFields):
//
//	F, B, I          (slot, src)   src: the local source slot, or -1
//	DATA_LOAD, W,
//	the swap steps   (slot, -1)
//	the transfers    (peer, slot)
//
// Each field holds 0 to MaxIndex, or FieldNone for -1, so a constant reads
// in hex groups (AppendAt): 0x0003_0011_0002_ffff is stage 3, micro-batch
// 17, slot 2, no source slot. In a -table program (pipe.DecodeOps) every op
// has an At: OPT_STEP, ALL_REDUCE, the batch brackets and an overlap's
// header have every field -1, the FSDP steps (stage, -1, -1, -1).
type At uint64

// The limits the At layout sets.
const (
	// FieldBits is the width of each of an At's four fields.
	FieldBits = 16
	// FieldNone is the field value that stands for -1.
	FieldNone = 1<<FieldBits - 1
	// MaxIndex is the largest stage, micro-batch, rank or slot number a
	// step may name: FieldNone is taken by -1.
	MaxIndex = FieldNone - 1
	// MaxCount is the most stages, micro-batches, ranks or slots per rank a
	// program can have (MaxIndex+1 = 65535): gen refuses larger programs
	// and pipe.New larger Specs, so every valid step has an At.
	MaxCount = MaxIndex + 1
)

// PackAt packs stage, micro and the two shape-specific fields c and d into
// an At. ok is false when a value is below -1 or above MaxIndex.
func PackAt(stage, micro, c, d int) (a At, ok bool) {
	// v+1 is in [0, FieldNone] exactly when v is in [-1, MaxIndex].
	ok = uint(stage+1) <= FieldNone && uint(micro+1) <= FieldNone && uint(c+1) <= FieldNone && uint(d+1) <= FieldNone
	return At(uint64(stage)&FieldNone<<48 | uint64(micro)&FieldNone<<32 | uint64(c)&FieldNone<<16 | uint64(d)&FieldNone), ok
}

// Unpack returns the four fields of a, FieldNone as -1.
func (a At) Unpack() (stage, micro, c, d int) {
	return field(uint64(a) >> 48), field(uint64(a) >> 32), field(uint64(a) >> 16), field(uint64(a))
}

// Fields returns a's four fields as they are, FieldNone as 65535: the
// runtime's fast paths decode with it, for which 65535 is outside every
// valid range just as -1 is (a program has at most MaxCount of anything,
// so indices stop at MaxIndex); the slow paths, which explain an error, use
// Unpack.
func (a At) Fields() (stage, micro, c, d int) {
	return int(a >> 48), int(a >> 32 & FieldNone), int(a >> 16 & FieldNone), int(a & FieldNone)
}

// field is the low 16 bits of v as an int, FieldNone as -1.
func field(v uint64) int {
	v &= FieldNone
	return int(v) - int((v+1)>>FieldBits)<<FieldBits
}

// AppendAt appends the Go constant generated code writes for a to dst: hex
// groups of 16 bits, e.g. "0x0003_0011_0002_ffff".
func AppendAt(dst []byte, a At) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '0', 'x')
	for g := 3; g >= 0; g-- {
		v := uint64(a) >> (16 * g)
		dst = append(dst, hex[v>>12&15], hex[v>>8&15], hex[v>>4&15], hex[v&15])
		if g > 0 {
			dst = append(dst, '_')
		}
	}
	return dst
}

// AtFields returns the two shape-specific At fields of a step of kind k
// with the given peer, slot and source slot: (peer, slot) for a transfer,
// (slot, src) for F, B and I, (slot, -1) for every other kind.
func (k Kind) AtFields(peer, slot, src int) (c, d int) {
	switch k.Shape() {
	case ArgsComm:
		return peer, slot
	case ArgsCompute:
		return slot, src
	}
	return slot, -1
}

// Pack returns the At of a step of kind k (PackAt of stage, micro and
// AtFields). ok is false when a field is outside [-1, MaxIndex].
func (k Kind) Pack(stage, micro, peer, slot, src int) (At, bool) {
	c, d := k.AtFields(peer, slot, src)
	return PackAt(stage, micro, c, d)
}

// Operands decodes a as the At of a step of kind k, the inverse of Pack:
// (peer, slot) from a transfer's fields with src -1, (slot, src) from any
// other kind's with peer -1; FieldNone is -1.
func (a At) Operands(k Kind) (stage, micro, peer, slot, src int) {
	stage, micro, c, d := a.Unpack()
	if k.Shape() == ArgsComm {
		return stage, micro, c, d, -1
	}
	return stage, micro, -1, c, d
}
