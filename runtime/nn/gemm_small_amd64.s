// AVX-512 small-matrix GEMM kernels (gemm_small_amd64.go): op(A) and op(B)
// read in place (op(B) transposed into panels only where B is transposed),
// the column edge masked with opmasks K1 and K2, so nothing is padded.
//
// Every kernel computes, for rows i < R and the two column vectors of b[l]
// (the first at DI, the second BX bytes on, masked by K1 and K2), the sums
// s[i][v] = Σ_l A[i][l]·b[l][v], each an FMA chain in l order, A[i][l] at
// a + i·rs + l·ks and b[l] at b + l·bs; then c row i = alpha·s (acc == 0)
// or c row i += alpha·s with one FMA (acc != 0), stored under the masks.
// Lanes a mask clears are neither read nor written (AVX-512 suppresses
// their faults), so a row of c or b may end anywhere.
//
// Arguments (all kernels): kc+0, a+8, rs+16, ks+24 (elements), b+32,
// bs+40 (elements), b2+48 (bytes: where b[l]'s second vector starts),
// c+56, ldc+64 (elements), m1+72, m2+80 (the two vectors' lane masks),
// acc+88, alpha+96.
//
// Registers: CX kc, SI A's row 0, R10 row 4 (16x1: R14 row 8, AX row 12),
// R9 rs and R13 3·rs in bytes, R11 ks in bytes, DI b[l], R12 bs in bytes,
// BX b2, DX c, R8 ldc in bytes; Z16/Z17 b[l], Z18/Z19 the broadcasts, Z31
// alpha, Z0-Z15 the accumulators, Z20 a row of c.

#include "textflag.h"

#define ARGS(SHIFT) \
	MOVQ kc+0(FP), CX; \
	MOVQ a+8(FP), SI; \
	MOVQ rs+16(FP), R9; \
	MOVQ ks+24(FP), R11; \
	MOVQ b+32(FP), DI; \
	MOVQ bs+40(FP), R12; \
	MOVQ b2+48(FP), BX; \
	MOVQ c+56(FP), DX; \
	MOVQ ldc+64(FP), R8; \
	SHLQ SHIFT, R9; \
	SHLQ SHIFT, R11; \
	SHLQ SHIFT, R12; \
	SHLQ SHIFT, R8; \
	MOVQ m1+72(FP), AX; \
	KMOVW AX, K1; \
	MOVQ m2+80(FP), AX; \
	KMOVW AX, K2; \
	LEAQ (R9)(R9*2), R13; \
	LEAQ (SI)(R9*4), R10

// ROW2: row i's two FMAs with A[i][l] broadcast from src.
#define ROW2(BCAST, FMA, src, t, c0, c1) \
	BCAST src, t; FMA Z16, t, c0; FMA Z17, t, c1

// ROW1: row i's one FMA.
#define ROW1(BCAST, FMA, src, t, c0) \
	BCAST src, t; FMA Z16, t, c0

// OUTS and OUTA: one vector of a row of c (at off(DX); the second vector is
// 64 bytes after the first) from accumulator s under mask k.
#define OUTS(MUL, STORE, k, off, s) \
	MUL Z31, s, s; STORE s, k, off(DX)
#define OUTA(LOADZ, FMA, STORE, k, off, s) \
	LOADZ off(DX), k, Z20; FMA Z31, s, Z20; STORE Z20, k, off(DX)

#define ZERO(c) VPXORD c, c, c

// K8X2: 8 rows × 2 vectors.
#define K8X2(SHIFT, LOAD, LOADZ, BCAST, FMA, MUL) \
	ARGS(SHIFT); \
	ZERO(Z0); ZERO(Z1); ZERO(Z2); ZERO(Z3); ZERO(Z4); ZERO(Z5); ZERO(Z6); ZERO(Z7); \
	ZERO(Z8); ZERO(Z9); ZERO(Z10); ZERO(Z11); ZERO(Z12); ZERO(Z13); ZERO(Z14); ZERO(Z15); \
	TESTQ CX, CX; \
	JLE done; \
