// GEMM micro-kernels and packing for amd64 (AVX2+FMA; AVX-512 where the CPU
// has it, unless built with -tags nogemmavx512), called from blocked.go where
// gemm_amd64.go's CPUID checks allow.
//
// The four micro-kernels (kern6x8d, kern6x16s, kern6x16dw, kern6x32sw) are one
// algorithm in two element types (float64: PD/SD instructions, float32: PS/SS)
// and two register files (AVX2 Y registers; AVX-512 Z registers, where the
// second column vector is a second micro-panel of b, R12 bytes after the
// first). So the file writes the algorithm once, as preprocessor macros, from
// the smallest piece up:
//
//	ROW2     one row i of the tile for one l: broadcast A[i][l], two FMAs
//	STEP     one l: load b[l]'s two vectors, ROW2 for the six rows, advance A
//	ZERO12   clear the twelve accumulators
//	SCALE2   c row = alpha·s (acc == 0); ACCUM2: c row += alpha·s (acc != 0)
//	OUT6     SCALE2 or ACCUM2 and the two stores for each of the six rows of c
//	KERNEL   a whole kernel: arguments, loop of 4 l's, loop of 1 l, OUT6
//
// and each kernel is one KERNEL line naming its instructions and registers
// (the wrappers YKERNEL and ZKERNEL hold the register lists). Registers, the
// same in all four: CX kc, SI A's rows 0-2, R10 A's rows 3-5 (SI + 3·rs), R9
// rs and R11 ks in bytes, DI b, DX c, R8 ldc in bytes, R12 (AVX-512 only) the
// distance to b's second micro-panel; vector registers 0-11 the 6×2
// accumulators, 12-13 b[l], 14-15 the broadcast A[i][l].
//
// The packing functions share PACKARGS (their arguments), the transposes
// TRANS4D and TRANS4S (one 4×4 block); fmaLoop reuses ZERO12. Whoever edits a
// macro should check that its other users assemble to the same bytes: compare
// `go tool asm -S` of the file before and after (the macros went in that way,
// the code byte for byte what the unrolled file assembled to).
//
// go vet's asmdecl check reads the file as text, so it checks each TEXT
// line's frame and argument size but not the FP references inside the macros
// (KERNEL, PACKARGS): gemm_amd64.go declares the four kernels with one
// signature and the packing functions with dst, src, n first.

#include "textflag.h"

// ROW2: t = A[i][l] (broadcast from src); c0 += b0·t, c1 += b1·t.
#define ROW2(BCAST, FMA, src, t, b0, b1, c0, c1) \
	BCAST src, t; \
	FMA b0, t, c0; \
	FMA b1, t, c1

// STEP: one l of the 6×2-vector tile, b[l] at blo and bhi; A's pointers move
// on by ks.
#define STEP(LOAD, BCAST, FMA, blo, bhi, b0, b1, t0, t1, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11) \
	LOAD blo, b0; \
	LOAD bhi, b1; \
	ROW2(BCAST, FMA, (SI), t0, b0, b1, c0, c1); \
	ROW2(BCAST, FMA, (SI)(R9*1), t1, b0, b1, c2, c3); \
	ROW2(BCAST, FMA, (SI)(R9*2), t0, b0, b1, c4, c5); \
	ROW2(BCAST, FMA, (R10), t1, b0, b1, c6, c7); \
	ROW2(BCAST, FMA, (R10)(R9*1), t0, b0, b1, c8, c9); \
	ROW2(BCAST, FMA, (R10)(R9*2), t1, b0, b1, c10, c11); \
	ADDQ R11, SI; \
	ADDQ R11, R10

#define ZERO12(XOR, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11) \
	XOR c0, c0, c0; XOR c1, c1, c1; XOR c2, c2, c2; XOR c3, c3, c3; \
	XOR c4, c4, c4; XOR c5, c5, c5; XOR c6, c6, c6; XOR c7, c7, c7; \
	XOR c8, c8, c8; XOR c9, c9, c9; XOR c10, c10, c10; XOR c11, c11, c11

// SCALE2 and ACCUM2: one row of c (at DX, its second vector at hi(DX)) from
// its accumulators c0, c1 and alpha broadcast in a; then STORE writes it.
#define SCALE2(OP, STORE, hi, a, c0, c1) \
	OP a, c0, c0; OP a, c1, c1; STORE c0, (DX); STORE c1, hi(DX)
