// MulMatAddNorm (common.cl + mul_mv.cl + this file): a decode matvec o = W x,
// the residual add after it (sum = o + res) and the RMS norm of the sum with
// its weight, in one launch and with no reduction over the whole row: llama's
// O and down projections with the norm of the sublayer that follows.
//
// A work-group makes 32 rows (MVN_WARPS row groups of two rows, as
// MV2_KERNEL) and writes o and sum for them, the Q8_1 block of sum * nw * c
// (c in place of the norm's 1/rms, which needs the whole row) into the cache
// slot the next matmuls read, and its share of the sum of squares, one
// float at ss[group]; group 0 writes c after the shares (at rows / 32, not
// get_num_groups: the body also runs as a phase of attn_o.cl's launch). Those matmuls
// (MV_NORM_BUF in mul_mv.cl) add the shares up and multiply their dot
// products by 1/(rms * c): the Q8_1 block of y * k has the codes of y's
// block and its scale times k, so the product is the same up to rounding.
//
// c keeps the block's scale and d * sum(q) inside half's range: the sum of a
// deep model's residual stream grows far past the ~2000 where d * sum(q)
// overflows (NaN logits on a 22-layer random model). c is 1/rms of `res`,
// which the MulMatAddNorm before this one left as shares (prev_*: the
// residual is its sum), so sum * c is near the normed row; 1 where there
// are none.
//
// The normed row and dst = normed * nw are never written as floats, so the
// pass (passes/fuse/matmul_norm.rs) fuses only where the fused matmuls are
// their only readers and the host reads neither.
//
// Earlier versions let the last work-group to finish norm the whole row (an
// arrival counter, then one work-group's round trips): that cost ~3 us more
// than the separate norm launch it saved on the H200 (docs/perf.md steps 13,
// 15, 21).
//
// The host (plan/matmul_norm.rs) checked: 2-D weights with a multiple of 32
// rows, one activation row, res/o/sum/nw contiguous F32 rows of w's row
// count. sum may be res or o itself (each element is read before it is
// written, by the one work-item that writes it).
//
// global {rows / 32 * MVN_WG}, local {MVN_WG}.

#define MVN_WARPS 16
#define MVN_WG (MVN_WARPS * MV_LANES)

#define MV_NORM_BUFS(R, W)                                                                  \
    R(const char, w) R(const char, act) R(const char, res) W(char, o) W(char, sum)          \
    R(const char, nw) W(char, q8) W(char, ss)
// SPLIT warps a row pair (1 or 2), each over its share of the row's blocks
// (BB bytes a weight block), their sums added in local memory: a group
// MVN_WG * SPLIT wide. Two where a MulMatAddNorm has at most half as many
// work-groups as the device has compute units and long rows
// (plan/matmul_norm.rs `split_rows`), so each warp waits out half the round
// trips.
// The scalars, also read by a kernel that binds the buffers itself (attn_oh.cl).
#define MV_NORM_SCALARS                                                                     \
    PK_TENSOR(w) PK_ULONG(act_off) PK_ULONG(res_off) PK_ULONG(o_off)                        \
    PK_ULONG(sum_off) PK_ULONG(nw_off) PK_ULONG(q8_off) PK_ULONG(ss_off) PK_ULONG(prev_off) \
    PK_INT(prev_parts) PK_LONG(prev_n) PK_FLOAT(eps)