loop: \
	LOADZ (DI), K1, Z16; \
	LOADZ (DI)(BX*1), K2, Z17; \
	ROW2(BCAST, FMA, (SI), Z18, Z0, Z1); \
	ROW2(BCAST, FMA, (SI)(R9*1), Z19, Z2, Z3); \
	ROW2(BCAST, FMA, (SI)(R9*2), Z18, Z4, Z5); \
	ROW2(BCAST, FMA, (SI)(R13*1), Z19, Z6, Z7); \
	ROW2(BCAST, FMA, (R10), Z18, Z8, Z9); \
	ROW2(BCAST, FMA, (R10)(R9*1), Z19, Z10, Z11); \
	ROW2(BCAST, FMA, (R10)(R9*2), Z18, Z12, Z13); \
	ROW2(BCAST, FMA, (R10)(R13*1), Z19, Z14, Z15); \
	ADDQ R11, SI; \
	ADDQ R11, R10; \
	ADDQ R12, DI; \
	DECQ CX; \
	JNZ loop; \
done: \
	BCAST alpha+96(FP), Z31; \
	MOVQ acc+88(FP), AX; \
	TESTQ AX, AX; \
	JNZ accumulate; \
	OUTS(MUL, LOAD, K1, 0, Z0); OUTS(MUL, LOAD, K2, 64, Z1); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z2); OUTS(MUL, LOAD, K2, 64, Z3); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z4); OUTS(MUL, LOAD, K2, 64, Z5); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z6); OUTS(MUL, LOAD, K2, 64, Z7); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z8); OUTS(MUL, LOAD, K2, 64, Z9); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z10); OUTS(MUL, LOAD, K2, 64, Z11); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z12); OUTS(MUL, LOAD, K2, 64, Z13); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z14); OUTS(MUL, LOAD, K2, 64, Z15); \
	VZEROUPPER; \
	RET; \
accumulate: \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z0); OUTA(LOADZ, FMA, LOAD, K2, 64, Z1); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z2); OUTA(LOADZ, FMA, LOAD, K2, 64, Z3); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z4); OUTA(LOADZ, FMA, LOAD, K2, 64, Z5); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z6); OUTA(LOADZ, FMA, LOAD, K2, 64, Z7); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z8); OUTA(LOADZ, FMA, LOAD, K2, 64, Z9); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z10); OUTA(LOADZ, FMA, LOAD, K2, 64, Z11); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z12); OUTA(LOADZ, FMA, LOAD, K2, 64, Z13); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z14); OUTA(LOADZ, FMA, LOAD, K2, 64, Z15); \
	VZEROUPPER; \
	RET

// K16X1: 16 rows × the first vector (K2 unused).
#define K16X1(SHIFT, LOAD, LOADZ, BCAST, FMA, MUL) \
	ARGS(SHIFT); \
	LEAQ (R10)(R9*4), R14; \
	LEAQ (R14)(R9*4), AX; \
	ZERO(Z0); ZERO(Z1); ZERO(Z2); ZERO(Z3); ZERO(Z4); ZERO(Z5); ZERO(Z6); ZERO(Z7); \
	ZERO(Z8); ZERO(Z9); ZERO(Z10); ZERO(Z11); ZERO(Z12); ZERO(Z13); ZERO(Z14); ZERO(Z15); \
	TESTQ CX, CX; \
	JLE done; \
loop: \
	LOADZ (DI), K1, Z16; \
	ROW1(BCAST, FMA, (SI), Z18, Z0); \
	ROW1(BCAST, FMA, (SI)(R9*1), Z19, Z1); \
	ROW1(BCAST, FMA, (SI)(R9*2), Z18, Z2); \
	ROW1(BCAST, FMA, (SI)(R13*1), Z19, Z3); \
	ROW1(BCAST, FMA, (R10), Z18, Z4); \
	ROW1(BCAST, FMA, (R10)(R9*1), Z19, Z5); \
	ROW1(BCAST, FMA, (R10)(R9*2), Z18, Z6); \
	ROW1(BCAST, FMA, (R10)(R13*1), Z19, Z7); \
	ROW1(BCAST, FMA, (R14), Z18, Z8); \
	ROW1(BCAST, FMA, (R14)(R9*1), Z19, Z9); \
	ROW1(BCAST, FMA, (R14)(R9*2), Z18, Z10); \
	ROW1(BCAST, FMA, (R14)(R13*1), Z19, Z11); \
	ROW1(BCAST, FMA, (AX), Z18, Z12); \
	ROW1(BCAST, FMA, (AX)(R9*1), Z19, Z13); \
	ROW1(BCAST, FMA, (AX)(R9*2), Z18, Z14); \
	ROW1(BCAST, FMA, (AX)(R13*1), Z19, Z15); \
	ADDQ R11, SI; \
	ADDQ R11, R10; \
	ADDQ R11, R14; \
	ADDQ R11, AX; \
	ADDQ R12, DI; \
	DECQ CX; \
	JNZ loop; \