#define ACCUM2(OP, STORE, hi, a, c0, c1) \
	OP (DX), a, c0; OP hi(DX), a, c1; STORE c0, (DX); STORE c1, hi(DX)

// OUT6: ROW (SCALE2 or ACCUM2) for the six rows of c, DX moving on by ldc.
#define OUT6(ROW, OP, STORE, hi, a, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11) \
	ROW(OP, STORE, hi, a, c0, c1); ADDQ R8, DX; \
	ROW(OP, STORE, hi, a, c2, c3); ADDQ R8, DX; \
	ROW(OP, STORE, hi, a, c4, c5); ADDQ R8, DX; \
	ROW(OP, STORE, hi, a, c6, c7); ADDQ R8, DX; \
	ROW(OP, STORE, hi, a, c8, c9); ADDQ R8, DX; \
	ROW(OP, STORE, hi, a, c10, c11); \
	VZEROUPPER; \
	RET

// KERNEL: a whole micro-kernel (see kern6x8d). SHIFT is log2 of the element
// size; SECOND sets R12 (AVX-512) or nothing (AVX2); BHI(off) addresses the
// second vector of b[l] where the first is at off(DI); hi is the byte offset
// of c's second vector in a row.
#define KERNEL(LOAD, BCAST, FMA, MUL, FMAC, XOR, SHIFT, SECOND, BHI, hi, b0, b1, t0, t1, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11) \
	MOVQ kc+0(FP), CX; \
	MOVQ a+8(FP), SI; \
	MOVQ rs+16(FP), R9; \
	MOVQ ks+24(FP), R11; \
	MOVQ b+32(FP), DI; \
	MOVQ c+40(FP), DX; \
	MOVQ ldc+48(FP), R8; \
	SHLQ SHIFT, R8; \
	SHLQ SHIFT, R9; \
	SHLQ SHIFT, R11; \
	SECOND; \
	LEAQ (SI)(R9*2), R10; \
	ADDQ R9, R10; \
	ZERO12(XOR, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11); \
	CMPQ CX, $4; \
	JLT tail; \
loop4: \
	STEP(LOAD, BCAST, FMA, 0(DI), BHI(0), b0, b1, t0, t1, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11); \
	STEP(LOAD, BCAST, FMA, 64(DI), BHI(64), b0, b1, t0, t1, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11); \
	STEP(LOAD, BCAST, FMA, 128(DI), BHI(128), b0, b1, t0, t1, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11); \
	STEP(LOAD, BCAST, FMA, 192(DI), BHI(192), b0, b1, t0, t1, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11); \
	ADDQ $256, DI; \
	SUBQ $4, CX; \
	CMPQ CX, $4; \
	JGE loop4; \
tail: \
	TESTQ CX, CX; \
	JLE done; \
loop1: \
	STEP(LOAD, BCAST, FMA, 0(DI), BHI(0), b0, b1, t0, t1, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11); \
	ADDQ $64, DI; \
	DECQ CX; \
	JNZ loop1; \
done: \
	BCAST alpha+56(FP), t0; \
	MOVQ acc+64(FP), AX; \
	TESTQ AX, AX; \
	JNZ accumulate; \
	OUT6(SCALE2, MUL, LOAD, hi, t0, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11); \
accumulate: \
	OUT6(ACCUM2, FMAC, LOAD, hi, t0, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11)

// The register files: AVX2 (b's second vector 32 bytes on) and AVX-512 (b's
// second micro-panel R12 = kc·64 bytes on).
#define NOSECOND
#define YHI(off) off+32(DI)
#define ZSECOND MOVQ CX, R12; SHLQ $6, R12
#define ZHI(off) off(DI)(R12*1)
#define YKERNEL(LOAD, BCAST, FMA, MUL, FMAC, XOR, SHIFT) KERNEL(LOAD, BCAST, FMA, MUL, FMAC, XOR, SHIFT, NOSECOND, YHI, 32, Y12, Y13, Y14, Y15, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
#define ZKERNEL(LOAD, BCAST, FMA, MUL, FMAC, SHIFT) KERNEL(LOAD, BCAST, FMA, MUL, FMAC, VPXORD, SHIFT, ZSECOND, ZHI, 64, Z12, Z13, Z14, Z15, Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11)

// PACKARGS: the packing functions' first four arguments (dst, src *T, n,
// stride int, stride named name) in DI, SI, CX and R9.
#define PACKARGS(name) \
	MOVQ dst+0(FP), DI; MOVQ src+8(FP), SI; MOVQ n+16(FP), CX; MOVQ name+24(FP), R9

