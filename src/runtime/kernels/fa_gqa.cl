// Decode flash attention for grouped-query attention on tensor cores
// (common.cl, fa_split.cl's merge and fa_mma.cl's fragment helpers, built with
// FA_HELPERS_ONLY, + this file): the same inputs, scratch and output as
// fa_split.cl's kernels, for head sizes D = DK = DV of 64 or 128, F16 K/V rows
// of contiguous halves 4-byte aligned, and G = n_head / n_head_kv query heads
// a KV head with 2 <= G <= 16 (plan/flash_attn.rs checks).
//
// Why: the vector kernels take one query head a work-group, so with G query
// heads on a KV head every K and V row is read G times, and at a long cache
// those reads dominate (the 1B, G = 8: attention ~68 us a layer at
// 16384 positions where CUDA, which switches to a tensor-core tile with the
// query heads as its rows, spends ~14; docs/perf.md step 41). Here a
// work-group takes one KV head, a chunk of its cache, and up to 16 rows: the
// G heads of 16 / G consecutive queries (row r is query r / G of head
// r % G). Each K and V row is read once for all of them, and the scores and
// P V are m16n8k16 products (F16 in, F32 accumulate, as fa_mma.cl).
//
// Each of the 4 warps takes 16-key tiles of the chunk in turn (tile t of the
// warp starts at key 64 t + 16 warp), with its own online softmax state for
// the 16 rows; its K and V fragments come straight from global memory into
// registers (K as the col-major B of the scores: two 4-byte loads a lane a
// 16 dimensions and 8 keys; V as the B of P V: a lane's keys 2 tig, 2 tig + 1,
// 2 tig + 8, 2 tig + 9 of dimension 8 nd + g, four 2-byte loads), so no
// local memory or barrier sits in the key loop. With PREFETCH, a tile's
// loads are issued before the previous tile's products. The warps' states
// merge in local memory, and the chunk's state is published and merged
// across chunks by fa_publish_merge_rows (fa_split.cl), every row at once.
//
// global {128, ceil(n_q / (16 / G)) * n_chunks, n_head_kv * ne3}, local
// {128, 1, 1}.

#define FG_WARPS 4
#define FG_WG (FG_WARPS * 32)
#define FG_BK 16
#define FG_ROWS 16

// A tile's fragments for this lane: K (keys 8 nt + g, dimensions 16 kt +
// 2 tig (+ 8)) and V (keys 2 tig, 2 tig + 1, 2 tig + 8, 2 tig + 9 of
// dimension 8 nd + g, as F16 pairs), for the tile of keys j0 .. j0 + 15 of
// the chunk; keys past `nk` load row nk - 1 again (in bounds; masked later).
inline void fg_load_tile(const __global char *kr0, const __global char *vr0, uint ks, uint vs,
                         int j0, int nk, int g, int tig, const int D, uint kf[2][128 / 16][2],
                         uint vf[128 / 8][2]) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        const uint j = (uint)min(j0 + 8 * nt + g, nk - 1);
        const __global uint *kr = (const __global uint *)(kr0 + (ulong)j * ks);
#pragma unroll
        for (int kt = 0; kt < D / 16; ++kt) {
            kf[nt][kt][0] = kr[8 * kt + tig];
            kf[nt][kt][1] = kr[8 * kt + 4 + tig];
        }
    }
    const __global ushort *vr[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint j = (uint)min(j0 + 2 * tig + (i & 1) + (i >= 2 ? 8 : 0), nk - 1);
        vr[i] = (const __global ushort *)(vr0 + (ulong)j * vs);
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
        const int d = 8 * nd + g;
        vf[nd][0] = (uint)vr[0][d] | ((uint)vr[1][d] << 16);
        vf[nd][1] = (uint)vr[2][d] | ((uint)vr[3][d] << 16);
    }
}

