// Decode attention and the O projection by heads, in one launch
// (plan/attn_o.rs `heads_pair` says when): where one work-group takes a
// head's whole cache (kernel_fa_one_*), it goes on to multiply the head's
// output by the head's columns of W_o and adds the products into the
// projection's row, so no group waits for another before its O work (the
// ticket pair of attn_o.cl made its projection groups wait for every
// attention group, docs/perf.md steps 45 and 49). The last group to finish
// does MulMatAddNorm's epilogue (mul_mv_norm.cl) for the whole row: o, the
// residual sum, the shares of its sum of squares, c and the Q8_1 blocks the
// next matmuls read, in the same layout, so those matmuls are unchanged.
// What did not make it faster on the H200 (docs/perf.md step 60):
// W_o prefetched into L2 during the attention (slower), the epilogue's
// reductions interleaved (no change) and the O sums scattered over lanes.
//
// `split` groups a head: group g takes head g % heads and the g / heads-th
// share of W_o's rows (whole 32-row blocks), each computing the head's
// attention itself (its K/V come from L2 for all but the first), so that a
// head's O columns are read by several compute units at once, not one.
//
// The row is summed in 64-bit fixed point (OH_FIXED units of 2^-32), by
// integer atomics: integer addition is associative, so the sum does not
// depend on the order the groups finish in and every run gives the same
// bits, where float atomics would not. |o| < 2^31 saturates (a row of
// attention outputs times W_o is far below that in any model).
// `acc` (one long a row) and `tk[0]` are 0 between launches: the last group
// reads and clears every element, then the counter.
//
// Memory ordering as fa_split.cl argues it: every work-item fences
// device-wide after its atomics and before the group barrier that precedes
// its group's count; the counting work-item of the last group fences after
// it saw the count, before the barrier that releases its group's reads.
//
// The host checked (plan/attn_o.rs): one query row and chunk, W_o's row
// length = the heads' outputs (heads * DV), the projection's activation is
// the attention's output, rows a multiple of 32, 64-bit atomics.
// Global {heads * split * OH_WG}, local {OH_WG}.

#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable

#define OH_WG 512
#define OH_WARPS (OH_WG / 32)
// Passes of a group's rows whose weight loads are in flight together, and
// blocks of the epilogue loaded before any is used. One elsewhere: off
// NVIDIA the lane sums and warp sums are group barriers, and unrolled 16
// and 8 times they made PoCL's run of the kernel take minutes.
#ifdef POLYCL_NVIDIA
#define OH_PASSES 16
#define OH_EPI 8
#else
#define OH_PASSES 1
#define OH_EPI 1
#endif
#define OH_FIXED 4294967296.0f

// The two launches' buffers, in their kernels' order (FA_SPLIT_BUFS, then
// MV_NORM_BUFS with its q8 as q8n), by address where the program is built
// with POLYCL_ADDR (common.cl).
#define OH_BUFS(R, W)                                                                       \
    R(const char, q) R(const char, k) R(const char, v) R(const char, mask) W(float, part)   \
    W(uint, cnt) W(char, dst) W(char, q8) R(const char, w) R(const char, act)               \
    R(const char, res) W(char, o) W(char, sum) R(const char, nw) W(char, q8n) W(char, ss)

inline void oh_add(volatile __global long *p, float v) {
    atom_add(p, convert_long_sat_rte(v * OH_FIXED));
}

// One lane's share of a row's dot product with the head's output: lane j
// of the row's run of OH_LANES_* lanes takes code word j % W of block
// j / W (W words a block) of the head's columns (wr: the row's first block
// of them) against the output's Q8_1 codes in local memory (yq: 8 words a
// block, yd: its scales, ys: d * sum of its codes). Runs of lanes a row keep
// each of a warp's loads on a few rows' lines (with a lane a row, on 32).
// LOAD issues the loads, USE takes their values, so that a batch's loads
// can all be in flight before its first dot product (docs/perf.md step 59).
#define OH_LANES_Q4_0(NB) ((NB) * 4)
#define OH_LOAD_Q4_0(wr, j, dw, qw)                                                         \
    {                                                                                       \
        const __global char *wb = (wr) + (j) / 4 * 18;                                      \
        dw = vload_half(0, (const __global half *)wb);                                      \
        qw = load_i32_a2(wb + 2 + 4 * ((j) % 4));                                           \
    }
