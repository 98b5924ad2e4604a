// Fast matrix-vector kernels for the decode shape (common.cl + this file).
//
// Same arguments as kernel_mul_mat_* in mul_mat.cl, so the planner can swap
// them in per device. One 32-lane group per weight row, MV_ROWS rows per
// work-group; lanes stride over the row's blocks (consecutive lanes read
// consecutive blocks: coalesced), integer dot products per block against the
// Q8_1 activations, float scaling, then a sum over the 32 lanes. Results equal
// the portable kernels up to float summation order (not bit-exact with the CPU
// backend, which is why PoCL keeps the portable kernels).
//
// Built with -DPOLYCL_NVIDIA on NVIDIA devices: dp4a and warp shuffles in
// inline PTX. Elsewhere the same code runs with portable fallbacks.

#define MV_LANES 32
#define MV_ROWS 4
#define QK 32
#define Q8_1_BLOCK 36
// MV_UNROLL (every type but Q4_0) and MV_UNROLL_Q4_0 (build options,
// config.rs mv_unrolls): blocks per lane in flight.
#ifndef MV_UNROLL
#define MV_UNROLL 4
#endif
#ifndef MV_UNROLL_Q4_0
#define MV_UNROLL_Q4_0 1
#endif
#define MV_PRAGMA(x) _Pragma(#x)
#define MV_UNROLL_PRAGMA_(n) MV_PRAGMA(unroll n)
#define MV_UNROLL_PRAGMA(n) MV_UNROLL_PRAGMA_(n)

#ifdef POLYCL_NVIDIA
inline int dot4(int a, int b, int c) {
    int r;
    asm volatile("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
#else
inline int dot4(int a, int b, int c) {
    const char4 x = as_char4(a);
    const char4 y = as_char4(b);
    return c + x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
}
#endif

inline float mv_half_bits(uint h) {
#ifdef POLYCL_NVIDIA
    float r;
    const ushort u = (ushort)h;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(u));
    return r;
#else
    const ushort u = (ushort)h;
    return vload_half(0, (const __private half *)&u);
#endif
}

// The common frame: which row, which activation row, and where to write.
#define MV_PROLOGUE                                                                   \
    const int lane = get_local_id(0) % MV_LANES;                                      \
    const int group = get_local_id(0) / MV_LANES;                                     \
    const long i01 = get_group_id(0) * MV_ROWS + group;                               \
    const long i11 = get_global_id(1);                                                \
    const long i12 = get_global_id(2) % b_ne.s2;                                      \
    const long i13 = get_global_id(2) / b_ne.s2;                                      \
    const long i02 = i12 / (b_ne.s2 / w_ne.s2);                                       \
    const long i03 = i13 / (b_ne.s3 / w_ne.s3);                                       \
    __local float scratch_all[MV_ROWS * MV_LANES];                                    \
    __local float *scratch = scratch_all + group * MV_LANES;                          \
    const bool live = i01 < w_ne.s1;                                                  \
    const __global char *wrow = AT(w, 0, live ? i01 : 0, i02, i03);                   \
    const __global char *arow = act + act_off + i11 * act_nb.s1 + i12 * act_nb.s2 +   \
                                i13 * act_nb.s3;                                      \
    const long nblocks = w_ne.s0 / QK;

#define MV_EPILOGUE                                                                   \
    const float total = warp_sum(sum, scratch);                                       \
    if (live && lane == 0) store_f32(AT(dst, i01, i11, i12, i13), total);

// One lane's share of two rows' dot products with one activation row (the
// caller sums the 32 lanes): twice the weight loads in flight and one
// activation load for both rows.
// Q4_0 weights x Q8_1 activations: d_w * (d_a * sum(q_w * q_a) - 8 * s_a).
inline float2 mv_row2_words_q4_0(const __global char *w0, const __global char *w1,
                                 const __global char *arow, long nblocks, int lane) {
    float2 sum = (float2)(0.0f, 0.0f);
MV_UNROLL_PRAGMA(MV_UNROLL_Q4_0)
    for (long ib = lane; ib < nblocks; ib += MV_LANES) {
        const __global char *ab = arow + ib * Q8_1_BLOCK;
        const float da = vload_half(0, (const __global half *)ab);
        const float sa = vload_half(1, (const __global half *)ab);
        const int8 a = vload8(0, (const __global int *)(ab + 4));
        for (int m = 0; m < 2; ++m) {
            const __global char *wb = (m == 0 ? w0 : w1) + ib * 18;
            const float dw = vload_half(0, (const __global half *)wb);
            int q[4];
            LOAD_WORDS_A2(wb + 2, q, 4);
            int isum = 0;
            isum = dot4(q[0] & 0x0F0F0F0F, a.s0, isum);
            isum = dot4((q[0] >> 4) & 0x0F0F0F0F, a.s4, isum);
            isum = dot4(q[1] & 0x0F0F0F0F, a.s1, isum);
            isum = dot4((q[1] >> 4) & 0x0F0F0F0F, a.s5, isum);
            isum = dot4(q[2] & 0x0F0F0F0F, a.s2, isum);
            isum = dot4((q[2] >> 4) & 0x0F0F0F0F, a.s6, isum);
            isum = dot4(q[3] & 0x0F0F0F0F, a.s3, isum);
            isum = dot4((q[3] >> 4) & 0x0F0F0F0F, a.s7, isum);
            const float r = dw * (da * (float)isum - 8.0f * sa);
            if (m == 0) sum.x += r; else sum.y += r;
        }
    }
    return sum;
}

// Q8_0 weights x Q8_1 activations: d_w * d_a * sum(q_w * q_a).
inline float2 mv_row2_q8_0(const __global char *w0, const __global char *w1,
                           const __global char *arow, long nblocks, int lane) {
    float2 sum = (float2)(0.0f, 0.0f);
MV_UNROLL_PRAGMA(MV_UNROLL)
    for (long ib = lane; ib < nblocks; ib += MV_LANES) {
        const __global char *ab = arow + ib * Q8_1_BLOCK;
        const float da = vload_half(0, (const __global half *)ab);
        const int8 a = vload8(0, (const __global int *)(ab + 4));
        for (int m = 0; m < 2; ++m) {
            const __global char *wb = (m == 0 ? w0 : w1) + ib * 34;
            const float dw = vload_half(0, (const __global half *)wb);
            int q[8];
            LOAD_WORDS_A2(wb + 2, q, 8);
            int isum = 0;
            isum = dot4(q[0], a.s0, isum);
            isum = dot4(q[1], a.s1, isum);
            isum = dot4(q[2], a.s2, isum);
            isum = dot4(q[3], a.s3, isum);
            isum = dot4(q[4], a.s4, isum);
            isum = dot4(q[5], a.s5, isum);
            isum = dot4(q[6], a.s6, isum);
            isum = dot4(q[7], a.s7, isum);
            const float r = dw * da * (float)isum;
            if (m == 0) sum.x += r; else sum.y += r;
        }
    }
    return sum;
}

// MV_PAIRS (build option, config.rs `POLYCL_MV_LOADS`, on by default): a
// lane of a Q4_0 row pair takes two adjacent blocks at a time. Two blocks are
// 36 bytes, so from a 4-byte aligned row they are 9 aligned words: the first
// block's codes sit 2 bytes into a word (a funnel shift by a constant 16
// each), the second's are aligned, and their two Q8_1 blocks (72 bytes) are
// 9 8-byte loads. A lane's single block (mv_row2_words_q4_0) needs a select
// a word for its runtime alignment, an extra 2-byte load and ten loads for
// its Q8_1 block. On the H200 the 7B Q4_0's decode span was ~4% shorter
// this way. Q8_0 pairs (17 words a row) were slower, and so was the 1B's
// 16-warp GLU, 512 wide, which fits two groups a compute unit only at 64
// registers (the 8-warp GLU went from 64 to 72 with pairs), so Q8_0 and
// that GLU keep the words (docs/perf.md step 61).
#if defined(MV_PAIRS) && !defined(POLYCL_STEP)
#ifndef MV_UNROLL_PAIRS_Q4_0
#define MV_UNROLL_PAIRS_Q4_0 1
#endif
// Whether a row pair's blocks are taken two at a time (the same for every
// lane): rows of more than one pair a lane (a 1B's 2048 columns, one pair a
// lane, ran no faster; the halves of its 5632-column rows in MulMatAddNorm's
// split did).
inline bool mv_pairs_fit(const __global char *w0, const __global char *w1,
                         const __global char *arow, long nblocks) {
    return nblocks > 2 * MV_LANES && (nblocks & 1) == 0 &&
           ((((ulong)w0) | ((ulong)w1)) & 3) == 0 && (((ulong)arow) & 7) == 0;
}
// Two Q8_1 blocks from an 8-byte aligned address: a[0] and a[9] are their
// (scale, sum) halves, a[1..9) and a[10..18) their codes.
#define MV_PAIR_Q8_1(ab, a)                                                                 \
    do {                                                                                    \
        const __global uint2 *p_ = (const __global uint2 *)(ab);                            \
        _Pragma("unroll") for (int i_ = 0; i_ < 9; ++i_) {                                  \
            const uint2 v_ = p_[i_];                                                        \
            a[2 * i_] = v_.x;                                                               \
            a[2 * i_ + 1] = v_.y;                                                           \
        }                                                                                   \
    } while (0)
#define MV_FUNNEL16(lo, hi) ((int)(((lo) >> 16) | ((hi) << 16)))

// One row's pair of blocks: x its 9 words, a the two Q8_1 blocks, whose
// scales and sums MV_PAIR2_Q4_0 unpacked once for both rows.
#define MV_PAIR_DA_SCALE 1.0f
inline float mv_pair_q4_0(const uint *x, const uint *a, float da0, float sa0, float da1,
                          float sa1) {
    int i0 = 0, i1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int q = MV_FUNNEL16(x[i], x[i + 1]);
        i0 = dot4(q & 0x0F0F0F0F, (int)a[1 + i], i0);
        i0 = dot4((q >> 4) & 0x0F0F0F0F, (int)a[5 + i], i0);
        i1 = dot4((int)x[5 + i] & 0x0F0F0F0F, (int)a[10 + i], i1);
        i1 = dot4(((int)x[5 + i] >> 4) & 0x0F0F0F0F, (int)a[14 + i], i1);
    }
    return mv_half_bits(x[0]) * (da0 * (float)i0 - 8.0f * sa0) +
           mv_half_bits(x[4] >> 16) * (da1 * (float)i1 - 8.0f * sa1);
}
// One lane's pair of blocks in both rows, added into `sum`: the two Q8_1
// blocks at `ab`, and `WP`, an expression of the row m (0, 1) that points at
// the row's 9 words (global memory or a local stage, so a macro).
#define MV_PAIR2_Q4_0(ab, WP, sum)                                                          \
    do {                                                                                    \
        uint a[18];                                                                         \
        MV_PAIR_Q8_1(ab, a);                                                                \
        const float da0 = MV_PAIR_DA_SCALE * mv_half_bits(a[0]);                            \
        const float sa0 = mv_half_bits(a[0] >> 16);                                         \
        const float da1 = MV_PAIR_DA_SCALE * mv_half_bits(a[9]);                            \
        const float sa1 = mv_half_bits(a[9] >> 16);                                         \
        for (int m = 0; m < 2; ++m) {                                                       \
            uint x[9];                                                                      \
            _Pragma("unroll") for (int i = 0; i < 9; ++i) x[i] = (WP)[i];                   \
            const float r = mv_pair_q4_0(x, a, da0, sa0, da1, sa1);                         \
            if (m == 0) sum.x += r; else sum.y += r;                                        \
        }                                                                                   \
    } while (0)
