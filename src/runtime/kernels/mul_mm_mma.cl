// Tensor-core matrix-matrix kernels for batches (prompt processing) of Q4_0,
// Q8_0, Q4_K and Q6_K weights times Q8_1 activations (common.cl + this file).
//
// Same arguments and broadcasting as kernel_mul_mm_* in mul_mv.cl, so the
// planner can swap them in. The tile shape is a build option
// (POLYCL_MMA_TILE, config.rs, which also checks that its local memory fits):
// MMA_WM x MMA_WN warps, each owning MMA_MT x MMA_NT m16n8 tiles, so a
// work-group of 32 * MMA_WM * MMA_WN work-items computes a tile of MMA_TM
// weight rows by MMA_TN tokens; warp w owns the sub-tile at rows
// (w % MMA_WM) * MMA_MT * 16, tokens (w / MMA_WM) * MMA_NT * 8. The K loop
// runs in stages of 32-element blocks copied into local memory; per block
// every warp runs MMA_MT * MMA_NT integer mma m16n8k32 (one block is exactly
// K=32) and folds each integer result into float accumulators with the
// block's scales, because the scales change every 32 elements.
//
// Two ways to stage:
//  - Q4_0, Q8_0 and Q4_K (mma_tile_raw) copy the blocks as they lie in
//    global memory, with coalesced copies (cp.async on NVIDIA, a stage in
//    flight while one computes), and widen each fragment from those bytes in
//    the mma loop. K-quants count 32-element units of their super-blocks as
//    blocks (a row has ne00 / 32 units, and unit u of a row meets Q8_1 block
//    u of a token), with two floats per (row, unit) instead of one.
//  - Q6_K (mma_tile_q6_k: 210-byte super-blocks, so rows are only 2-byte
//    aligned) stages MMA_KB units as int8 rows, each work-item assembling
//    whole units. It has a scale per 16-element half of a unit, so it runs
//    two m16n8k16 mmas per m16n8 tile, one per half, instead of one
//    m16n8k32; their fragments are the two halves of the k32 fragments.
//
// Built with -DPOLYCL_NVIDIA on NVIDIA devices: mma.sync and cp.async in
// inline PTX. Elsewhere a work-group-local emulation with the same fragment
// layout runs instead, and the copies are plain loads and stores, so the
// staging and fragment indexing are tested on CPU devices the same way they
// run on the GPU.
//
// Launch: global {MMA_WG * ceil(ne01 / MMA_TM), ceil(ne11 / MMA_TN),
// ne12 * ne13}, local {MMA_WG, 1, 1}. Needs ne00 % 32 == 0; Q4_0, Q8_0 and
// Q4_K also ne00 % 64 == 0 and 4-byte aligned weight rows (plan/mul_mv.rs).

#define QK 32
#define Q8_1_BLOCK 36
// The defaults are config.rs's (128 rows x 64 tokens: 2x2 warps of 4x4
// m16n8 tiles); the planner always passes all five.
#ifndef MMA_WM
#define MMA_WM 2
#endif
#ifndef MMA_WN
#define MMA_WN 2
#endif
#ifndef MMA_MT
#define MMA_MT 4
#endif
#ifndef MMA_NT
#define MMA_NT 4
#endif
// Blocks per stage: more blocks amortise the two barriers of a stage and make
// longer contiguous global reads per row, at the cost of local memory.
#ifndef MMA_KB
#define MMA_KB 4
#endif
#define MMA_WG (32 * MMA_WM * MMA_WN)
#define MMA_TM (MMA_WM * MMA_MT * 16)
#define MMA_TN (MMA_WN * MMA_NT * 8)
// Ints per staged row. A half-warp's 64-bit fragment loads read 4 rows x 4
// lanes x 2 ints; they hit 32 distinct banks when the row stride is 8 or 24
// banks mod 32. MMA_KB * 8 + 8 is (16, 24, 8, 8) mod 32 for MMA_KB = 1, 2, 4, 8;
// for MMA_KB = 1 no pad (stride 8) is the conflict-free one. config.rs
// computes the same stride for its local memory check.
#define MMA_S (MMA_KB * 8 + (MMA_KB == 1 ? 0 : 8))

// Inside a staged Q6_K unit the eight 4-byte K chunks are stored in the order
// 0,4,1,5,2,6,3,7: the chunks lane tig needs (tig and 4 + tig, i.e. k bytes
// tig*4.. and 16+tig*4..) are then adjacent and one 64-bit load. Weights and
// activations use the same order, so each dot product is unchanged.