inline __attribute__((always_inline)) void
fg_body(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask, __global float *part,
        ulong part_off, __global uint *cnt, ulong cnt_off, int chunk, int n_chunks, float scale,
        float max_bias, float m0, float m1, uint n_head_log2, float softcap, TENSOR(dst),
        int has_q8, __global char *q8, ulong q8_off, __local float *red, __local float *wstate,
        __local float *accs, __local int *last, __local uint *scratch, __local float *qscratch,
        const int D, const int prefetch) {
    const int l = get_local_id(0), lane = l % 32, warp = l / 32;
    const int g = lane >> 2, tig = lane & 3;
    const int G = (int)(q_ne.s2 / k_ne.s2), qpg = FG_ROWS / G;
    const long n_q = q_ne.s1, n_head = q_ne.s2;
    const long qg = get_group_id(1) / n_chunks;
    const int c = (int)(get_group_id(1) % n_chunks);
    const long hkz = get_group_id(2);
    const long hk = hkz % k_ne.s2, z = hkz / k_ne.s2;
    const long h0 = hk * G, iq0 = qg * qpg;
    const int nrows = G * (int)min((long)qpg, n_q - iq0);

    // This lane's rows g and g + 8: their Q as A fragments (zero past the
    // group's rows), ALiBi slopes and mask rows.
    const int rr[2] = {g, g + 8};
    long hr[2], iqr[2];
    float slope[2];
    const __global char *mrow[2];
    const long kv0 = (long)c * chunk;
    const int nk = (int)min((long)chunk, k_ne.s1 - kv0);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int r = rr[j] < nrows ? rr[j] : 0;
        hr[j] = h0 + r % G;
        iqr[j] = iq0 + r / G;
        slope[j] = alibi_slope((uint)hr[j], max_bias, m0, m1, n_head_log2);
        mrow[j] = has_mask ? AT(mask, kv0, iqr[j], hr[j] % mask_ne.s2, z % mask_ne.s3) : 0;
    }
    uint4 qf[128 / 16];
#pragma unroll
    for (int kt = 0; kt < D / 16; ++kt) {
        float x[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int j = i & 1;
            const int d = 16 * kt + 2 * tig + (i >= 2 ? 8 : 0);
            const __global char *qp = AT(q, d, iqr[j], hr[j], z);
            const int live = rr[j] < nrows;
            x[2 * i] = live ? load_f32(qp) : 0.0f;
            x[2 * i + 1] = live ? load_f32(qp + q_nb.s0) : 0.0f;
        }
        qf[kt] = (uint4)(fm_pack(x[0], x[1]), fm_pack(x[2], x[3]), fm_pack(x[4], x[5]),
                         fm_pack(x[6], x[7]));
    }
    const __global char *kr0 = AT(k, 0, kv0, hk, z);
    const __global char *vr0 = AT(v, 0, kv0, hk, z);
    const uint ks = (uint)k_nb.s1, vs = (uint)v_nb.s1, ms = (uint)mask_nb.s0;

    float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};
    float4 o[128 / 8];
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) o[nd] = (float4)(0.0f);
    uint kf[2][128 / 16][2], vf[128 / 8][2];
    // Every warp runs the same number of tiles (the emulated mma and quad
    // reductions hold group barriers off NVIDIA); tiles past the chunk are
    // all masked.
    const int steps = (nk + FG_WARPS * FG_BK - 1) / (FG_WARPS * FG_BK);
    if (prefetch) fg_load_tile(kr0, vr0, ks, vs, warp * FG_BK, nk, g, tig, D, kf, vf);
    for (int t = 0; t < steps; ++t) {
        const int j0 = t * FG_WARPS * FG_BK + warp * FG_BK;
        uint kn[2][128 / 16][2], vn[128 / 8][2];
        if (!prefetch)
            fg_load_tile(kr0, vr0, ks, vs, j0, nk, g, tig, D, kf, vf);
        else if (t + 1 < steps)
            fg_load_tile(kr0, vr0, ks, vs, j0 + FG_WARPS * FG_BK, nk, g, tig, D, kn, vn);
        // Mask values in the score fragments' layout: rows g (i 0, 1) and
        // g + 8 (i 2, 3), keys j0 + 8 nt + 2 tig + (i & 1).
        float mk[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int j = j0 + 8 * nt + 2 * tig + (i & 1);
                float mv = 0.0f;
                if (has_mask) mv = load_f16(mrow[i >> 1] + (ulong)min(j, nk - 1) * ms);
                mk[nt][i] = j < nk ? mv : -INFINITY;
            }
        }
        float4 s[2];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            float4 a = (float4)(0.0f);