inline float2 mv_row2_q4_0(const __global char *w0, const __global char *w1,
                           const __global char *arow, long nblocks, int lane) {
    if (!mv_pairs_fit(w0, w1, arow, nblocks))
        return mv_row2_words_q4_0(w0, w1, arow, nblocks, lane);
    float2 sum = (float2)(0.0f, 0.0f);
    const long npairs = nblocks >> 1;
MV_UNROLL_PRAGMA(MV_UNROLL_PAIRS_Q4_0)
    for (long ip = lane; ip < npairs; ip += MV_LANES)
        MV_PAIR2_Q4_0(arow + ip * (2 * Q8_1_BLOCK),
                      (const __global uint *)((m == 0 ? w0 : w1) + ip * 36), sum);
    return sum;
}

#else
// The step program (PoCL compiles it cold in CI) and MV_PAIRS off: the words.
#define mv_row2_q4_0 mv_row2_words_q4_0
#endif

// K-quant weights against Q8_1 activations, like CUDA's vec_dot_q4_K_q8_1:
// a Q8_1 block is one 32-element unit of a super-block (unit u is sub-block
// u % 8 of super-block u / 8), so nblocks counts units (ne0 / 32) and lanes
// stride over them; the fused kernels that write Q8_1 copies of their
// results feed these as they feed Q4_0. (The portable kernels keep ggml's
// Q8_K activations, which is what makes them CPU-exact.)