#ifdef POLYCL_NVIDIA
// D = A (16x32, row) * B (32x8, col), C = 0. a: a0..a3, b: b0, b1 of the PTX
// ISA's m16n8k32 .s8 fragments; result c0..c3.
inline int4 mma_s8(int4 a, int2 b, __local int *scratch) {
    (void)scratch;
    const int a0 = a.x, a1 = a.y, a2 = a.z, a3 = a.w, b0 = b.x, b1 = b.y, z = 0;
    int d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(z), "r"(z),
                   "r"(z), "r"(z));
    return (int4)(d0, d1, d2, d3);
}
// D = A (16x16, row) * B (16x8, col), C = 0: the PTX ISA's m16n8k16 .s8
// fragments are a0 (row g) and a1 (row g + 8) with K bytes 4 tig.., and b0
// with K bytes 4 tig.. of column g, i.e. a0, a1 and b0 of m16n8k32 for its
// first 16 K, or a2, a3 and b1 for its last 16.
inline int4 mma_s8_k16(int2 a, int b, __local int *scratch) {
    (void)scratch;
    const int a0 = a.x, a1 = a.y, z = 0;
    int d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5}, {%6}, {%7,%8,%9,%10};"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
                 : "r"(a0), "r"(a1), "r"(b), "r"(z), "r"(z), "r"(z), "r"(z));
    return (int4)(d0, d1, d2, d3);
}
#define MMA_SCRATCH
#define MMA_SCRATCH_PTR ((__local int *)0)
#else
inline int mma_dot4(int a, int b, int c) {
    const char4 x = as_char4(a);
    const char4 y = as_char4(b);
    return c + x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
}
// The same warp-wide product from the same per-lane fragments: each lane
// publishes its registers, then computes its own c0..c3 from the others'.
// `nchunks` 4-byte K chunks: 8 for m16n8k32; 4 for m16n8k16, whose
// fragments are k32's a0, a1 and b0 (see the PTX version), so only those
// are read. Every work-item must call it (it has barriers). `scratch` holds 6
// ints per work-item.
inline int4 mma_emulate(int4 a, int2 b, int nchunks, __local int *scratch) {
    const int lane = get_local_id(0) % 32;
    __local int *s = scratch + (get_local_id(0) / 32) * 32 * 6;
    vstore4(a, lane, s);
    vstore2(b, lane, s + 32 * 4);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int g = lane >> 2, tig = lane & 3;
    int c[4];
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0);
        const int col = tig * 2 + (i & 1);
        int acc = 0;
        for (int j = 0; j < nchunks; ++j) {
            // K chunk j (bytes 4j..4j+3): A row `row` lives in lane
            // (row % 8) * 4 + j % 4, register a0/a1 (j < 4) or a2/a3 (j >= 4),
            // a1/a3 for rows 8..15; B column `col` in lane col * 4 + j % 4,
            // register b0 (j < 4) or b1.
            const int areg = (j >= 4 ? 2 : 0) + (row >= 8 ? 1 : 0);
            const int av = s[((row & 7) * 4 + (j & 3)) * 4 + areg];
            const int bv = s[32 * 4 + (col * 4 + (j & 3)) * 2 + (j >= 4 ? 1 : 0)];
            acc = mma_dot4(av, bv, acc);
        }
        c[i] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return (int4)(c[0], c[1], c[2], c[3]);
}
inline int4 mma_s8(int4 a, int2 b, __local int *scratch) {
    return mma_emulate(a, b, 8, scratch);
}
inline int4 mma_s8_k16(int2 a, int b, __local int *scratch) {
    return mma_emulate((int4)(a, 0, 0), (int2)(b, 0), 4, scratch);
}
#define MMA_SCRATCH __local int mma_scratch[MMA_WG * 6];
#define MMA_SCRATCH_PTR mma_scratch
#endif

// The mma's integer sums as floats, exactly: |c| <= 32 * 128 * 128 < 2^22
// for any int8 operands (Q4_K reaches 32 * 15 * 127, a Q6_K half 16 * 32 *
// 128), so adding c to the bits of 1.5 * 2^23 gives the float 1.5 * 2^23 + c. An
// integer add and a float subtract instead of a conversion, which runs at a
// quarter of the float rate on recent NVIDIA GPUs (four per mma per lane).
inline float4 mma_i2f(int4 c) {
    return as_float4(c + 0x4B400000) - 12582912.0f;
}

// Q6_K unit g of the super-block at sb (mm_stage_q6_k in mul_mv.cl): codes
// minus 32 as signed bytes, d * scale of each 16-element half in *dd. Blocks
// are 210 bytes, so only 2-byte loads are aligned.
inline int8 mma_fetch_q6_k(const __global char *sb, int g, float2 *dd) {
    const int n = g >> 2, k = g & 3;
    const __global char *ql = sb + 64 * n + 32 * (k & 1);
    const __global char *qh = sb + 128 + 32 * n;
    const int shl = 4 * (k >> 1), shh = 2 * k;
    int c[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int lo = (load_i32_a2(ql + 4 * i) >> shl) & 0x0F0F0F0F;
        const int hi = (load_i32_a2(qh + 4 * i) >> shh) & 0x03030303;
        c[i] = as_int(as_char4(lo | (hi << 4)) - (char4)(32));
    }
    *dd = vload_half(0, (const __global half *)(sb + 208)) *
          (float2)((float)sb[192 + 2 * g], (float)sb[192 + 2 * g + 1]);
    return (int8)(c[0], c[4], c[1], c[5], c[2], c[6], c[3], c[7]);
}