// func kern6x8d(kc int, a *float64, rs, ks int, b, c *float64, ldc int, alpha float64, acc int)
// For s[i][0:8] = Σ_l A[i][l]·b[l][0:8], i < 6, l < kc, each an FMA chain in l
// order, with A[i][l] at a + i·rs + l·ks (elements: a packed micro-panel has
// rs=1, ks=6; rows of a matrix rs=lda, ks=1; its columns rs=1, ks=lda) and b
// packed 8 per l: sets c[i][0:8] (row i at c + i·ldc) to alpha·s[i] where acc
// is 0, adds alpha·s[i] to it (one FMA) otherwise.
TEXT ·kern6x8d(SB), NOSPLIT, $0-72
	YKERNEL(VMOVUPD, VBROADCASTSD, VFMADD231PD, VMULPD, VFMADD213PD, VXORPD, $3)

// func kern6x16s(kc int, a *float32, rs, ks int, b, c *float32, ldc int, alpha float32, acc int)
// kern6x8d in float32: a 6×16 block of c.
TEXT ·kern6x16s(SB), NOSPLIT, $0-72
	YKERNEL(VMOVUPS, VBROADCASTSS, VFMADD231PS, VMULPS, VFMADD213PS, VXORPS, $2)

// func kern6x16dw(kc int, a *float64, rs, ks int, b, c *float64, ldc int, alpha float64, acc int)
// kern6x8d on two adjacent micro-panels of b at once (the second kc·8
// elements after the first), in AVX-512 registers: a 6×16 block of c, each
// element the same FMA chain, so the same bits, as kern6x8d's.
TEXT ·kern6x16dw(SB), NOSPLIT, $0-72
	ZKERNEL(VMOVUPD, VBROADCASTSD, VFMADD231PD, VMULPD, VFMADD213PD, $3)

// func kern6x32sw(kc int, a *float32, rs, ks int, b, c *float32, ldc int, alpha float32, acc int)
// kern6x16s on two adjacent micro-panels of b: a 6×32 block of c.
TEXT ·kern6x32sw(SB), NOSPLIT, $0-72
	ZKERNEL(VMOVUPS, VBROADCASTSS, VFMADD231PS, VMULPS, VFMADD213PS, $2)

// func packLines(dst, src *byte, n, stride int)
// Copies n lines of 64 bytes, line i from src + i·stride to dst + 64·i.
TEXT ·packLines(SB), NOSPLIT, $0-32
	PACKARGS(stride)
	TESTQ CX, CX
	JLE  plDone
plLoop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ R9, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  plLoop
plDone:
	VZEROUPPER
	RET

// TRANS4D: packT8d's 4×4 float64 transpose: rows src0..src3 (4 elements each)
// to columns at off, off+64, off+128 and off+192 bytes from DI.
#define TRANS4D(src0, src1, src2, src3, off) \
	VMOVUPD src0, Y0; VMOVUPD src1, Y1; VMOVUPD src2, Y2; VMOVUPD src3, Y3; \
	VUNPCKLPD Y1, Y0, Y4; VUNPCKHPD Y1, Y0, Y5; VUNPCKLPD Y3, Y2, Y6; VUNPCKHPD Y3, Y2, Y7; \
	VPERM2F128 $0x20, Y6, Y4, Y0; VPERM2F128 $0x20, Y7, Y5, Y1; VPERM2F128 $0x31, Y6, Y4, Y2; VPERM2F128 $0x31, Y7, Y5, Y3; \
	VMOVUPD Y0, off(DI); VMOVUPD Y1, off+64(DI); VMOVUPD Y2, off+128(DI); VMOVUPD Y3, off+192(DI)

// TRANS4S: packT16s's 4×4 float32 transpose: rows at base, base+ld, base+2·ld
// and base+3·ld (R9 = ld, R13 = 3·ld in bytes) to columns at off, off+64,
// off+128 and off+192 bytes from DI.
#define TRANS4S(base, off) \
	VMOVUPS (base), X0; VMOVUPS (base)(R9*1), X1; VMOVUPS (base)(R9*2), X2; VMOVUPS (base)(R13*1), X3; \
	VUNPCKLPS X1, X0, X4; VUNPCKHPS X1, X0, X5; VUNPCKLPS X3, X2, X6; VUNPCKHPS X3, X2, X7; \
	VUNPCKLPD X6, X4, X0; VUNPCKHPD X6, X4, X1; VUNPCKLPD X7, X5, X2; VUNPCKHPD X7, X5, X3; \
	VMOVUPS X0, off(DI); VMOVUPS X1, off+64(DI); VMOVUPS X2, off+128(DI); VMOVUPS X3, off+192(DI)