// Q4_K: unit j of a super-block is sub-block j: scale sc and min m (6 bits
// each, q4_k_scale_min in common.cl), 4-bit codes in nibble (j & 1) of qs[32 *
// (j / 2) + l]. Sum: d_a * d * sc * sum(code * q_a) - dmin * m * s_a, where
// s_a = d_a * sum(q_a) is the Q8_1 block's second half.
inline float mv_unit_q4_K(const __global char *wb, int j, int8 a, float da, float sa) {
    int sc, m;
    q4_k_scale_min(wb, j, &sc, &m);
    const int8 q = vload8(0, (const __global int *)(wb + 16 + 32 * (j >> 1)));
    const int sh = 4 * (j & 1);
    int isum = 0;
    isum = dot4((q.s0 >> sh) & 0x0F0F0F0F, a.s0, isum);
    isum = dot4((q.s1 >> sh) & 0x0F0F0F0F, a.s1, isum);
    isum = dot4((q.s2 >> sh) & 0x0F0F0F0F, a.s2, isum);
    isum = dot4((q.s3 >> sh) & 0x0F0F0F0F, a.s3, isum);
    isum = dot4((q.s4 >> sh) & 0x0F0F0F0F, a.s4, isum);
    isum = dot4((q.s5 >> sh) & 0x0F0F0F0F, a.s5, isum);
    isum = dot4((q.s6 >> sh) & 0x0F0F0F0F, a.s6, isum);
    isum = dot4((q.s7 >> sh) & 0x0F0F0F0F, a.s7, isum);
    const float d = vload_half(0, (const __global half *)wb);
    const float dmin = vload_half(1, (const __global half *)wb);
    return da * d * (float)sc * (float)isum - dmin * (float)m * sa;
}

// Q6_K: unit g (32 elements, n = g / 4, k = g % 4) of super-block ib: low 4
// bits from ql[64n + 32(k & 1) + l] (high nibble for k >= 2), high 2 bits
// from qh[32n + l] >> 2k, code - 32, int8 scales for each 16, so the -32
// needs the sums of each half of the activation block (dp4a with ones).
// Blocks are 210 bytes, so the code bytes are 2-byte aligned (LOAD_WORDS_A2).
inline float mv_unit_q6_K(const __global char *wb, int g, int8 a, float da) {
    const int n = g >> 2, k = g & 3;
    const __global char *ql = wb + 64 * n + 32 * (k & 1);
    const __global char *qh = wb + 128 + 32 * n;
    const int shl = 4 * (k >> 1), shh = 2 * k;
    int lw[8], hw[8], code[8];
    LOAD_WORDS_A2(ql, lw, 8);
    LOAD_WORDS_A2(qh, hw, 8);
    for (int i = 0; i < 8; ++i)
        code[i] = ((lw[i] >> shl) & 0x0F0F0F0F) | (((hw[i] >> shh) & 0x03030303) << 4);
    const int ones = 0x01010101;
    int s0 = 0, s1 = 0, as0 = 0, as1 = 0;
    s0 = dot4(code[0], a.s0, s0);
    s0 = dot4(code[1], a.s1, s0);
    s0 = dot4(code[2], a.s2, s0);
    s0 = dot4(code[3], a.s3, s0);
    s1 = dot4(code[4], a.s4, s1);
    s1 = dot4(code[5], a.s5, s1);
    s1 = dot4(code[6], a.s6, s1);
    s1 = dot4(code[7], a.s7, s1);
    as0 = dot4(ones, a.s0, dot4(ones, a.s1, dot4(ones, a.s2, dot4(ones, a.s3, as0))));
    as1 = dot4(ones, a.s4, dot4(ones, a.s5, dot4(ones, a.s6, dot4(ones, a.s7, as1))));
    const float d = vload_half(0, (const __global half *)(wb + 208));
    const float sc0 = (float)wb[192 + 2 * g], sc1 = (float)wb[192 + 2 * g + 1];
    return da * d * (sc0 * (float)(s0 - 32 * as0) + sc1 * (float)(s1 - 32 * as1));
}

#define MV_ROW2_K(NAME, UNIT_CALL, BLOCK_BYTES)                                              \
inline float2 NAME(const __global char *w0, const __global char *w1,                       \
                   const __global char *arow, long units, int lane) {                       \
    float2 sum = (float2)(0.0f, 0.0f);                                                      \
    MV_UNROLL_PRAGMA(MV_UNROLL)                                                             \
    for (long u = lane; u < units; u += MV_LANES) {                                         \
        const long ib = u >> 3;                                                             \
        const int j = (int)(u & 7);                                                         \
        const __global char *ab = arow + u * Q8_1_BLOCK;                                    \
        const float da = vload_half(0, (const __global half *)ab);                          \
        const float sa = vload_half(1, (const __global half *)ab);                          \
        const int8 a = vload8(0, (const __global int *)(ab + 4));                           \
        sum.x += UNIT_CALL(w0 + ib * BLOCK_BYTES);                                          \
        sum.y += UNIT_CALL(w1 + ib * BLOCK_BYTES);                                          \
    }                                                                                       \
    return sum;                                                                             \
}
#define Q4_K_UNIT(wb) mv_unit_q4_K((wb), j, a, da, sa)
#define Q6_K_UNIT(wb) mv_unit_q6_K((wb), j, a, da)
MV_ROW2_K(mv_row2_q4_K, Q4_K_UNIT, 144)
MV_ROW2_K(mv_row2_q6_K, Q6_K_UNIT, 210)

// Q4_0 and Q8_0 matvecs: each row group (32 lanes) computes two adjacent
// rows in one pass (mv_row2_*), so twice the weight loads are in flight and
// the activation is loaded once for both; MV_ROWS row groups a work-group.
// global {ceil(ne01 / (2 * MV_ROWS)) * MV_ROWS * MV_LANES, ne11, ne12 * ne13}.
#define MV2_BUFS(R, W) R(const char, w) R(const char, act) W(char, dst)
#define MV2_KERNEL(NAME, ROWDOT2)                                                           \
kernel void NAME(PK_SIG(MV2_BUFS)) {                                                        \
    PK_BEGIN_BUFS(MV2_BUFS)                                                                 \
    PK_TENSOR(w) PK_ULONG(act_off) PK_ULONG4(act_nb) PK_LONG4(b_ne) PK_TENSOR(dst)          \
    LOCAL_ARRAY(float, scratch_all, MV_ROWS * MV_LANES);                                    \
    const int lane = get_local_id(0) % MV_LANES;                                            \
    const int group = get_local_id(0) / MV_LANES;                                           \
    __local float *scratch = scratch_all + group * MV_LANES;                                \
    const long i01 = (get_group_id(0) * MV_ROWS + group) * 2;                               \
    const long i11 = get_global_id(1);                                                      \
    const long i12 = get_global_id(2) % b_ne.s2;                                            \
    const long i13 = get_global_id(2) / b_ne.s2;                                            \
    const long i02 = i12 / (b_ne.s2 / w_ne.s2);                                             \
    const long i03 = i13 / (b_ne.s3 / w_ne.s3);                                             \
    const bool live0 = i01 < w_ne.s1, live1 = i01 + 1 < w_ne.s1;                            \
    const __global char *w0 = AT(w, 0, live0 ? i01 : 0, i02, i03);                          \
    const __global char *w1 = AT(w, 0, live1 ? i01 + 1 : 0, i02, i03);                      \
    const __global char *arow = act + act_off + i11 * act_nb.s1 + i12 * act_nb.s2 +         \
                                i13 * act_nb.s3;                                            \
    const float2 s = ROWDOT2(w0, w1, arow, w_ne.s0 / QK, lane);                             \
    const float t0 = warp_sum(s.x, scratch);                                                \
    const float t1 = warp_sum(s.y, scratch);                                                \
    if (lane == 0) {                                                                        \
        if (live0) store_f32(AT(dst, i01, i11, i12, i13), t0);                              \
        if (live1) store_f32(AT(dst, i01 + 1, i11, i12, i13), t1);                          \
    }                                                                                       \
    PK_END                                                                                  \
}