#pragma unroll
            for (int kt = 0; kt < D / 16; ++kt)
                a = fm_mma(qf[kt], (uint2)(kf[nt][kt][0], kf[nt][kt][1]), a, scratch);
            s[nt] = a;
        }
        fm_softmax_tile(s, mk, 2, scale, softcap, slope, M, L, o, D, qscratch);
        const uint4 pa = fm_probs(s[0], s[1], M, L);
        // A masked key's V row enters P V times 0, as in fa_mma.cl: it must
        // be finite (llama clears its cache when it allocates it).
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd)
            o[nd] = fm_mma(pa, (uint2)(vf[nd][0], vf[nd][1]), o[nd], scratch);
        if (prefetch && t + 1 < steps) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int kt = 0; kt < D / 16; ++kt) {
                    kf[nt][kt][0] = kn[nt][kt][0];
                    kf[nt][kt][1] = kn[nt][kt][1];
                }
#pragma unroll
            for (int nd = 0; nd < D / 8; ++nd) {
                vf[nd][0] = vn[nd][0];
                vf[nd][1] = vn[nd][1];
            }
        }
    }

    // The warps' states in local memory: (M, L) a row, and the accumulator
    // rows (C fragment: rows g and g + 8, dimensions 8 nd + 2 tig, + 1).
    const float l0 = fm_quad_sum(L[0], qscratch), l1 = fm_quad_sum(L[1], qscratch);
    if (tig == 0) {
        wstate[(warp * FG_ROWS + g) * 2] = M[0];
        wstate[(warp * FG_ROWS + g) * 2 + 1] = l0;
        wstate[(warp * FG_ROWS + g + 8) * 2] = M[1];
        wstate[(warp * FG_ROWS + g + 8) * 2 + 1] = l1;
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
        const int d = 8 * nd + 2 * tig;
        vstore2(o[nd].xy, 0, accs + (warp * FG_ROWS + g) * D + d);
        vstore2(o[nd].zw, 0, accs + (warp * FG_ROWS + g + 8) * D + d);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // The chunk's state of each row: the warps' merged, each scaled to the
    // largest M.
    for (int e = l; e < nrows * D; e += FG_WG) {
        const int r = e / D, d = e - r * D;
        float Mr = -INFINITY;
        for (int w = 0; w < FG_WARPS; ++w) Mr = fmax(Mr, wstate[(w * FG_ROWS + r) * 2]);
        float S = 0.0f, a = 0.0f;
        for (int w = 0; w < FG_WARPS; ++w) {
            const float mw = wstate[(w * FG_ROWS + r) * 2];
            if (mw == -INFINITY) continue;
            const float f = exp(mw - Mr);
            S += wstate[(w * FG_ROWS + r) * 2 + 1] * f;
            a += accs[(w * FG_ROWS + r) * D + d] * f;
        }
        const long h = h0 + r % G, iq = iq0 + r / G;
        fa_state_store(fa_state_at(part, part_off, (h + n_head * z) * n_q + iq, n_chunks, c, D), d,
                       Mr, S, a);
    }
    // accs is read above by other work-items: the barrier inside the helper
    // comes before it writes `outs`.
    fa_publish_merge_rows(part, part_off, cnt, cnt_off, (h0 + n_head * z) * n_q + iq0, n_chunks,
                          D, h0, G, nrows, iq0, n_head, n_q, z, dst, dst_off, dst_ne, dst_nb,
                          has_q8, q8, q8_off, accs, red, last, FG_WG, 4,
                          FA_MERGE_BATCH_WIDE);
}

#define FG_KERNEL(NAME, D, PREFETCH)                                                        \
    kernel void NAME(FA_SPLIT_ARGS) {                                                       \
        FA_SPLIT_UNPACK                                                                     \
        __local float red[FG_WG];                                                           \
        __local float wstate[FG_WARPS * FG_ROWS * 2];                                       \
        __local float accs[FG_WARPS * FG_ROWS * (D)];                                       \
        __local int last;                                                                   \
        FM_SCRATCH                                                                          \
        fg_body(q, q_off, q_ne, q_nb, k, k_off, k_ne, k_nb, v, v_off, v_ne, v_nb, mask,    \
                mask_off, mask_ne, mask_nb, has_mask, part, part_off, cnt, cnt_off, chunk,  \
                n_chunks, scale, max_bias, m0, m1, n_head_log2, softcap, dst, dst_off,      \
                dst_ne, dst_nb, has_q8, q8, q8_off, red, wstate, accs, &last,               \
                FM_SCRATCH_PTR, FM_QSCRATCH_PTR, D, PREFETCH);                              \
    }

FG_KERNEL(kernel_fa_gqa_d64, 64, 1)
// Without the prefetch: a tile's fragments at head size 128 are 64 registers.
FG_KERNEL(kernel_fa_gqa_d128, 128, 0)