done: \
	BCAST alpha+96(FP), Z31; \
	MOVQ acc+88(FP), AX; \
	TESTQ AX, AX; \
	JNZ accumulate; \
	OUTS(MUL, LOAD, K1, 0, Z0); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z1); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z2); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z3); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z4); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z5); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z6); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z7); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z8); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z9); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z10); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z11); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z12); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z13); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z14); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z15); \
	VZEROUPPER; \
	RET; \
accumulate: \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z0); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z1); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z2); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z3); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z4); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z5); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z6); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z7); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z8); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z9); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z10); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z11); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z12); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z13); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z14); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z15); \
	VZEROUPPER; \
	RET

// K8X1: 8 rows × the first vector (K2 unused), where one vector covers
// the columns and fewer than 16 rows are left.
#define K8X1(SHIFT, LOAD, LOADZ, BCAST, FMA, MUL) \
	ARGS(SHIFT); \
	ZERO(Z0); ZERO(Z1); ZERO(Z2); ZERO(Z3); ZERO(Z4); ZERO(Z5); ZERO(Z6); ZERO(Z7); \
	TESTQ CX, CX; \
	JLE done; \
loop: \
	LOADZ (DI), K1, Z16; \
	ROW1(BCAST, FMA, (SI), Z18, Z0); \
	ROW1(BCAST, FMA, (SI)(R9*1), Z19, Z1); \
	ROW1(BCAST, FMA, (SI)(R9*2), Z18, Z2); \
	ROW1(BCAST, FMA, (SI)(R13*1), Z19, Z3); \
	ROW1(BCAST, FMA, (R10), Z18, Z4); \
	ROW1(BCAST, FMA, (R10)(R9*1), Z19, Z5); \
	ROW1(BCAST, FMA, (R10)(R9*2), Z18, Z6); \
	ROW1(BCAST, FMA, (R10)(R13*1), Z19, Z7); \
	ADDQ R11, SI; \
	ADDQ R11, R10; \
	ADDQ R12, DI; \
	DECQ CX; \
	JNZ loop; \
done: \
	BCAST alpha+96(FP), Z31; \
	MOVQ acc+88(FP), AX; \
	TESTQ AX, AX; \
	JNZ accumulate; \
	OUTS(MUL, LOAD, K1, 0, Z0); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z1); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z2); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z3); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z4); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z5); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z6); ADDQ R8, DX; OUTS(MUL, LOAD, K1, 0, Z7); \
	VZEROUPPER; \
	RET; \
accumulate: \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z0); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z1); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z2); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z3); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z4); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z5); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z6); ADDQ R8, DX; OUTA(LOADZ, FMA, LOAD, K1, 0, Z7); \
	VZEROUPPER; \
	RET

// K4X2: 4 rows × 2 vectors (a row edge of 4 to 7 rows).
#define K4X2(SHIFT, LOAD, LOADZ, BCAST, FMA, MUL) \
	ARGS(SHIFT); \
	ZERO(Z0); ZERO(Z1); ZERO(Z2); ZERO(Z3); ZERO(Z4); ZERO(Z5); ZERO(Z6); ZERO(Z7); \
	TESTQ CX, CX; \
	JLE done; \
loop: \
	LOADZ (DI), K1, Z16; \
	LOADZ (DI)(BX*1), K2, Z17; \
	ROW2(BCAST, FMA, (SI), Z18, Z0, Z1); \
	ROW2(BCAST, FMA, (SI)(R9*1), Z19, Z2, Z3); \
	ROW2(BCAST, FMA, (SI)(R9*2), Z18, Z4, Z5); \
	ROW2(BCAST, FMA, (SI)(R13*1), Z19, Z6, Z7); \
	ADDQ R11, SI; \
	ADDQ R12, DI; \
	DECQ CX; \
	JNZ loop; \