// func packT8d(dst, src *float64, n, ld int)
// Transposes 8 rows of src (row c at src + c·ld) into lines of 8:
// dst[l·8 + c] = src[c·ld + l] for l < n, n a multiple of 4.
TEXT ·packT8d(SB), NOSPLIT, $0-32
	PACKARGS(ld)
	SHLQ $3, R9
	LEAQ (SI)(R9*2), R11
	ADDQ R9, R11
	LEAQ (SI)(R9*4), R10
	LEAQ (R10)(R9*2), R12
	ADDQ R9, R12
	SHRQ $2, CX
	JZ   t8Done
t8Loop:
	TRANS4D((SI), (SI)(R9*1), (SI)(R9*2), (R11), 0)
	TRANS4D((R10), (R10)(R9*1), (R10)(R9*2), (R12), 32)
	ADDQ $32, SI
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	ADDQ $256, DI
	DECQ CX
	JNZ  t8Loop
t8Done:
	VZEROUPPER
	RET

// func packT16s(dst, src *float32, n, ld int)
// packT8d for 16 rows of float32: dst[l·16 + c] = src[c·ld + l], l < n, n a
// multiple of 4.
TEXT ·packT16s(SB), NOSPLIT, $0-32
	PACKARGS(ld)
	SHLQ $2, R9
	LEAQ (R9)(R9*2), R13
	LEAQ (SI)(R9*4), R10
	LEAQ (R10)(R9*4), R11
	LEAQ (R11)(R9*4), R12
	SHRQ $2, CX
	JZ   t16Done
t16Loop:
	TRANS4S(SI, 0)
	TRANS4S(R10, 16)
	TRANS4S(R11, 32)
	TRANS4S(R12, 48)
	ADDQ $16, SI
	ADDQ $16, R10
	ADDQ $16, R11
	ADDQ $16, R12
	ADDQ $256, DI
	DECQ CX
	JNZ  t16Loop
t16Done:
	VZEROUPPER
	RET

// func packA6(dst, src *byte, n, stride, width int)
// Copies n runs of width bytes (24 or 48: microM elements), run l from
// src + l·stride to dst + l·width (a micro-panel of op(A) where A is
// transposed).
TEXT ·packA6(SB), NOSPLIT, $0-40
	PACKARGS(stride)
	MOVQ width+32(FP), R10
	TESTQ CX, CX
	JLE  paDone
	CMPQ R10, $48
	JEQ  pa48
pa24:
	MOVUPS (SI), X0
	MOVQ   16(SI), AX
	MOVUPS X0, (DI)
	MOVQ   AX, 16(DI)
	ADDQ   R9, SI
	ADDQ   $24, DI
	DECQ   CX
	JNZ    pa24
	RET
pa48:
	MOVUPS (SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 32(SI), X2
	MOVUPS X0, (DI)
	MOVUPS X1, 16(DI)
	MOVUPS X2, 32(DI)
	ADDQ   R9, SI
	ADDQ   $48, DI
	DECQ   CX
	JNZ    pa48
paDone:
	RET

// func fmaLoop(n int)
// Runs n steps of 12 independent 256-bit float32 FMAs (2·8·12 flops a step):
// the core's FMA peak, for the benchmarks' fraction of peak.
TEXT ·fmaLoop(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	ZERO12(VXORPS, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11)
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	TESTQ CX, CX
	JLE  fmDone
fmLoop:
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y13, Y1
	VFMADD231PS Y12, Y13, Y2
	VFMADD231PS Y12, Y13, Y3
	VFMADD231PS Y12, Y13, Y4
	VFMADD231PS Y12, Y13, Y5
	VFMADD231PS Y12, Y13, Y6
	VFMADD231PS Y12, Y13, Y7
	VFMADD231PS Y12, Y13, Y8
	VFMADD231PS Y12, Y13, Y9
	VFMADD231PS Y12, Y13, Y10
	VFMADD231PS Y12, Y13, Y11
	DECQ CX
	JNZ  fmLoop
fmDone:
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