#define OH_USE_Q4_0(j, dw, qw, s)                                                           \
    {                                                                                       \
        const int b = (j) / 4, wd = (j) % 4;                                                \
        int isum = dot4(qw & 0x0F0F0F0F, yq[8 * b + wd], 0);                                \
        isum = dot4((qw >> 4) & 0x0F0F0F0F, yq[8 * b + wd + 4], isum);                      \
        s = dw * (yd[b] * (float)isum - (wd == 0 ? 8.0f * ys[b] : 0.0f));                   \
    }
#define OH_LANES_Q8_0(NB) ((NB) * 8)
#define OH_LOAD_Q8_0(wr, j, dw, qw)                                                         \
    {                                                                                       \
        const __global char *wb = (wr) + (j) / 8 * 34;                                      \
        dw = vload_half(0, (const __global half *)wb);                                      \
        qw = load_i32_a2(wb + 2 + 4 * ((j) % 8));                                           \
    }
#define OH_USE_Q8_0(j, dw, qw, s)                                                           \
    {                                                                                       \
        const int b = (j) / 8, wd = (j) % 8;                                                \
        s = dw * yd[b] * (float)dot4(qw, yq[8 * b + wd], 0);                                \
    }

#define OH_KERNEL(NAME, LPK, DMAX, LOAD, USE, LANES, BB)                                    \
__kernel __attribute__((reqd_work_group_size(OH_WG, 1, 1))) void NAME(                     \
    OH_BUFS(PK_ARG_R, PK_ARG_W) __global const ulong *pk_fa, __global const ulong *pk_mvn,  \
    volatile __global long *acc, volatile __global uint *tk, const int split) {             \
    OH_BUFS(PK_BIND_R, PK_BIND_W)                                                           \
    __local float red[OH_WG];                                                               \
    __local float wstate[2 * (OH_WG / (LPK))];                                              \
    __local float accs[(OH_WG / (LPK)) * (DMAX)];                                           \
    __local int last[1];                                                                    \
    __local int yq[(DMAX) / 4];                                                             \
    __local float yd[(DMAX) / 32], ys[(DMAX) / 32];                                         \
    const int lid = get_local_id(0), lane = lid % 32, warp = lid / 32;                      \
    __local float *scr = red + warp * 32;                                                   \
    const int heads = (int)get_num_groups(0) / split;                                       \
    const long h = get_group_id(0) % heads;                                                 \
    const int share_of_rows = (int)get_group_id(0) / heads;                                 \
    /* The head's attention over its whole cache: kernel_fa_one_*'s body, */                \
    /* without the Q8_1 copy, which nothing reads once the O projection is */              \
    /* here (accs holds the output, rotated where rot asks, as dst is). */                  \
    {                                                                                       \
        const __global ulong *pk = pk_fa;                                                   \
        int pk_i = 0;                                                                       \
        FA_SPLIT_SCALARS                                                                    \
        (void)has_q8;                                                                       \
        (void)q8_off;                                                                       \
        const long hk = h / (q_ne.s2 / k_ne.s2);                                            \
        const long DK = q_ne.s0, DV = v_ne.s0, n_kv = k_ne.s1;                              \
        const float slope = alibi_slope((uint)h, max_bias, m0, m1, n_head_log2);            \
        fa_vec_body(q, q_off, q_ne, q_nb, k, k_off, k_ne, k_nb, v, v_off, v_ne, v_nb, mask, \
                    mask_off, mask_ne, mask_nb, has_mask, part, part_off, cnt, cnt_off,     \
                    chunk, n_chunks, 0, scale, softcap, slope, 0, h, hk, 0, DK, DV, n_kv,   \
                    h * q_ne.s1, dst, dst_off, dst_ne, dst_nb, 0, q8, 0, rot, 1, 0, LPK,    \
                    OH_WG, FO_KPW, DMAX, red, wstate, accs, last);                          \
    }                                                                                       \
    /* accs[0, DV) holds the head's output: its Q8_1 codes into local memory, */            \
    /* a warp a block (DMAX: the kernel's DV, which the host checked). */                   \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    {                                                                                       \
        const int on = warp < (DMAX) / 32;                                                  \
        const float x = on ? accs[32 * warp + lane] : 0.0f;                                 \
        const float amax = warp_max(fabs(x), scr);                                          \
        const float d = amax / 127.0f;                                                      \
        const float id = d != 0.0f ? 1.0f / d : 0.0f;                                       \
        const int qi = (int)rint(x * id);                                                   \
        const float qsum = warp_sum((float)qi, scr);                                        \
        if (on) {                                                                           \
            ((__local char *)yq)[32 * warp + lane] = (char)qi;                              \
            if (lane == 0) {                                                                \
                yd[warp] = d;                                                               \
                ys[warp] = d * qsum;                                                        \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    const __global ulong *pk = pk_mvn;                                                      \
    int pk_i = 0;                                                                           \
    MV_NORM_SCALARS                                                                         \
    (void)act_off;                                                                          \
    /* This group's share of W_o's rows (whole 32-row blocks), OH_PASSES */                 \
    /* of (OH_WG / L) rows at a time, L lanes a row: the loads of all first, */             \
    /* then the sums over each row's lanes, then one atomic a row. */                       \
    const int L = LANES((DMAX) / 32), rl = lid / L, j = lid % L;                            \
    const long rows = w_ne.s1, per = (rows / 32 + split - 1) / split * 32;                  \
    const long r0 = min(rows, share_of_rows * per), r1 = min(rows, r0 + per);               \
    const ulong col = (ulong)h * ((DMAX) / 32) * (BB);                                      \
    for (long base = r0; base < r1; base += OH_PASSES * (OH_WG / L)) {                      \
        /* Every pass's loads before any dot product (unconditional: a row */               \
        /* past the share reads the share's last and counts 0), so they are */              \
        /* in flight together; loads under a condition between the dot */                   \
        /* products' asm went one round trip a pass (7B: 19 us a layer). */                 \
        float s[OH_PASSES], dw[OH_PASSES];                                                  \
        int qw[OH_PASSES];                                                                  \
        _Pragma("unroll") for (int u = 0; u < OH_PASSES; ++u) {                             \
            const long r = min(base + u * (OH_WG / L) + rl, r1 - 1);                        \
            LOAD(AT(w, 0, r, 0, 0) + col, j, dw[u], qw[u])                                  \
        }                                                                                   \
        _Pragma("unroll") for (int u = 0; u < OH_PASSES; ++u) {                             \
            USE(j, dw[u], qw[u], s[u])                                                      \
            if (base + u * (OH_WG / L) + rl >= r1) s[u] = 0.0f;                             \
        }                                                                                   \
        lanes_sum_n(s, OH_PASSES, red + lid / L * L, L);                                    \
        _Pragma("unroll") for (int u = 0; u < OH_PASSES; ++u) {                             \
            const long r = base + u * (OH_WG / L) + rl;                                     \
            if (j == 0 && r < r1) oh_add(acc + r, s[u]);                                    \
        }                                                                                   \
    }                                                                                       \
    /* The last group of all does the epilogue. The last of each share */                   \
    /* for its rows gave wrong rows on PoCL (docs/perf.md step 59): its */                  \
    /* writes (o, sum) may reuse memory that another share's groups still */                \
    /* read for their attention, where the allocator handed it on. */                       \
    device_fence();                                                                         \
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);                                    \
    if (lid == 0) last[0] = atomic_inc(tk) == get_num_groups(0) - 1;                        \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    if (last[0]) {                                                                          \
        if (lid == 0) device_fence();                                                       \
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);                                \
        oh_epilogue(acc, res + res_off, nw + nw_off, o + o_off, sum + sum_off,              \
                    q8n + q8_off, ss + ss_off, ss + prev_off, prev_parts, prev_n, eps, rows, \
                    scr);                                                                   \
        if (lid == 0) atomic_xchg(tk, 0u);                                                  \
    }                                                                                       \
}

// MulMatAddNorm's epilogue (mul_mv_norm.cl) over the row, a warp a block
// of 32 rows: o = the fixed-point sum, sum = o + res, the block's
// share of sum's squares, and the Q8_1 block of sum * nw * c; then c after
// the shares. A work-item loads its elements of OH_EPI blocks before it
// uses any, so the group waits out one round trip a chunk of
// OH_EPI * OH_WARPS blocks (a 7B's row is one), not one a block. Every
// work-item of the group calls it (warp_sum holds group barriers off
// NVIDIA); `acc` is cleared for the next launch.
inline void oh_epilogue(volatile __global long *acc, const __global char *res_p,
                        const __global char *nw_p, __global char *o_p, __global char *sum_p,
                        __global char *q8_p, __global char *ss_p, const __global char *prev,
                        int prev_parts, long prev_n, float eps, long rows,
                        __local float *scr) {
    const int lid = get_local_id(0), lane = lid % 32, warp = lid / 32;
    const float8 pre = mv_norm_prefetch(prev, prev_parts, lane);
#ifdef POLYCL_NVIDIA
    float c = 1.0f;
#else
    // Off NVIDIA warp_sum holds group barriers, and one under a condition in
    // the loop below took PoCL's compile of the kernel past minutes.
    const float c = mv_norm_rsqrt(pre, prev, prev_parts, prev_n, eps, lane, scr);
#endif
    const __global float *r = (const __global float *)res_p;
    const __global float *g = (const __global float *)nw_p;
    __global float *po = (__global float *)o_p;
    __global float *ps = (__global float *)sum_p;
    __global float *shares = (__global float *)ss_p;
    const int nblk = (int)(rows / 32);
    for (int c0 = 0; c0 < nblk; c0 += OH_EPI * OH_WARPS) {
        long at[OH_EPI];
        float rv[OH_EPI], gv[OH_EPI];
#pragma unroll
        for (int e = 0; e < OH_EPI; ++e) {
            const int b = c0 + e * OH_WARPS + warp;
            const long i = 32 * (long)b + lane;
            at[e] = b < nblk ? acc[i] : 0;
            rv[e] = b < nblk ? r[i] : 0.0f;
            gv[e] = b < nblk ? g[i] : 0.0f;
        }
#ifdef POLYCL_NVIDIA
        // After the loads: the shares' round trip overlaps theirs.
        if (c0 == 0) c = mv_norm_rsqrt(pre, prev, prev_parts, prev_n, eps, lane, scr);
#endif
#pragma unroll
        for (int e = 0; e < OH_EPI; ++e) {
            const int b = c0 + e * OH_WARPS + warp, on = b < nblk;
            const long i = 32 * (long)b + lane;
            const float t = (float)at[e] * (1.0f / OH_FIXED);
            const float x = t + rv[e], y = x * gv[e] * c;
            if (on) {
                acc[i] = 0;
                po[i] = t;
                ps[i] = x;
            }
            const float share = warp_sum(x * x, scr);
            if (on && lane == 0) shares[b] = share;
            warp_store_q8_1(y, on, q8_p + (ulong)b * Q8_1_BLOCK, scr);
        }
    }
    if (lid == 0) shares[nblk] = c;
}

OH_KERNEL(kernel_attn_oh_q4_0_d128, 32, 128, OH_LOAD_Q4_0, OH_USE_Q4_0, OH_LANES_Q4_0, 18)
OH_KERNEL(kernel_attn_oh_q4_0_d64, 16, 64, OH_LOAD_Q4_0, OH_USE_Q4_0, OH_LANES_Q4_0, 18)
OH_KERNEL(kernel_attn_oh_q8_0_d128, 32, 128, OH_LOAD_Q8_0, OH_USE_Q8_0, OH_LANES_Q8_0, 34)
OH_KERNEL(kernel_attn_oh_q8_0_d64, 16, 64, OH_LOAD_Q8_0, OH_USE_Q8_0, OH_LANES_Q8_0, 34)