#define MV_NORM_BODY(ROWDOT2, SPLIT, BB)                                                    \
    PK_BEGIN_BUFS(MV_NORM_BUFS) MV_NORM_SCALARS                                             \
    LOCAL_ARRAY(float, scratch_all, MVN_WG * (SPLIT));                                      \
    LOCAL_ARRAY(float, lx, 2 * MVN_WARPS);                                                  \
    LOCAL_ARRAY(float, ly, 2 * MVN_WARPS);                                                  \
    LOCAL_ARRAY(float, lp, 2 * MVN_WARPS);                                                  \
    const int lid = get_local_id(0);                                                        \
    const int lane = lid % MV_LANES;                                                        \
    const int wall = lid / MV_LANES;                                                        \
    const int warp = wall % MVN_WARPS, side = wall / MVN_WARPS;                             \
    __local float *scratch = scratch_all + wall * MV_LANES;                                 \
    const long i01 = get_group_id(0) * (2 * MVN_WARPS) + 2 * warp;                          \
    const long nb = w_ne.s0 / QK, first = (nb + (SPLIT) - 1) / (SPLIT);                     \
    const long b0 = side * first, nbh = side == 0 ? first : nb - first;                     \
    const __global char *w0 = AT(w, 0, i01, 0, 0) + b0 * (BB);                              \
    const __global char *w1 = AT(w, 0, i01 + 1, 0, 0) + b0 * (BB);                          \
    const float8 prev = mv_norm_prefetch(ss + prev_off, prev_parts, lane);                  \
    const float2 s = ROWDOT2(w0, w1, act + act_off + b0 * Q8_1_BLOCK, nbh, lane);           \
    const float c = mv_norm_rsqrt(prev, ss + prev_off, prev_parts, prev_n, eps, lane, scratch); \
    float t0 = warp_sum(s.x, scratch);                                                      \
    float t1 = warp_sum(s.y, scratch);                                                      \
    if ((SPLIT) > 1) {                                                                      \
        if (side == 1 && lane == 0) {                                                       \
            lp[2 * warp] = t0;                                                              \
            lp[2 * warp + 1] = t1;                                                          \
        }                                                                                   \
        barrier(CLK_LOCAL_MEM_FENCE);                                                       \
        t0 += lp[2 * warp];                                                                 \
        t1 += lp[2 * warp + 1];                                                             \
    }                                                                                       \
    if (side == 0 && lane == 0) {                                                           \
        const __global float *r = (const __global float *)(res + res_off);                  \
        const __global float *g = (const __global float *)(nw + nw_off);                    \
        const float x0 = t0 + r[i01], x1 = t1 + r[i01 + 1];                                 \
        const float g0 = g[i01], g1 = g[i01 + 1];                                           \
        __global float *po = (__global float *)(o + o_off);                                 \
        __global float *ps = (__global float *)(sum + sum_off);                             \
        po[i01] = t0;                                                                       \
        po[i01 + 1] = t1;                                                                   \
        ps[i01] = x0;                                                                       \
        ps[i01 + 1] = x1;                                                                   \
        lx[2 * warp] = x0;                                                                  \
        lx[2 * warp + 1] = x1;                                                              \
        ly[2 * warp] = x0 * g0 * c;                                                         \
        ly[2 * warp + 1] = x1 * g1 * c;                                                     \
    }                                                                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    /* Every warp sums (warp_sum holds barriers off NVIDIA); warp 0 writes. */              \
    const float x = lx[lane];                                                               \
    const float share = warp_sum(x * x, scratch);                                           \
    if (lid == 0) {                                                                         \
        __global float *shares = (__global float *)(ss + ss_off);                           \
        shares[get_group_id(0)] = share;                                                    \
        if (get_group_id(0) == 0) shares[w_ne.s1 / (2 * MVN_WARPS)] = c;                    \
    }                                                                                       \
    if (lid == MV_LANES) store_q8_1_block(ly, q8 + q8_off + get_group_id(0) * Q8_1_BLOCK);

#define MV_NORM_KERNEL(NAME, ROWDOT2)                                                       \
kernel void NAME(PK_SIG(MV_NORM_BUFS)) { MV_NORM_BODY(ROWDOT2, 1, 0) PK_END }

MV_NORM_KERNEL(kernel_mul_mv_norm_q4_0, mv_row2_q4_0)
MV_NORM_KERNEL(kernel_mul_mv_norm_q8_0, mv_row2_q8_0)
MV_NORM_KERNEL(kernel_mul_mv_norm_q4_k, mv_row2_q4_K)
MV_NORM_KERNEL(kernel_mul_mv_norm_q6_k, mv_row2_q6_K)

// Two warps a row pair (MV_NORM_BODY's SPLIT), 1024 wide, for Q4_0 and
// Q8_0 (whose blocks, unlike the K-quants' units, split at any block); not
// in the step program, whose phases are 512 wide at most.
#ifndef POLYCL_STEP
#define MV_NORM2_KERNEL(NAME, ROWDOT2, BB)                                                  \
__attribute__((reqd_work_group_size(2 * MVN_WG, 1, 1)))                                     \
kernel void NAME(PK_SIG(MV_NORM_BUFS)) { MV_NORM_BODY(ROWDOT2, 2, BB) PK_END }
MV_NORM2_KERNEL(kernel_mul_mv_norm2_q4_0, mv_row2_q4_0, 18)
MV_NORM2_KERNEL(kernel_mul_mv_norm2_q8_0, mv_row2_q8_0, 34)
#endif