// Where the work-item is: lane, m16n8 fragment coordinates (g, tig), its
// warp's sub-tile (wm, wn) in the work-group's tile (row0, tok0), the
// batch indices of activations (i12, i13) and broadcast weights (i02, i03).
#define MMA_TILE_COORDS                                                                       \
    const int tid = get_local_id(0);                                                          \
    const int lane = tid % 32, warp = tid / 32;                                               \
    const int g = lane >> 2, tig = lane & 3;                                                  \
    const int wm = (warp % MMA_WM) * (MMA_MT * 16), wn = (warp / MMA_WM) * (MMA_NT * 8);     \
    const long row0 = get_group_id(0) * MMA_TM, tok0 = get_group_id(1) * MMA_TN;             \
    const long i12 = get_global_id(2) % b_ne.s2, i13 = get_global_id(2) / b_ne.s2;           \
    const long i02 = i12 / (b_ne.s2 / w_ne.s2), i03 = i13 / (b_ne.s3 / w_ne.s3);             \
    const long nblocks = w_ne.s0 / QK;

inline __attribute__((always_inline)) void mma_zero(float acc[MMA_MT][MMA_NT][4]) {
#pragma unroll
    for (int mt = 0; mt < MMA_MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < MMA_NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
}

// The warp's sub-tile at rows r0.., tokens t0.. (m16n8 accumulator layout:
// c0, c1 row g, c2, c3 row g + 8; tokens 2 tig, 2 tig + 1), rows and tokens
// past nrows / ntok dropped.
inline __attribute__((always_inline)) void mma_store(float acc[MMA_MT][MMA_NT][4], TENSOR(dst),
                                                     long nrows, long ntok, long r0, long t0,
                                                     int g, int tig, long i12, long i13) {
#pragma unroll
    for (int mt = 0; mt < MMA_MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < MMA_NT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const long r = r0 + mt * 16 + g + (i >= 2 ? 8 : 0);
                const long t = t0 + nt * 8 + 2 * tig + (i & 1);
                if (r < nrows && t < ntok) store_f32(AT(dst, r, t, i12, i13), acc[mt][nt][i]);
            }
        }
    }
}

// Weight formats (mma_tile_raw's `fmt`).
#define MMA_Q8_0 0
#define MMA_Q4_0 1
#define MMA_Q4_K 2

// Blocks each work-item copies per stage: weight rows and tokens separately,
// since the tile need not be square. When a count does not divide evenly the
// last slot's surplus work-items copy nothing (MMA_*_REM folds the check
// away otherwise).
#define MMA_W_BLOCKS (MMA_TM * MMA_KB)
#define MMA_A_BLOCKS (MMA_TN * MMA_KB)
#define MMA_W_SLOTS ((MMA_W_BLOCKS + MMA_WG - 1) / MMA_WG)
#define MMA_A_SLOTS ((MMA_A_BLOCKS + MMA_WG - 1) / MMA_WG)
#define MMA_W_REM (MMA_W_BLOCKS % MMA_WG != 0)
#define MMA_A_REM (MMA_A_BLOCKS % MMA_WG != 0)

