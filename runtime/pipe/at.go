package pipe

// At is a step's four constant arguments packed into one word: the form
// generated code passes them in, because a call with one constant argument
// costs the Go compiler about half as much as a call with four, and a
// generated rank holds thousands of calls. The stage is in bits 48–63, the
// micro-batch in bits 32–47, then two 16-bit fields whose meaning depends on
// the step:
//
//	F, B, I          (slot, src)   src: the local source slot, or -1
//	DATA_LOAD, W     (slot, -1)
//	SEND_F, RECV_F,
//	SEND_B, RECV_B   (peer, slot)
//
// Each field holds 0 to 65534, or 0xffff for -1, so a constant reads in hex
// groups: 0x0003_0011_0002_ffff is stage 3, micro-batch 17, slot 2, no source
// slot. New refuses Specs whose stages, micro-batches, ranks or slots per
// rank do not fit, so every valid step has an At; the unpacked methods
// (Forward, SendAct, ...) take any ints and report those that cannot be valid.
type At uint64

// atNone is the field value that stands for -1.
const atNone = 0xffff

// atMax is the most of any field a valid step uses: 65535 stages,
// micro-batches, ranks and slots (indices up to 65534).
const atMax = atNone

// PackAt packs stage, micro and the two step-specific fields c and d into an
// At. ok is false when a value is below -1 or above 65534.
func PackAt(stage, micro, c, d int) (a At, ok bool) {
	// v+1 is in [0, 0xffff] exactly when v is in [-1, 0xfffe].
	ok = uint(stage+1) <= atNone && uint(micro+1) <= atNone && uint(c+1) <= atNone && uint(d+1) <= atNone
	return At(uint64(stage)&atNone<<48 | uint64(micro)&atNone<<32 | uint64(c)&atNone<<16 | uint64(d)&atNone), ok
}

// Unpack returns the four fields of a, 0xffff as -1.
func (a At) Unpack() (stage, micro, c, d int) {
	return atField(uint64(a) >> 48), atField(uint64(a) >> 32), atField(uint64(a) >> 16), atField(uint64(a))
}

// fields returns a's four fields as they are, 0xffff as 65535: the step
// methods' fast paths decode with it, for which 65535 is outside every valid
// range just as -1 is (a Spec has at most 65535 of anything, so indices stop
// at 65534); their slow paths, which explain the error, use Unpack.
func (a At) fields() (stage, micro, c, d int) {
	return int(a >> 48), int(a >> 32 & atNone), int(a >> 16 & atNone), int(a & atNone)
}

// atField is the low 16 bits of v as an int, 0xffff as -1.
func atField(v uint64) int {
	v &= atNone
	return int(v) - int((v+1)>>16)<<16
}