done: \
	BCAST alpha+96(FP), Z31; \
	MOVQ acc+88(FP), AX; \
	TESTQ AX, AX; \
	JNZ accumulate; \
	OUTS(MUL, LOAD, K1, 0, Z0); OUTS(MUL, LOAD, K2, 64, Z1); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z2); OUTS(MUL, LOAD, K2, 64, Z3); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z4); OUTS(MUL, LOAD, K2, 64, Z5); ADDQ R8, DX; \
	OUTS(MUL, LOAD, K1, 0, Z6); OUTS(MUL, LOAD, K2, 64, Z7); \
	VZEROUPPER; \
	RET; \
accumulate: \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z0); OUTA(LOADZ, FMA, LOAD, K2, 64, Z1); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z2); OUTA(LOADZ, FMA, LOAD, K2, 64, Z3); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z4); OUTA(LOADZ, FMA, LOAD, K2, 64, Z5); ADDQ R8, DX; \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z6); OUTA(LOADZ, FMA, LOAD, K2, 64, Z7); \
	VZEROUPPER; \
	RET

// K1X2: 1 row × 2 vectors (the last 1 to 3 rows): one FMA chain a vector,
// latency-bound (splitting the chain would change the sums' order).
#define K1X2(SHIFT, LOAD, LOADZ, BCAST, FMA, MUL) \
	ARGS(SHIFT); \
	ZERO(Z0); ZERO(Z1); \
	TESTQ CX, CX; \
	JLE done; \
loop: \
	LOADZ (DI), K1, Z16; \
	LOADZ (DI)(BX*1), K2, Z17; \
	ROW2(BCAST, FMA, (SI), Z18, Z0, Z1); \
	ADDQ R11, SI; \
	ADDQ R12, DI; \
	DECQ CX; \
	JNZ loop; \
done: \
	BCAST alpha+96(FP), Z31; \
	MOVQ acc+88(FP), AX; \
	TESTQ AX, AX; \
	JNZ accumulate; \
	OUTS(MUL, LOAD, K1, 0, Z0); OUTS(MUL, LOAD, K2, 64, Z1); \
	VZEROUPPER; \
	RET; \
accumulate: \
	OUTA(LOADZ, FMA, LOAD, K1, 0, Z0); OUTA(LOADZ, FMA, LOAD, K2, 64, Z1); \
	VZEROUPPER; \
	RET

// func small8x2d(kc int, a *float64, rs, ks int, b *float64, bs, b2 int, c *float64, ldc int, m1, m2 int, acc int, alpha float64)
TEXT ·small8x2d(SB), NOSPLIT, $0-104
	K8X2($3, VMOVUPD, VMOVUPD.Z, VBROADCASTSD, VFMADD231PD, VMULPD)

TEXT ·small8x2s(SB), NOSPLIT, $0-100
	K8X2($2, VMOVUPS, VMOVUPS.Z, VBROADCASTSS, VFMADD231PS, VMULPS)

TEXT ·small16x1d(SB), NOSPLIT, $0-104
	K16X1($3, VMOVUPD, VMOVUPD.Z, VBROADCASTSD, VFMADD231PD, VMULPD)

TEXT ·small16x1s(SB), NOSPLIT, $0-100
	K16X1($2, VMOVUPS, VMOVUPS.Z, VBROADCASTSS, VFMADD231PS, VMULPS)

TEXT ·small1x2d(SB), NOSPLIT, $0-104
	K1X2($3, VMOVUPD, VMOVUPD.Z, VBROADCASTSD, VFMADD231PD, VMULPD)

TEXT ·small1x2s(SB), NOSPLIT, $0-100
	K1X2($2, VMOVUPS, VMOVUPS.Z, VBROADCASTSS, VFMADD231PS, VMULPS)

TEXT ·small8x1d(SB), NOSPLIT, $0-104
	K8X1($3, VMOVUPD, VMOVUPD.Z, VBROADCASTSD, VFMADD231PD, VMULPD)

TEXT ·small8x1s(SB), NOSPLIT, $0-100
	K8X1($2, VMOVUPS, VMOVUPS.Z, VBROADCASTSS, VFMADD231PS, VMULPS)

TEXT ·small4x2d(SB), NOSPLIT, $0-104
	K4X2($3, VMOVUPD, VMOVUPD.Z, VBROADCASTSD, VFMADD231PD, VMULPD)

TEXT ·small4x2s(SB), NOSPLIT, $0-100
	K4X2($2, VMOVUPS, VMOVUPS.Z, VBROADCASTSS, VFMADD231PS, VMULPS)