MV2_KERNEL(kernel_mul_mv_q4_0, mv_row2_q4_0)
MV2_KERNEL(kernel_mul_mv_q8_0, mv_row2_q8_0)
MV2_KERNEL(kernel_mul_mv_q4_k, mv_row2_q4_K)
MV2_KERNEL(kernel_mul_mv_q6_k, mv_row2_q6_K)

// The fused matmuls whose activation is the norm of a MulMatAddNorm
// (mul_mv_norm.cl) read its Q8_1 copy without the norm's 1/rms and with the
// producer's own factor c, and multiply their dot products by 1/(rms * c).
// They make rms from the producer's shares of the sum of squares, `dn_parts`
// floats at dn + dn_off followed by c (0 parts: no such norm, the factor is
// 1), over a row of `dn_n` elements. The shares are loaded before the dot
// products (mv_norm_prefetch: no round trip of its own at the end) and
// summed after them (mv_norm_rsqrt); every work-item calls both, since
// warp_sum holds barriers off NVIDIA.
#define MV_NORM_BUF(R) R(const char, dn)
#define PK_MV_NORM PK_ULONG(dn_off) PK_INT(dn_parts) PK_LONG(dn_n) PK_FLOAT(dn_eps)
inline float8 mv_norm_prefetch(const __global char *dn, int parts, int lane) {
    const __global float *p = (const __global float *)dn;
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = lane + 32 * k < parts ? p[lane + 32 * k] : 0.0f;
    return (float8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}
// 1 / sqrt(sum of the shares / n + eps); 1 without shares.
inline float mv_norm_rsqrt(float8 pre, const __global char *dn, int parts, long n, float eps,
                           int lane, __local float *scratch) {
    const __global float *p = (const __global float *)dn;
    float acc = ((pre.s0 + pre.s1) + (pre.s2 + pre.s3)) + ((pre.s4 + pre.s5) + (pre.s6 + pre.s7));
    for (int i = lane + 256; i < parts; i += 32) acc += p[i];
    const float total = warp_sum(acc, scratch);
    return parts > 0 ? 1.0f / sqrt(total / (float)n + eps) : 1.0f;
}
// The producer's factor c, stored after its shares; 1 without shares.
inline float mv_norm_c(const __global char *dn, int parts) {
    return parts > 0 ? ((const __global float *)dn)[parts] : 1.0f;
}

// ---------------------------------------------------------------------------
// Fused decode matmuls (passes/fuse): one activation row (Q8_1), 2-D weights
// of one row length (one type, or several in the _mixed kernels), F32
// results of one column, contiguous.
// ---------------------------------------------------------------------------

// Matrices of different types in one group kernel (`wtypes`: 8 bits a
// matrix, 0 Q4_0, 1 Q8_0, 2 Q4_K, 3 Q6_K; fused_matmul.rs group_types):
// the type is uniform over a work-group, so the switch does not diverge.
inline float2 mv_row2_mixed(int t, const __global char *w0, const __global char *w1,
                            const __global char *arow, long nblocks, int lane) {
    switch (t) {
    case 1: return mv_row2_q8_0(w0, w1, arow, nblocks, lane);
    case 2: return mv_row2_q4_K(w0, w1, arow, nblocks, lane);
    case 3: return mv_row2_q6_K(w0, w1, arow, nblocks, lane);
    default: return mv_row2_q4_0(w0, w1, arow, nblocks, lane);
    }
}
// As a ROWDOT2 of MV_GROUP_ROWS, where `m` is the matrix.
#define mv_row2_by_type(w0, w1, arow, nblocks, lane)                                        \
    mv_row2_mixed((wtypes >> (8 * m)) & 0xFF, w0, w1, arow, nblocks, lane)

// The group kernels' rows: matrix m, rows r and r + 1 of it (live0/live1
// where they exist), their results t0 and t1 (in every lane, times
// 1/(rms * c) where the activation is a MulMatAddNorm's norm) and d, the
// matrix's result.
// Needs the group kernels' arguments w0..w2, act, d0..d2, g0, g1 and the
// MV_NORM_BUF ones.
#define MV_GROUP_ROWS(ROWDOT2)                                                               \
    LOCAL_ARRAY(float, scratch_all, MV_ROWS * MV_LANES);                                    \
    const int lane = get_local_id(0) % MV_LANES;                                            \
    const int group = get_local_id(0) / MV_LANES;                                           \
    __local float *scratch = scratch_all + group * MV_LANES;                                \
    const long gid = get_group_id(0);                                                       \
    const int m = gid < g0 ? 0 : (gid < g0 + g1 ? 1 : 2);                                   \
    const long r = ((gid - (m == 0 ? 0 : (m == 1 ? g0 : g0 + g1))) * MV_ROWS + group) * 2;  \
    const __global char *w = m == 0 ? w0 + w0_off : (m == 1 ? w1 + w1_off : w2 + w2_off);   \
    const ulong w_nb1 = m == 0 ? w0_nb.s1 : (m == 1 ? w1_nb.s1 : w2_nb.s1);                 \
    const long rows = m == 0 ? w0_ne.s1 : (m == 1 ? w1_ne.s1 : w2_ne.s1);                   \
    __global char *d = m == 0 ? d0 + d0_off : (m == 1 ? d1 + d1_off : d2 + d2_off);         \
    const bool live0 = r < rows, live1 = r + 1 < rows;                                      \
    const float8 dn_pre = mv_norm_prefetch(dn + dn_off, dn_parts, lane);                    \
    const float dn_c = mv_norm_c(dn + dn_off, dn_parts);                                    \
    const float2 s = ROWDOT2(w + (live0 ? r : 0) * w_nb1, w + (live1 ? r + 1 : 0) * w_nb1,  \
                             act + act_off, w0_ne.s0 / QK, lane);                           \
    const float dn_scale =                                                                  \
        mv_norm_rsqrt(dn_pre, dn + dn_off, dn_parts, dn_n, dn_eps, lane, scratch) / dn_c;   \
    const float t0 = warp_sum(s.x, scratch) * dn_scale;                                     \
    const float t1 = warp_sum(s.y, scratch) * dn_scale;                                     \

// MulMatGroup: up to three matrices in one launch, 2 * MV_ROWS rows a
// work-group (two a row group, as MV2_KERNEL); matrix 0 takes the first g0
// work-groups, matrix 1 the next g1, matrix 2 the rest.
// global {(g0 + g1 + g2) * MV_ROWS * MV_LANES}, local {MV_ROWS * MV_LANES}.
#define MV_GROUP_BUFS(R, W)                                                                 \
    R(const char, w0) R(const char, w1) R(const char, w2) R(const char, act) W(char, d0)    \
    W(char, d1) W(char, d2) MV_NORM_BUF(R)
#define MV_GROUP_KERNEL(NAME, ROWDOT2)                                                       \
kernel void NAME(PK_SIG(MV_GROUP_BUFS)) {                                                   \
    PK_BEGIN_BUFS(MV_GROUP_BUFS)                                                            \
    PK_TENSOR(w0) PK_TENSOR(w1) PK_TENSOR(w2) PK_ULONG(act_off) PK_TENSOR(d0)               \
    PK_TENSOR(d1) PK_TENSOR(d2) PK_LONG(g0) PK_LONG(g1) PK_INT(wtypes) PK_MV_NORM           \
    MV_GROUP_ROWS(ROWDOT2)                                                                  \
    if (lane == 0) {                                                                        \
        if (live0) store_f32(d + r * 4, t0);                                                \
        if (live1) store_f32(d + (r + 1) * 4, t1);                                          \
    }                                                                                       \
    PK_END                                                                                  \
}

MV_GROUP_KERNEL(kernel_mul_mv_group_q4_0, mv_row2_q4_0)
MV_GROUP_KERNEL(kernel_mul_mv_group_q8_0, mv_row2_q8_0)
MV_GROUP_KERNEL(kernel_mul_mv_group_q4_k, mv_row2_q4_K)
MV_GROUP_KERNEL(kernel_mul_mv_group_q6_k, mv_row2_q6_K)
MV_GROUP_KERNEL(kernel_mul_mv_group_mixed, mv_row2_by_type)

// MulMatNormed (plan/matmul_norm.rs lower_normed): one matrix of a
// MulMatAddNorm's normed * weight, two rows a warp as MV_GROUP_KERNEL, whose
// work-items also write that row as floats, sum * 1/rms * weight (the order
// of ggml's rms_norm then mul), for the host: llama's output norm and lm
// head in one launch, where the norm took one of its own.
// global {ceil(rows / (2 * MV_ROWS)) * MV_ROWS * MV_LANES}, local {MV_ROWS * MV_LANES}.
#define MV_NORMED_BUFS(R, W)                                                                \
    R(const char, w) R(const char, act) W(char, d) MV_NORM_BUF(R) R(const char, rs)         \
    R(const char, rw) W(char, ro)
#define MV_NORMED_KERNEL(NAME, ROWDOT2)                                                     \
kernel void NAME(PK_SIG(MV_NORMED_BUFS)) {                                                  \
    PK_BEGIN_BUFS(MV_NORMED_BUFS)                                                           \
    PK_TENSOR(w) PK_ULONG(act_off) PK_ULONG(d_off) PK_MV_NORM PK_ULONG(rs_off)              \
    PK_ULONG(rw_off) PK_ULONG(ro_off)                                                       \
    LOCAL_ARRAY(float, scratch_all, MV_ROWS * MV_LANES);                                    \
    const int lane = get_local_id(0) % MV_LANES;                                            \
    const int group = get_local_id(0) / MV_LANES;                                           \
    __local float *scratch = scratch_all + group * MV_LANES;                                \
    const long r = (get_group_id(0) * MV_ROWS + group) * 2;                                 \
    const bool live0 = r < w_ne.s1, live1 = r + 1 < w_ne.s1;                                \
    const float8 dn_pre = mv_norm_prefetch(dn + dn_off, dn_parts, lane);                    \
    const float dn_c = mv_norm_c(dn + dn_off, dn_parts);                                    \
    const float2 s = ROWDOT2(AT(w, 0, live0 ? r : 0, 0, 0), AT(w, 0, live1 ? r + 1 : 0, 0, 0), \
                             act + act_off, w_ne.s0 / QK, lane);                            \
    const float inv_rms =                                                                   \
        mv_norm_rsqrt(dn_pre, dn + dn_off, dn_parts, dn_n, dn_eps, lane, scratch);          \
    const float t0 = warp_sum(s.x, scratch) * (inv_rms / dn_c);                             \
    const float t1 = warp_sum(s.y, scratch) * (inv_rms / dn_c);                             \
    if (lane == 0) {                                                                        \
        if (live0) store_f32(d + d_off + r * 4, t0);                                        \
        if (live1) store_f32(d + d_off + (r + 1) * 4, t1);                                  \
    }                                                                                       \
    const __global float *ps = (const __global float *)(rs + rs_off);                       \
    const __global float *pw = (const __global float *)(rw + rw_off);                       \
    __global float *po = (__global float *)(ro + ro_off);                                   \
    for (long e = get_global_id(0); e < dn_n; e += get_global_size(0))                      \
        po[e] = ps[e] * inv_rms * pw[e];                                                    \
    PK_END                                                                                  \
}

MV_NORMED_KERNEL(kernel_mul_mv_normed_q4_0, mv_row2_q4_0)
MV_NORMED_KERNEL(kernel_mul_mv_normed_q8_0, mv_row2_q8_0)
MV_NORMED_KERNEL(kernel_mul_mv_normed_q4_k, mv_row2_q4_K)
MV_NORMED_KERNEL(kernel_mul_mv_normed_q6_k, mv_row2_q6_K)

// MulMatGlu: gate and up rows and swiglu(gate, up) = silu(gate) * up, GLU_ROWS
// rows a work-group of WARPS row groups (each GLU_ROWS / WARPS rows of both
// matrices), so one work-group makes whole Q8_1 blocks of the result for the
// next matmul (has_q8; needs rows % 32 == 0). WARPS is GLU_WARPS, a build
// option (Device::glu_warps, 8 by default: 16 warps of two rows each were
// slower on the 7B at the kernel's registers, docs/perf.md step 44), or 16
// for the _glu16 kernel (faster where a GLU has few work-groups, step 51).
// The step program runs it with 4 warps (its work-groups are 128 wide), each
// taking 8 rows.
// global {ceil(rows / GLU_ROWS) * WARPS * MV_LANES}, local {WARPS * MV_LANES}.
#ifdef POLYCL_STEP
#undef GLU_WARPS
#define GLU_WARPS 4
#elif !defined(GLU_WARPS)
#define GLU_WARPS 8
#endif
#define GLU_ROWS 32
#define MV_GLU_BUFS(R, W)                                                                   \
    R(const char, wg) R(const char, wu) R(const char, act) W(char, dglu) W(char, dgate)     \
    W(char, dup) W(char, q8) MV_NORM_BUF(R)
#define MV_GLU_KERNEL(NAME, ROWDOT2, WARPS)                                                 \
kernel void NAME(PK_SIG(MV_GLU_BUFS)) {                                                     \
    PK_BEGIN_BUFS(MV_GLU_BUFS)                                                              \
    PK_TENSOR(wg) PK_TENSOR(wu) PK_ULONG(act_off) PK_TENSOR(dglu) PK_TENSOR(dgate)          \
    PK_TENSOR(dup) PK_ULONG(q8_off) PK_INT(has_q8) PK_MV_NORM                               \
    LOCAL_ARRAY(float, scratch_all, WARPS * MV_LANES);                                      \
    LOCAL_ARRAY(float, lg, GLU_ROWS);                                                       \
    LOCAL_ARRAY(float, lu, GLU_ROWS);                                                       \
    LOCAL_ARRAY(float, ly, GLU_ROWS);                                                       \
    const int lid = get_local_id(0);                                                        \
    const int lane = lid % MV_LANES;                                                        \
    const int warp = lid / MV_LANES;                                                        \
    __local float *scratch = scratch_all + warp * MV_LANES;                                 \
    const long rows = wg_ne.s1;                                                             \
    const long base = get_group_id(0) * GLU_ROWS;                                           \
    const long nblocks = wg_ne.s0 / QK;                                                     \
    const __global char *arow = act + act_off;                                              \
    const float8 dn_pre = mv_norm_prefetch(dn + dn_off, dn_parts, lane);                    \
    const float dn_c = mv_norm_c(dn + dn_off, dn_parts);                                    \
    float dn_scale = 1.0f;                                                                  \
    for (int k = 0; k < GLU_ROWS / WARPS; ++k) {                                            \
        const int t = warp * (GLU_ROWS / WARPS) + k;                                        \
        const long r = min(base + t, rows - 1);                                             \
        const float2 gu = ROWDOT2(wg + wg_off + r * wg_nb.s1, wu + wu_off + r * wu_nb.s1,   \
                                  arow, nblocks, lane);                                     \
        if (k == 0)                                                                         \
            dn_scale = mv_norm_rsqrt(dn_pre, dn + dn_off, dn_parts, dn_n, dn_eps, lane,     \
                                     scratch) / dn_c;                                       \
        const float g = warp_sum(gu.x, scratch) * dn_scale;                                 \
        const float u = warp_sum(gu.y, scratch) * dn_scale;                                 \
        if (lane == 0) {                                                                    \
            lg[t] = g;                                                                      \
            lu[t] = u;                                                                      \
        }                                                                                   \
    }                                                                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    if (lid < GLU_ROWS) {                                                                   \
        const long r = base + lid;                                                          \
        const float g = lg[lid], u = lu[lid];                                               \
        const float y = g / (1.0f + exp(-g)) * u;                                           \
        ly[lid] = r < rows ? y : 0.0f;                                                      \
        if (r < rows) {                                                                     \
            store_f32(dgate + dgate_off + r * 4, g);                                        \
            store_f32(dup + dup_off + r * 4, u);                                            \
            store_f32(dglu + dglu_off + r * 4, y);                                          \
        }                                                                                   \
    }                                                                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    if (has_q8 && lid < GLU_ROWS / 32) {                                                    \
        store_q8_1_block(ly + lid * 32, q8 + q8_off + (base / 32 + lid) * Q8_1_BLOCK);      \
    }                                                                                       \
    PK_END                                                                                  \
}

MV_GLU_KERNEL(kernel_mul_mv_glu_q4_0, mv_row2_q4_0, GLU_WARPS)
MV_GLU_KERNEL(kernel_mul_mv_glu_q8_0, mv_row2_q8_0, GLU_WARPS)
MV_GLU_KERNEL(kernel_mul_mv_glu_q4_k, mv_row2_q4_K, GLU_WARPS)
MV_GLU_KERNEL(kernel_mul_mv_glu_q6_k, mv_row2_q6_K, GLU_WARPS)
#ifndef POLYCL_STEP
// 16 warps a work-group whatever GLU_WARPS is, for GLUs of few work-groups
// (plan/fused_matmul.rs `glu_shape`): two row pairs a warp in sequence
// instead of four.
MV_GLU_KERNEL(kernel_mul_mv_glu16_q4_0, mv_row2_words_q4_0, 16)
#endif

#ifndef POLYCL_STEP
// Q8_1 activations for the fast kernels, the bytes of store_q8_1_block.
// global {ne0 rounded up to 128, ne1, ne2 * ne3}, local {128, 1, 1}; ne0 %
// 32 == 0. One block a warp, one element a work-item, so a warp reads one
// 128-byte line and writes one 32-byte run: kernel_quantize_q8_1 (mul_mat.cl,
// the CPU's exact bytes) walks a block per work-item, 32 floats at a
// 128-byte stride across a warp, which one SM turns into a transaction per
// float (~42 us for a 512 x 4096 prompt activation on the H200, docs/perf.md
// step 15).
kernel void kernel_quantize_q8_1_fast(CTENSOR(a), __global char *q, ulong q_off) {
    __local float scratch_all[128];
    const int lid = get_local_id(0);
    __local float *scratch = scratch_all + (lid / 32) * 32;
    const long e = get_global_id(0);
    const long i1 = get_global_id(1);
    const long i2 = get_global_id(2) % a_ne.s2, i3 = get_global_id(2) / a_ne.s2;
    // Whole warps are live or not (ne0 % 32 == 0); every work-item joins the
    // reductions, whose portable form has barriers.
    const int live = e < a_ne.s0;
    const float x = live ? load_f32(AT(a, e, i1, i2, i3)) : 0.0f;
    const long row = i1 + a_ne.s1 * (i2 + a_ne.s2 * i3);
    warp_store_q8_1(x, live, q + q_off + (row * (a_ne.s0 / 32) + e / 32) * Q8_1_BLOCK, scratch);
}

// F16 weights times activations of ACT_BYTES bytes an element (ACT2 loads
// two as a float2, ACT one), float accumulation.
#define MV_F16_KERNEL(NAME, ACT_BYTES, ACT2, ACT)                                           \
kernel void NAME(CTENSOR(w), __global const char *act, ulong act_off, ulong4 act_nb,       \
                 long4 b_ne, TENSOR(dst)) {                                                \
    MV_PROLOGUE                                                                            \
    (void)nblocks;                                                                         \
    float sum = 0.0f;                                                                      \
    if (w_nb.s0 == 2) {                                                                    \
        for (long i = lane * 2; i + 1 < w_ne.s0; i += 2 * MV_LANES) {                      \
            const float2 x = vload_half2(0, (const __global half *)(wrow + i * 2));        \
            const float2 y = ACT2(arow + i * ACT_BYTES);                                   \
            sum += x.x * y.x + x.y * y.y;                                                  \
        }                                                                                  \
        if ((w_ne.s0 & 1) && lane == 0) {                                                  \
            const long i = w_ne.s0 - 1;                                                    \
            sum += vload_half(0, (const __global half *)(wrow + i * 2)) *                  \
                   ACT(arow + i * ACT_BYTES);                                              \
        }                                                                                  \
    } else {                                                                               \
        for (long i = lane; i < w_ne.s0; i += MV_LANES) {                                  \
            sum += vload_half(0, (const __global half *)(wrow + i * w_nb.s0)) *            \
                   ACT(arow + i * ACT_BYTES);                                              \
        }                                                                                  \
    }                                                                                      \
    MV_EPILOGUE                                                                            \
}
#define MV_ACT2_F16(p) vload_half2(0, (const __global half *)(p))
#define MV_ACT2_F32(p) vload2(0, (const __global float *)(p))

// F16 activations: rows the host converted.
MV_F16_KERNEL(kernel_mul_mv_f16, 2, MV_ACT2_F16, load_f16)
// F32 activations read as they are (no conversion launch; the host checked
// act_nb.s0 == 4): the attention matmuls of a decode step without flash
// attention (K cache x q, V cache x softmax), and F16 models.
MV_F16_KERNEL(kernel_mul_mv_f16_f32, 4, MV_ACT2_F32, load_f32)

// ---------------------------------------------------------------------------
// Matrix-matrix kernels for batches (prompt processing): a 64x64 tile of
// (weight rows x tokens) per work-group of 16x16, 4x4 outputs per work-item.
// Each step stages one 32-element block of 64 weight rows and 64 activation
// rows in local memory as packed int8, then every work-item keeps its 4 rows
// and 4 tokens in registers for 128 dot4 products.
// Launch: global {16*ceil(ne01/64), 16*ceil(ne11/64), ne12*ne13}, local {16,16,1}.
// ---------------------------------------------------------------------------

#define MM_TILE 64
#define MM_T 16

// Stage one 32-element unit `ib` of a weight row as 8 packed ints whose byte
// l is element l's code (as the Q8_1 activation ints), with the row's float
// factors for COMBINE: q4_0 nibbles as unsigned bytes (elements 0-15 low,
// 16-31 high); q8_0 bytes as they are; q4_K unit ib % 8 of super-block
// ib / 8 (d * scale, dmin * min); q6_K codes minus 32 as signed bytes with
// d * scale of each 16-element half.
inline void mm_stage_q4_0(const __global char *row, long ib, __local int *dst8, __local float *d,
                          __local float *d2) {
    const __global char *wb = row + ib * 18;
    *d = vload_half(0, (const __global half *)wb);
    *d2 = 0.0f;
    for (int k = 0; k < 4; ++k) {
        const int q = load_i32_a2(wb + 2 + 4 * k);
        dst8[k] = q & 0x0F0F0F0F;
        dst8[4 + k] = (q >> 4) & 0x0F0F0F0F;
    }
}
inline void mm_stage_q8_0(const __global char *row, long ib, __local int *dst8, __local float *d,
                          __local float *d2) {
    const __global char *wb = row + ib * 34;
    *d = vload_half(0, (const __global half *)wb);
    *d2 = 0.0f;
    for (int k = 0; k < 8; ++k) dst8[k] = load_i32_a2(wb + 2 + 4 * k);
}
inline void mm_stage_q4_k(const __global char *row, long ib, __local int *dst8, __local float *d,
                          __local float *d2) {
    const __global char *wb = row + (ib >> 3) * 144;
    const int j = (int)(ib & 7);
    int sc, m;
    q4_k_scale_min(wb, j, &sc, &m);
    *d = vload_half(0, (const __global half *)wb) * (float)sc;
    *d2 = vload_half(1, (const __global half *)wb) * (float)m;
    const __global int *qs = (const __global int *)(wb + 16 + 32 * (j >> 1));
    const int sh = 4 * (j & 1);
    for (int k = 0; k < 8; ++k) dst8[k] = (qs[k] >> sh) & 0x0F0F0F0F;
}
inline void mm_stage_q6_k(const __global char *row, long ib, __local int *dst8, __local float *d,
                          __local float *d2) {
    const __global char *wb = row + (ib >> 3) * 210;
    const int g = (int)(ib & 7), n = g >> 2, k = g & 3;
    const __global char *ql = wb + 64 * n + 32 * (k & 1);
    const __global char *qh = wb + 128 + 32 * n;
    const int shl = 4 * (k >> 1), shh = 2 * k;
    for (int i = 0; i < 8; ++i) {
        const int lo = (load_i32_a2(ql + 4 * i) >> shl) & 0x0F0F0F0F;
        const int hi = (load_i32_a2(qh + 4 * i) >> shh) & 0x03030303;
        dst8[i] = as_int(as_char4(lo | (hi << 4)) - (char4)(32));
    }
    const float dd = vload_half(0, (const __global half *)(wb + 208));
    *d = dd * (float)wb[192 + 2 * g];
    *d2 = dd * (float)wb[192 + 2 * g + 1];
}

// A 64x64 tile's results, work-item (tx, ty) holding rows tx + 16 i and
// tokens ty + 16 j; rows and tokens past the end are not stored.
inline void mm_store_tile(float acc[4][4], TENSOR(dst), long row0, long tok0, long rows,
                          long toks, long i12, long i13) {
    const int tx = get_local_id(0), ty = get_local_id(1);
    for (int i = 0; i < 4; ++i) {
        const long r = row0 + tx + MM_T * i;
        if (r >= rows) continue;
        for (int j = 0; j < 4; ++j) {
            const long t = tok0 + ty + MM_T * j;
            if (t < toks) store_f32(AT(dst, r, t, i12, i13), acc[i][j]);
        }
    }
}

#define MM_KERNEL(NAME, STAGE, COMBINE)                                        \
kernel void NAME(CTENSOR(w), __global const char *act, ulong act_off, ulong4 act_nb,       \
                 long4 b_ne, TENSOR(dst)) {                                                \
    __local int lw[MM_TILE * 8];                                                           \
    __local int la[MM_TILE * 8];                                                           \
    __local float ldw[MM_TILE], ldm[MM_TILE], lda[MM_TILE], lsa[MM_TILE];                 \
    const int tx = get_local_id(0), ty = get_local_id(1);                                  \
    const int tid = ty * MM_T + tx;                                                        \
    const long row0 = get_group_id(0) * MM_TILE, tok0 = get_group_id(1) * MM_TILE;         \
    const long i12 = get_global_id(2) % b_ne.s2, i13 = get_global_id(2) / b_ne.s2;        \
    const long i02 = i12 / (b_ne.s2 / w_ne.s2), i03 = i13 / (b_ne.s3 / w_ne.s3);           \
    const long nblocks = w_ne.s0 / QK;                                                     \
    float acc[4][4];                                                                       \
    for (int i = 0; i < 4; ++i)                                                            \
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;                                      \
    for (long ib = 0; ib < nblocks; ++ib) {                                                \
        if (tid < MM_TILE) {                                                               \
            const long r = min(row0 + tid, w_ne.s1 - 1);                                   \
            STAGE(AT(w, 0, r, i02, i03), ib, lw + tid * 8, ldw + tid, ldm + tid);          \
        } else if (tid < 2 * MM_TILE) {                                                    \
            const int t = tid - MM_TILE;                                                   \
            const long tok = min(tok0 + t, b_ne.s1 - 1);                                   \
            const __global char *ab = act + act_off + tok * act_nb.s1 + i12 * act_nb.s2 +  \
                                      i13 * act_nb.s3 + ib * Q8_1_BLOCK;                   \
            lda[t] = vload_half(0, (const __global half *)ab);                             \
            lsa[t] = vload_half(1, (const __global half *)ab);                             \
            const int8 a = vload8(0, (const __global int *)(ab + 4));                      \
            vstore8(a, 0, la + t * 8);                                                     \
        }                                                                                  \
        barrier(CLK_LOCAL_MEM_FENCE);                                                      \
        int8 wr[4], ar[4];                                                                 \
        for (int i = 0; i < 4; ++i) wr[i] = vload8(0, lw + (tx + MM_T * i) * 8);           \
        for (int j = 0; j < 4; ++j) ar[j] = vload8(0, la + (ty + MM_T * j) * 8);           \
        for (int i = 0; i < 4; ++i) {                                                      \
            const float dw = ldw[tx + MM_T * i], dm = ldm[tx + MM_T * i];                  \
            for (int j = 0; j < 4; ++j) {                                                  \
                int slo = dot4(wr[i].s0, ar[j].s0, 0);                                     \
                slo = dot4(wr[i].s1, ar[j].s1, slo);                                       \
                slo = dot4(wr[i].s2, ar[j].s2, slo);                                       \
                slo = dot4(wr[i].s3, ar[j].s3, slo);                                       \
                int shi = dot4(wr[i].s4, ar[j].s4, 0);                                     \
                shi = dot4(wr[i].s5, ar[j].s5, shi);                                       \
                shi = dot4(wr[i].s6, ar[j].s6, shi);                                       \
                shi = dot4(wr[i].s7, ar[j].s7, shi);                                       \
                const int s = slo + shi;                                                   \
                const float da = lda[ty + MM_T * j], sa = lsa[ty + MM_T * j];              \
                acc[i][j] += COMBINE;                                                      \
            }                                                                              \
        }                                                                                  \
        barrier(CLK_LOCAL_MEM_FENCE);                                                      \
    }                                                                                      \
    mm_store_tile(acc, dst, dst_off, dst_ne, dst_nb, row0, tok0, w_ne.s1, b_ne.s1, i12, i13); \
}

MM_KERNEL(kernel_mul_mm_q4_0, mm_stage_q4_0, dw * (da * (float)s - 8.0f * sa))
MM_KERNEL(kernel_mul_mm_q8_0, mm_stage_q8_0, dw * da * (float)s)
MM_KERNEL(kernel_mul_mm_q4_k, mm_stage_q4_k, dw * da * (float)s - dm * sa)
MM_KERNEL(kernel_mul_mm_q6_k, mm_stage_q6_k, da * (dw * (float)slo + dm * (float)shi))

// Float tiles for batches of F16 or F32 weights times F32 activations (the
// attention's KQ and KQV matmuls without flash attention, F16 models'
// prompts): a 64x64 tile of (weight rows x tokens), 16x16 work-items of 4x4
// outputs each (rows tx + 16 i, tokens ty + 16 j), float accumulation.
// Each step stages MMF_K elements of the K dimension for the tile's rows and
// tokens in local memory, K-major (a warp's reads of a K row are 16
// consecutive floats, the other half-warp's the same ones), one float of
// padding a row so the staging writes (a warp: one weight row's 32
// consecutive K elements, read coalesced from global) hit 32 banks.
// Rows and tokens past the end repeat the last one (computed, never
// stored); K past the end stages zeros. Weight and activation rows must be
// contiguous in K (nb0 = the element size); other strides are free, with
// ggml's broadcasting of the weights over dims 2 and 3.
// Launch: global {16 * ceil(ne01 / 64), 16 * ceil(ne11 / 64), ne12 * ne13},
// local {16, 16, 1}.
#define MMF_K 32
#define MMF_S (MM_TILE + 1)
#define MMF_KERNEL(NAME, LOAD_W)                                                               \
kernel void NAME(CTENSOR(w), __global const char *act, ulong act_off, ulong4 act_nb,           \
                 long4 b_ne, TENSOR(dst)) {                                                    \
    __local float lw[MMF_K * MMF_S];                                                           \
    __local float la[MMF_K * MMF_S];                                                           \
    const int tx = get_local_id(0), ty = get_local_id(1);                                      \
    const int tid = ty * MM_T + tx;                                                            \
    const long row0 = get_group_id(0) * MM_TILE, tok0 = get_group_id(1) * MM_TILE;             \
    const long i12 = get_global_id(2) % b_ne.s2, i13 = get_global_id(2) / b_ne.s2;            \
    const long i02 = i12 / (b_ne.s2 / w_ne.s2), i03 = i13 / (b_ne.s3 / w_ne.s3);               \
    const long ne00 = w_ne.s0;                                                                 \
    const __global char *abase = act + act_off + i12 * act_nb.s2 + i13 * act_nb.s3;            \
    float acc[4][4];                                                                           \
    for (int i = 0; i < 4; ++i)                                                                \
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;                                          \
    for (long k0 = 0; k0 < ne00; k0 += MMF_K) {                                                \
        for (int e = tid; e < MM_TILE * MMF_K; e += MM_T * MM_T) {                             \
            const int r = e / MMF_K, kk = e % MMF_K;                                           \
            const long k = k0 + kk;                                                            \
            const long wr = min(row0 + r, w_ne.s1 - 1);                                        \
            const long tok = min(tok0 + r, b_ne.s1 - 1);                                       \
            lw[kk * MMF_S + r] = k < ne00 ? LOAD_W(AT(w, k, wr, i02, i03)) : 0.0f;             \
            la[kk * MMF_S + r] =                                                               \
                k < ne00 ? *(const __global float *)(abase + tok * act_nb.s1 + k * 4) : 0.0f;  \
        }                                                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                                          \
        for (int kk = 0; kk < MMF_K; ++kk) {                                                   \
            float wv[4], av[4];                                                                \
            for (int i = 0; i < 4; ++i) wv[i] = lw[kk * MMF_S + tx + MM_T * i];                \
            for (int j = 0; j < 4; ++j) av[j] = la[kk * MMF_S + ty + MM_T * j];                \
            for (int i = 0; i < 4; ++i)                                                        \
                for (int j = 0; j < 4; ++j) acc[i][j] = fma(wv[i], av[j], acc[i][j]);          \
        }                                                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    }                                                                                          \
    mm_store_tile(acc, dst, dst_off, dst_ne, dst_nb, row0, tok0, w_ne.s1, b_ne.s1, i12, i13);   \
}

#define MMF_LOAD_F16(p) vload_half(0, (const __global half *)(p))
#define MMF_LOAD_F32(p) (*(const __global float *)(p))
MMF_KERNEL(kernel_mul_mm_f16_f32, MMF_LOAD_F16)
MMF_KERNEL(kernel_mul_mm_f32_f32, MMF_LOAD_F32)
#endif // POLYCL_STEP