// One MMA_TM x MMA_TN output tile of Q6_K weights (int8 staging). The
// local arrays are the kernel's, since OpenCL C 1.2 declares local memory
// only at kernel scope. Forced inline: a C99 `inline` function too big to
// inline has no external definition.
inline __attribute__((always_inline)) void
mma_tile_q6_k(CTENSOR(w), __global const char *act, ulong act_off, ulong4 act_nb, long4 b_ne,
              TENSOR(dst), __local int *lw, __local int *la, __local float *ldw,
              __local float *ldw2, __local float *lds, __local int *scratch) {
    MMA_TILE_COORDS
    const __global char *abase = act + act_off + i12 * act_nb.s2 + i13 * act_nb.s3;
    float acc[MMA_MT][MMA_NT][4];
    mma_zero(acc);
    // A stage's global data goes through registers: the next stage's loads
    // are issued before this stage's mma work, so their latency hides behind it.
    int8 wq[MMA_W_SLOTS], aq[MMA_A_SLOTS];
    float2 wd[MMA_W_SLOTS];
    float2 ad[MMA_A_SLOTS];
    const long nstages = (nblocks + MMA_KB - 1) / MMA_KB;
    for (long st = -1; st < nstages; ++st) {
        const long ib0 = st * MMA_KB;
        const int nkb = (int)min((long)MMA_KB, nblocks - ib0);
        if (st >= 0) {
#pragma unroll
            for (int j = 0; j < MMA_W_SLOTS; ++j) {
                const int idx = j * MMA_WG + tid;
                const int r = idx / MMA_KB, kb = idx % MMA_KB;
                if ((!MMA_W_REM || idx < MMA_W_BLOCKS) && kb < nkb) {
                    vstore8(wq[j], 0, lw + r * MMA_S + kb * 8);
                    ldw[kb * MMA_TM + r] = wd[j].x;
                    ldw2[kb * MMA_TM + r] = wd[j].y;
                }
            }
#pragma unroll
            for (int j = 0; j < MMA_A_SLOTS; ++j) {
                const int idx = j * MMA_WG + tid;
                const int t = idx / MMA_KB, kb = idx % MMA_KB;
                if ((!MMA_A_REM || idx < MMA_A_BLOCKS) && kb < nkb) {
                    vstore8(aq[j], 0, la + t * MMA_S + kb * 8);
                    vstore2(ad[j], kb * MMA_TN + t, lds);
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (st + 1 < nstages) {
            const long nb0 = ib0 + MMA_KB;
            const int nnkb = (int)min((long)MMA_KB, nblocks - nb0);
            // Consecutive work-items take consecutive blocks of one row, so a
            // warp's global reads are runs of MMA_KB contiguous blocks. Rows
            // and tokens past the end repeat the last one: computed but never
            // stored, and no checks in the mma loop.
#pragma unroll
            for (int j = 0; j < MMA_W_SLOTS; ++j) {
                const int idx = j * MMA_WG + tid;
                const int r = idx / MMA_KB, kb = idx % MMA_KB;
                if ((!MMA_W_REM || idx < MMA_W_BLOCKS) && kb < nnkb) {
                    const long wr = min(row0 + r, w_ne.s1 - 1);
                    wq[j] = mma_fetch_q6_k(AT(w, 0, wr, i02, i03) + ((nb0 + kb) >> 3) * 210,
                                           (int)((nb0 + kb) & 7), &wd[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < MMA_A_SLOTS; ++j) {
                const int idx = j * MMA_WG + tid;
                const int t = idx / MMA_KB, kb = idx % MMA_KB;
                if ((!MMA_A_REM || idx < MMA_A_BLOCKS) && kb < nnkb) {
                    const long tok = min(tok0 + t, b_ne.s1 - 1);
                    const __global char *ab = abase + tok * act_nb.s1 + (nb0 + kb) * Q8_1_BLOCK;
                    ad[j] = vload_half2(0, (const __global half *)ab);
                    const int8 a = vload8(0, (const __global int *)(ab + 4));
                    aq[j] = (int8)(a.s0, a.s4, a.s1, a.s5, a.s2, a.s6, a.s3, a.s7);
                }
            }
        }
        // Stage -1 only fetches (no early continue: every work-item must meet
        // the same barriers, and PoCL mishandles skipped ones).
        const int ncompute = st >= 0 ? nkb : 0;
        for (int kb = 0; kb < ncompute; ++kb) {
            int4 af[MMA_MT];
            float2 dw[MMA_MT], dw2[MMA_MT];
#pragma unroll
            for (int mt = 0; mt < MMA_MT; ++mt) {
                const int r = wm + mt * 16 + g;
                const int2 lo = vload2(0, lw + r * MMA_S + kb * 8 + 2 * tig);
                const int2 hi = vload2(0, lw + (r + 8) * MMA_S + kb * 8 + 2 * tig);
                af[mt] = (int4)(lo.x, hi.x, lo.y, hi.y);
                dw[mt] = (float2)(ldw[kb * MMA_TM + r], ldw[kb * MMA_TM + r + 8]);
                dw2[mt] = (float2)(ldw2[kb * MMA_TM + r], ldw2[kb * MMA_TM + r + 8]);
            }
#pragma unroll
            for (int nt = 0; nt < MMA_NT; ++nt) {
                const int t = wn + nt * 8;
                const int2 bf = vload2(0, la + (t + g) * MMA_S + kb * 8 + 2 * tig);
                // (da, sa) of tokens t + 2 tig and t + 2 tig + 1.
                const float4 ds = vload4(0, lds + (kb * MMA_TN + t + 2 * tig) * 2);
#pragma unroll
                for (int mt = 0; mt < MMA_MT; ++mt) {
                    // The halves, chunks 0..3 (a0, a1, b0) and 4..7 (a2, a3, b1).
                    const float4 c = mma_i2f(mma_s8_k16(af[mt].xy, bf.x, scratch));
                    const float4 c2 = mma_i2f(mma_s8_k16(af[mt].zw, bf.y, scratch));
                    acc[mt][nt][0] += ds.x * (dw[mt].x * c.x + dw2[mt].x * c2.x);
                    acc[mt][nt][1] += ds.z * (dw[mt].x * c.y + dw2[mt].x * c2.y);
                    acc[mt][nt][2] += ds.x * (dw[mt].y * c.z + dw2[mt].y * c2.z);
                    acc[mt][nt][3] += ds.z * (dw[mt].y * c.w + dw2[mt].y * c2.w);
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mma_store(acc, dst, dst_off, dst_ne, dst_nb, w_ne.s1, b_ne.s1, row0 + wm, tok0 + wn, g, tig,
              i12, i13);
}

// Raw-staged tiles for Q4_0, Q8_0 and Q4_K: each stage copies the tile's
// weight rows and tokens into local memory as they lie in global memory
// (whole blocks, Q4_0 / Q8_0 scales included), consecutive work-items taking
// consecutive words, and the fragments are widened from those bytes in the
// mma loop. The int8 staging of mma_tile_q6_k has each work-item assemble
// whole blocks with 2-byte loads, a warp touching 8 rows per load
// instruction; for Q4_0 that took a third of the kernel on the H200
// (docs/perf.md step 18). On NVIDIA the copies are cp.async, which needs no
// registers to carry a stage in flight, so MMA_NBUF - 1 stages are in
// flight while one computes. Needs 4-byte aligned rows and (Q4_0, Q8_0) an
// even number of blocks per row (the planner checks), so every copied word
// lies inside one row; 8- and 16-byte copies where the addresses allow.
#ifndef MMA_NBUF
#define MMA_NBUF 2
#endif
// Blocks per stage: even, so a stage's bytes are whole words.
#define MMA_RKB_Q4_0 (MMA_KB < 2 ? 2 : MMA_KB)
#define MMA_RKB_Q8_0 (MMA_KB < 4 ? 2 : MMA_KB / 2)
// Words per staged weight row / token.
#define MMA_RWW_Q4_0 (MMA_RKB_Q4_0 * 18 / 4)
#define MMA_RWW_Q8_0 (MMA_RKB_Q8_0 * 34 / 4)
// Q4_K: a stage is half a super-block (4 units, 64 bytes of codes a row);
// the row's 16-byte head (d, dmin, scales) goes through registers and
// lands decoded in local memory, two floats per (row, unit). Rows are 18
// words apart: 8-byte aligned and a fragment load's 8 rows on distinct banks.
#define MMA_RKB_Q4_K 4
#define MMA_RWW_Q4_K 18
#define MMA_RKB(fmt) ((fmt) == MMA_Q4_0 ? MMA_RKB_Q4_0 : (fmt) == MMA_Q8_0 ? MMA_RKB_Q8_0 : MMA_RKB_Q4_K)
#define MMA_RWW(fmt) ((fmt) == MMA_Q4_0 ? MMA_RWW_Q4_0 : (fmt) == MMA_Q8_0 ? MMA_RWW_Q8_0 : MMA_RWW_Q4_K)
// Q4_K heads a work-item carries (rows tid, tid + MMA_WG, ...).
#define MMA_HSLOTS ((MMA_TM + MMA_WG - 1) / MMA_WG)

#ifdef POLYCL_NVIDIA
// `dst` is a shared-memory address: OpenCL's __local pointers are offsets
// into the work-group's shared window, which is what cp.async takes.
inline void mma_copy4(__local int *dst, const __global int *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((uint)(ulong)dst), "l"(src)
                 : "memory");
}
inline void mma_copy8(__local int *dst, const __global int *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"((uint)(ulong)dst), "l"(src)
                 : "memory");
}
inline void mma_copy16(__local int *dst, const __global int *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint)(ulong)dst), "l"(src)
                 : "memory");
}
inline void mma_copy_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most MMA_NBUF - 1 committed stages are still in flight:
// the oldest of them, the stage about to be computed, has landed.
inline void mma_copy_wait(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(MMA_NBUF - 1) : "memory");
}
#else
inline void mma_copy4(__local int *dst, const __global int *src) { *dst = *src; }
inline void mma_copy8(__local int *dst, const __global int *src) {
    vstore2(vload2(0, src), 0, dst);
}
inline void mma_copy16(__local int *dst, const __global int *src) {
    vstore4(vload4(0, src), 0, dst);
}
inline void mma_copy_commit(void) {}
inline void mma_copy_wait(void) {}
#endif

// Four bytes from a 2-byte aligned local address (load_i32_a2 of common.cl
// for local memory; OpenCL C 1.2 has no generic address space).
inline int mma_lload_i32_a2(const __local char *p) {
    const ushort2 u = vload2(0, (const __local ushort *)p);
    return (int)u.x | ((int)u.y << 16);
}

// Copies `n` chunks of `cw` words (of which the first `live`) starting
// `off` bytes into rows row0.. of `base` (row stride nb1) to `dst`, chunk r
// at word r * dstride, in units of `u` words (1, 2 or 4; a constant at each
// call: cw, dstride, live, off, nb1 and both bases are multiples of it).
// Rows past `nrows` repeat the last one: computed, never stored.
inline __attribute__((always_inline)) void
mma_raw_copy(__local int *dst, const __global char *base, ulong nb1, long nrows, long row0,
             ulong off, const int n, const int cw, const int dstride, const int live,
             const int u) {
    const int tid = get_local_id(0);
    const int cu = cw / u, liveu = live / u;
    // Unrolled: the compiler keeps each slot's address in registers across
    // the stages (with 4-byte units only, 36 slots, that cost 2 work-groups an
    // SM and was slower; with the wide units 7B Q4_0 pp512 gained 3%, Q8_0
    // 11%, docs/perf.md step 18).
#pragma unroll
    for (int j = 0; j < (n * cu + MMA_WG - 1) / MMA_WG; ++j) {
        const int i = j * MMA_WG + tid;
        const int r = i / cu, k = i - r * cu;
        if (i < n * cu && k < liveu) {
            const long rr = min(row0 + r, nrows - 1);
            const __global int *src = (const __global int *)(base + rr * nb1 + off) + k * u;
            __local int *d = dst + r * dstride + k * u;
            if (u == 4)
                mma_copy16(d, src);
            else if (u == 2)
                mma_copy8(d, src);
            else
                mma_copy4(d, src);
        }
    }
}

// Starts copying stage `st` (its first `nkb` blocks) into `lw` / `la`:
// weights in 8-byte units and tokens in 16-byte units where every stage is
// full and the addresses allow (`wide_*`), else 4-byte units.
inline __attribute__((always_inline)) void
mma_raw_issue(const __global char *wbase, ulong w_nb1, long nrows, long row0,
              const __global char *abase, ulong a_nb1, long ntok, long tok0, long st, int nkb,
              const int fmt, const int wide_w, const int wide_a, __local int *lw,
              __local int *la) {
    const int rkb = MMA_RKB(fmt), wst = MMA_RWW(fmt), aw = rkb * 9;
    const int bb = fmt == MMA_Q4_0 ? 18 : 34;
    // Q4_K: the codes of units 4 (st & 1).. of super-block st / 2.
    const ulong woff = fmt == MMA_Q4_K ? (ulong)(st >> 1) * 144 + 16 + 64 * (st & 1)
                                       : (ulong)st * rkb * bb;
    const int cw = fmt == MMA_Q4_K ? 16 : wst, wlive = fmt == MMA_Q4_K ? 16 : nkb * bb / 4;
    const ulong aoff = (ulong)st * rkb * Q8_1_BLOCK;
    if (wide_w)
        mma_raw_copy(lw, wbase, w_nb1, nrows, row0, woff, MMA_TM, cw, wst, wlive, 2);
    else
        mma_raw_copy(lw, wbase, w_nb1, nrows, row0, woff, MMA_TM, cw, wst, wlive, 1);
    if (wide_a)
        mma_raw_copy(la, abase, a_nb1, ntok, tok0, aoff, MMA_TN, aw, aw, nkb * 9, 4);
    else
        mma_raw_copy(la, abase, a_nb1, ntok, tok0, aoff, MMA_TN, aw, aw, nkb * 9, 1);
}

// The 16-byte heads (d, dmin, 12 bytes of scales) of super-block sb of the
// work-item's Q4_K rows, as 4-byte loads (rows are only 4-byte aligned in
// general).
inline __attribute__((always_inline)) void
mma_q4_k_heads(const __global char *wbase, ulong w_nb1, long nrows, long row0, long sb,
               uint4 head[MMA_HSLOTS]) {
#pragma unroll
    for (int j = 0; j < MMA_HSLOTS; ++j) {
        const int r = j * MMA_WG + get_local_id(0);
        const long rr = min(row0 + min(r, MMA_TM - 1), nrows - 1);
        head[j] = vload4(0, (const __global uint *)(wbase + rr * w_nb1 + sb * 144));
    }
}

// Half `hi` (units 4 hi..) of those heads decoded into ls: (d * scale) of
// unit u of row r at ls[u * MMA_TM + r], (dmin * min) at ls[(4 + u) *
// MMA_TM + r] (get_scale_min_k4 of ggml-quants.c for unit 4 hi + u, whose
// scale bytes are byte u of words 1..3 of the head).
inline __attribute__((always_inline)) void mma_q4_k_scales(const uint4 head[MMA_HSLOTS], int hi,
                                                           __local float *ls) {
#pragma unroll
    for (int j = 0; j < MMA_HSLOTS; ++j) {
        const int r = j * MMA_WG + get_local_id(0);
        if (MMA_TM % MMA_WG == 0 || r < MMA_TM) {
            const ushort d16 = (ushort)head[j].x, dmin16 = (ushort)(head[j].x >> 16);
            const float d = vload_half(0, (const __private half *)&d16);
            const float dmin = vload_half(0, (const __private half *)&dmin16);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const uint b0 = (head[j].y >> (8 * u)) & 0xFF, b1 = (head[j].z >> (8 * u)) & 0xFF;
                const uint b2 = (head[j].w >> (8 * u)) & 0xFF;
                const uint sc = hi ? (b2 & 0xF) | ((b0 >> 6) << 4) : b0 & 63;
                const uint mn = hi ? (b2 >> 4) | ((b1 >> 6) << 4) : b1 & 63;
                ls[u * MMA_TM + r] = d * (float)sc;
                ls[(4 + u) * MMA_TM + r] = dmin * (float)mn;
            }
        }
    }
}

// An output tile with raw staging (Q4_0, Q8_0, Q4_K); `lw` / `la` hold MMA_NBUF
// stages of MMA_TM rows / MMA_TN tokens, `ls` (Q4_K only) MMA_NBUF stages
// of decoded scales (mma_q4_k_scales).
inline __attribute__((always_inline)) void
mma_tile_raw(CTENSOR(w), __global const char *act, ulong act_off, ulong4 act_nb, long4 b_ne,
             TENSOR(dst), const int fmt, __local int *lw, __local int *la, __local float *ls,
             __local int *scratch) {
    const int bb = fmt == MMA_Q4_0 ? 18 : 34;
    const int rkb = MMA_RKB(fmt), ww = MMA_RWW(fmt), aw = rkb * 9;
    MMA_TILE_COORDS
    const __global char *wbase = w + w_off + i02 * w_nb.s2 + i03 * w_nb.s3;
    const __global char *abase = act + act_off + i12 * act_nb.s2 + i13 * act_nb.s3;
    float acc[MMA_MT][MMA_NT][4];
    mma_zero(acc);
    const long nstages = (nblocks + rkb - 1) / rkb;
    const int full = nblocks % rkb == 0;
    const int wide_w = full && (fmt == MMA_Q4_K || (rkb * bb) % 8 == 0) && w_nb.s1 % 8 == 0 &&
                       (ulong)wbase % 8 == 0;
    const int wide_a = full && (rkb * Q8_1_BLOCK) % 16 == 0 && act_nb.s1 % 16 == 0 &&
                       (ulong)abase % 16 == 0;
    // MMA_NBUF - 1 stages in flight ahead of the one computed; a group is
    // committed for every stage, empty past the end, so the wait count holds.
    for (int s = 0; s < MMA_NBUF - 1; ++s) {
        if (s < nstages)
            mma_raw_issue(wbase, w_nb.s1, w_ne.s1, row0, abase, act_nb.s1, b_ne.s1, tok0, s,
                          (int)min((long)rkb, nblocks - s * rkb), fmt, wide_w, wide_a,
                          lw + s * MMA_TM * ww, la + s * MMA_TN * aw);
        mma_copy_commit();
    }
    // Q4_K heads: loaded a stage ahead with the copies, decoded into the
    // stage's scales before its barrier.
    uint4 head[MMA_HSLOTS];
    if (fmt == MMA_Q4_K) mma_q4_k_heads(wbase, w_nb.s1, w_ne.s1, row0, 0, head);
    for (long st = 0; st < nstages; ++st) {
        const int buf = (int)(st % MMA_NBUF);
        // The scale buffer was last read by stage st - MMA_NBUF, before a
        // trailing barrier.
        if (fmt == MMA_Q4_K) {
            mma_q4_k_scales(head, (int)(st & 1), ls + buf * 8 * MMA_TM);
            // A super-block's head serves both of its stages.
            if ((st & 1) && st + 1 < nstages)
                mma_q4_k_heads(wbase, w_nb.s1, w_ne.s1, row0, (st + 1) >> 1, head);
        }
        // Into the buffer the previous iteration computed from (its trailing
        // barrier has passed).
        const long sn = st + MMA_NBUF - 1;
        if (sn < nstages) {
            const int b = (int)(sn % MMA_NBUF);
            mma_raw_issue(wbase, w_nb.s1, w_ne.s1, row0, abase, act_nb.s1, b_ne.s1, tok0, sn,
                          (int)min((long)rkb, nblocks - sn * rkb), fmt, wide_w, wide_a,
                          lw + b * MMA_TM * ww, la + b * MMA_TN * aw);
        }
        mma_copy_commit();
        mma_copy_wait();
        barrier(CLK_LOCAL_MEM_FENCE);
        const __local char *wl = (const __local char *)(lw + buf * MMA_TM * ww);
        const __local char *al = (const __local char *)(la + buf * MMA_TN * aw);
        const int nkb = (int)min((long)rkb, nblocks - st * rkb);
        const __local float *lsb = ls + buf * 8 * MMA_TM;
        for (int kb = 0; kb < nkb; ++kb) {
            int4 af[MMA_MT];
            float2 dw[MMA_MT], dw2[MMA_MT];
#pragma unroll
            for (int mt = 0; mt < MMA_MT; ++mt) {
                const int r = wm + mt * 16 + g;
                if (fmt == MMA_Q4_K) {
                    // Unit kb's codes: nibble kb & 1 of bytes 32 (kb / 2)..;
                    // k = 4 tig.. then k = 16 + 4 tig..
                    const __local int *p0 = (const __local int *)(wl + r * ww * 4 + 32 * (kb >> 1));
                    const __local int *p1 = p0 + 8 * ww;
                    const int sh = 4 * (kb & 1), m = 0x0F0F0F0F;
                    af[mt] = (int4)((p0[tig] >> sh) & m, (p1[tig] >> sh) & m,
                                    (p0[4 + tig] >> sh) & m, (p1[4 + tig] >> sh) & m);
                    dw[mt] = (float2)(lsb[kb * MMA_TM + r], lsb[kb * MMA_TM + r + 8]);
                    dw2[mt] = (float2)(lsb[(4 + kb) * MMA_TM + r], lsb[(4 + kb) * MMA_TM + r + 8]);
                    continue;
                }
                const __local char *p0 = wl + r * ww * 4 + kb * bb;
                const __local char *p1 = p0 + 8 * ww * 4;
                dw[mt] = (float2)(vload_half(0, (const __local half *)p0),
                                  vload_half(0, (const __local half *)p1));
                if (fmt == MMA_Q4_0) {
                    // Low nibbles of qs[4 tig..] are k = 4 tig.., high ones k = 16 + 4 tig..
                    const int v0 = mma_lload_i32_a2(p0 + 2 + 4 * tig);
                    const int v1 = mma_lload_i32_a2(p1 + 2 + 4 * tig);
                    const int m = 0x0F0F0F0F;
                    af[mt] = (int4)(v0 & m, v1 & m, (v0 >> 4) & m, (v1 >> 4) & m);
                } else {
                    af[mt] = (int4)(mma_lload_i32_a2(p0 + 2 + 4 * tig),
                                    mma_lload_i32_a2(p1 + 2 + 4 * tig),
                                    mma_lload_i32_a2(p0 + 18 + 4 * tig),
                                    mma_lload_i32_a2(p1 + 18 + 4 * tig));
                }
            }
#pragma unroll
            for (int nt = 0; nt < MMA_NT; ++nt) {
                const int t = wn + nt * 8;
                const __local char *q = al + (t + g) * aw * 4 + kb * Q8_1_BLOCK;
                const int2 bf = (int2)(*(const __local int *)(q + 4 + 4 * tig),
                                       *(const __local int *)(q + 20 + 4 * tig));
                // (da, sa) of tokens t + 2 tig and t + 2 tig + 1.
                const __local char *d0 = al + (t + 2 * tig) * aw * 4 + kb * Q8_1_BLOCK;
                const float4 ds = (float4)(vload_half2(0, (const __local half *)d0),
                                           vload_half2(0, (const __local half *)(d0 + aw * 4)));
#pragma unroll
                for (int mt = 0; mt < MMA_MT; ++mt) {
                    const float4 c = mma_i2f(mma_s8(af[mt], bf, scratch));
                    if (fmt == MMA_Q4_0) {
                        acc[mt][nt][0] += dw[mt].x * (ds.x * c.x - 8.0f * ds.y);
                        acc[mt][nt][1] += dw[mt].x * (ds.z * c.y - 8.0f * ds.w);
                        acc[mt][nt][2] += dw[mt].y * (ds.x * c.z - 8.0f * ds.y);
                        acc[mt][nt][3] += dw[mt].y * (ds.z * c.w - 8.0f * ds.w);
                    } else if (fmt == MMA_Q4_K) {
                        acc[mt][nt][0] += dw[mt].x * ds.x * c.x - dw2[mt].x * ds.y;
                        acc[mt][nt][1] += dw[mt].x * ds.z * c.y - dw2[mt].x * ds.w;
                        acc[mt][nt][2] += dw[mt].y * ds.x * c.z - dw2[mt].y * ds.y;
                        acc[mt][nt][3] += dw[mt].y * ds.z * c.w - dw2[mt].y * ds.w;
                    } else {
                        acc[mt][nt][0] += dw[mt].x * ds.x * c.x;
                        acc[mt][nt][1] += dw[mt].x * ds.z * c.y;
                        acc[mt][nt][2] += dw[mt].y * ds.x * c.z;
                        acc[mt][nt][3] += dw[mt].y * ds.z * c.w;
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mma_store(acc, dst, dst_off, dst_ne, dst_nb, w_ne.s1, b_ne.s1, row0 + wm, tok0 + wn, g, tig,
              i12, i13);
}

// The Q6_K tile's local memory: weights staged as int8 rows, activations
// likewise, the two floats per (row, unit), and (da, sa) pairs so that a
// lane's two adjacent tokens are one 16-byte load.
kernel void kernel_mul_mm_mma_q6_k(CTENSOR(w), __global const char *act, ulong act_off,
                                   ulong4 act_nb, long4 b_ne, TENSOR(dst)) {
    __local int lw[MMA_TM * MMA_S];
    __local int la[MMA_TN * MMA_S];
    __local float ldw[MMA_KB * MMA_TM];
    __local float ldw2[MMA_KB * MMA_TM];
    __local float lds[MMA_KB * MMA_TN * 2];
    MMA_SCRATCH
    mma_tile_q6_k(w, w_off, w_ne, w_nb, act, act_off, act_nb, b_ne, dst, dst_off, dst_ne, dst_nb,
                  lw, la, ldw, ldw2, lds, MMA_SCRATCH_PTR);
}

// The raw tiles' local memory: MMA_NBUF stages of weight rows and tokens
// as they lie in global memory; int4, so 16-byte aligned for the copies.
// Q4_K adds its decoded scales (LS); the others pass lw in their place,
// never touched.
#define MMA_RAW_KERNEL(NAME, FMT, LS_DECL, LS)                                                \
    kernel void NAME(CTENSOR(w), __global const char *act, ulong act_off, ulong4 act_nb,      \
                     long4 b_ne, TENSOR(dst)) {                                               \
        __local int4 lw[(MMA_NBUF * MMA_TM * MMA_RWW(FMT) + 3) / 4];                          \
        __local int4 la[(MMA_NBUF * MMA_TN * MMA_RKB(FMT) * 9 + 3) / 4];                      \
        LS_DECL                                                                               \
        MMA_SCRATCH                                                                           \
        mma_tile_raw(w, w_off, w_ne, w_nb, act, act_off, act_nb, b_ne, dst, dst_off, dst_ne,  \
                     dst_nb, FMT, (__local int *)lw, (__local int *)la, (__local float *)LS,  \
                     MMA_SCRATCH_PTR);                                                        \
    }

MMA_RAW_KERNEL(kernel_mul_mm_mma_q4_0, MMA_Q4_0, , lw)
MMA_RAW_KERNEL(kernel_mul_mm_mma_q8_0, MMA_Q8_0, , lw)
MMA_RAW_KERNEL(kernel_mul_mm_mma_q4_k, MMA_Q4_K, __local float ls[MMA_NBUF * 8 * MMA_TM];, ls)
