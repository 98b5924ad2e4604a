// Decode flash attention for grouped-query attention on tensor cores
// (common.cl, fa_split.cl's merge and fa_mma.cl's fragment helpers, built with
// FA_HELPERS_ONLY, + this file): the same inputs, scratch and output as
// fa_split.cl's kernels, for head sizes D = DK = DV of 64 or 128, F16 K/V rows
// of contiguous halves 4-byte aligned, and G = n_head / n_head_kv query heads
// a KV head with 2 <= G <= 16 (1 <= G <= 8 for the cols kernel below;
// plan/flash_attn.rs checks).
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

// A group's frame: its lane (g, tig) and warp, and which rows it takes:
// the G query heads of KV head hk for queries iq0 .. iq0 + qpg - 1 (row r
// is query iq0 + r / G of head h0 + r % G; `nrows` of them live), in chunk
// c of batch z.
#define FG_FRAME(ROWS)                                                                      \
    const int l = get_local_id(0), lane = l % 32, warp = l / 32;                            \
    const int g = lane >> 2, tig = lane & 3;                                                \
    const int G = (int)(q_ne.s2 / k_ne.s2), qpg = (ROWS) / G;                               \
    const long n_q = q_ne.s1, n_head = q_ne.s2;                                             \
    const long qg = get_group_id(1) / n_chunks;                                             \
    const int c = (int)(get_group_id(1) % n_chunks);                                        \
    const long hkz = get_group_id(2);                                                       \
    const long hk = hkz % k_ne.s2, z = hkz / k_ne.s2;                                       \
    const long h0 = hk * G, iq0 = qg * qpg;                                                 \
    const int nrows = G * (int)min((long)qpg, n_q - iq0);

// The chunk's state of each of the group's `nrows` rows (row r is query
// iq0 + r / G of head h0 + r % G) from its warps' states in local memory
// (wstate: (M, L) a row, accs: D floats a row, FG_WARPS sets of `stride`
// rows), each scaled to the largest M; then published, and merged by the
// last group (fa_publish_merge_rows). After a barrier that makes the warps'
// states visible; every work-item calls it.
inline __attribute__((always_inline)) void
fg_chunk_end(__global float *part, ulong part_off, __global uint *cnt, ulong cnt_off, int c,
             int n_chunks, int D, long h0, int G, int nrows, int stride, long iq0, long n_head,
             long n_q, long z, TENSOR(dst), int has_q8, __global char *q8, ulong q8_off, int rot,
             __local float *wstate, __local float *accs, __local float *red, __local int *last) {
    for (int e = get_local_id(0); e < nrows * D; e += FG_WG) {
        const int r = e / D, d = e - r * D;
        float Mr = -INFINITY;
        for (int w = 0; w < FG_WARPS; ++w) Mr = fmax(Mr, wstate[(w * stride + r) * 2]);
        float S = 0.0f, a = 0.0f;
        for (int w = 0; w < FG_WARPS; ++w) {
            const float mw = wstate[(w * stride + r) * 2];
            if (mw == -INFINITY) continue;
            const float f = exp(mw - Mr);
            S += wstate[(w * stride + r) * 2 + 1] * f;
            a += accs[(w * stride + r) * D + d] * f;
        }
        const long h = h0 + r % G, iq = iq0 + r / G;
        fa_state_store(fa_state_at(part, part_off, (h + n_head * z) * n_q + iq, n_chunks, c, D), d,
                       Mr, S, a);
    }
    // accs is read above by other work-items: the barrier inside the helper
    // comes before it writes `outs`.
    fa_publish_merge_rows(part, part_off, cnt, cnt_off, (h0 + n_head * z) * n_q + iq0, n_chunks,
                          D, h0, G, nrows, iq0, n_head, n_q, z, dst, dst_off, dst_ne, dst_nb,
                          has_q8, q8, q8_off, rot, accs, red, last, FG_WG, 4, FA_MERGE_BATCH_WIDE);
}

inline __attribute__((always_inline)) void
fg_body(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask, __global float *part,
        ulong part_off, __global uint *cnt, ulong cnt_off, int chunk, int n_chunks, float scale,
        float max_bias, float m0, float m1, uint n_head_log2, float softcap, TENSOR(dst),
        int has_q8, __global char *q8, ulong q8_off, int rot, __local float *red,
        __local float *wstate, __local float *accs, __local int *last, __local uint *scratch,
        __local float *qscratch,
        const int D, const int prefetch) {
    FG_FRAME(FG_ROWS)

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
    fg_chunk_end(part, part_off, cnt, cnt_off, c, n_chunks, D, h0, G, nrows, FG_ROWS, iq0, n_head,
                 n_q, z, dst, dst_off, dst_ne, dst_nb, has_q8, q8, q8_off, rot, wstate, accs, red,
                 last);
}

// A kernel of BODY (fg_body, or fc_body below) for groups of ROWS rows.
#define FG_KERNEL_SHAPED(NAME, BODY, ROWS, D, PREFETCH)                                     \
    kernel void NAME(FA_SPLIT_ARGS) {                                                       \
        FA_SPLIT_UNPACK                                                                     \
        __local float red[FG_WG];                                                           \
        __local float wstate[FG_WARPS * (ROWS) * 2];                                        \
        __local float accs[FG_WARPS * (ROWS) * (D)];                                        \
        __local int last;                                                                   \
        FM_SCRATCH                                                                          \
        BODY(q, q_off, q_ne, q_nb, k, k_off, k_ne, k_nb, v, v_off, v_ne, v_nb, mask,        \
             mask_off, mask_ne, mask_nb, has_mask, part, part_off, cnt, cnt_off, chunk,     \
             n_chunks, scale, max_bias, m0, m1, n_head_log2, softcap, dst, dst_off, dst_ne, \
             dst_nb, has_q8, q8, q8_off, rot, red, wstate, accs, &last, FM_SCRATCH_PTR,     \
             FM_QSCRATCH_PTR, D, PREFETCH);                                                 \
        PK_END                                                                              \
    }
#define FG_KERNEL(NAME, D, PREFETCH) FG_KERNEL_SHAPED(NAME, fg_body, FG_ROWS, D, PREFETCH)

FG_KERNEL(kernel_fa_gqa_d64, 64, 1)
// Without the prefetch: a tile's fragments at head size 128 are 64 registers.
FG_KERNEL(kernel_fa_gqa_d128, 128, 0)

// ---------------------------------------------------------------------------
// Long caches: the query heads as the tile's columns (kernel_fa_gqa_cols_*).
//
// Why: at a long cache the kernel above spent ~16 us a group on 256 keys and
// the long-cache kernel (fa_split.cl, one query head a group) read each K
// and V row once a query head, from L2 (the 1B at 16384 positions: 32 us a
// layer, docs/perf.md step 78). llama.cpp's CUDA backend puts a KV head's G
// query heads in an mma tile's 8 columns for this case; so does this kernel.
// A work-group takes one KV head, a chunk of its cache and up to 8 columns
// (column c is query iq0 + c / G of head h0 + c % G). Each warp takes 16-key
// tiles of the chunk in turn and computes
// - S^T = K Q^T: K's 16 keys are the A rows, the columns' Q the B operand;
// - O^T += V^T P^T: V's dimensions are the A rows, P^T the B operand.
// The dot products' order is free, so each operand's elements are assigned
// to fragment slots in the order 16-byte loads bring them: a lane loads K
// rows g and g + 8 as 16-byte pieces (dimensions 32 s + 8 tig .. + 7: two
// k-tiles a piece), and V rows of keys 2 tig, 2 tig + 1, 2 tig + 8, 2 tig + 9
// as 16-byte pieces of dimensions 64 h + 8 g .. + 7, paired by key with byte
// permutes (row g of m-tile 4 h + w is dimension 64 h + 8 g + 2 w, row g + 8
// the next one). Q takes K's order; P^T comes from the score fragment by four
// shuffles. The mask values of a tile are loaded with its K and V.
//
// With G = 1 (no GQA) a group's columns are 8 queries, one live at a decode
// step: seven columns of every mma are waste, but the loop stays a few mma
// a tile with 16-byte loads, where the long-cache kernel spends ~600
// instructions a lane a step. Taken from POLYCL_FA_COLS_KV positions
// (default 16384): on the H100 its key loop covered the 1B's 16384-position
// cache in a ~5 us span, but the chunks' publish and merge after it cost
// more than that loop at shorter caches (docs/perf.md steps 78, 79).
//
// global {128, ceil(n_q / (8 / G)) * n_chunks, n_head_kv * ne3}, local
// {128, 1, 1}; chunks a multiple of 64 keys.

#define FC_COLS 8
#define FC_TILES (FG_WARPS * FG_BK)

#ifdef POLYCL_NVIDIA
inline uint fc_shfl(uint v, int src, __local uint *scratch) {
    (void)scratch;
    uint r;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(src));
    return r;
}
inline float fc_xor_max(float v, __local float *scratch) {
    (void)scratch;
    for (int m = 4; m <= 16; m <<= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
        v = fmax(v, o);
    }
    return v;
}
inline float fc_xor_sum(float v, __local float *scratch) {
    (void)scratch;
    for (int m = 4; m <= 16; m <<= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
        v += o;
    }
    return v;
}
#else
// Off NVIDIA: this warp's 32 words of `scratch` and group barriers, so every
// work-item of the group makes each call.
inline uint fc_shfl(uint v, int src, __local uint *scratch) {
    const int l = get_local_id(0);
    scratch[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint r = scratch[(l & ~31) + src];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
// Over the 8 lanes of a warp with the same tig (lane % 4).
inline float fc_xor_max(float v, __local float *scratch) {
    const int l = get_local_id(0);
    scratch[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float r = -INFINITY;
    for (int i = 0; i < 8; ++i) r = fmax(r, scratch[(l & ~31) + 4 * i + (l & 3)]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
inline float fc_xor_sum(float v, __local float *scratch) {
    const int l = get_local_id(0);
    scratch[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float r = 0.0f;
    for (int i = 0; i < 8; ++i) r += scratch[(l & ~31) + 4 * i + (l & 3)];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
#endif

// Low halves of two F16x2 words as one (a's in the low half), and high halves.
inline uint fc_lo2(uint a, uint b) { return (a & 0xFFFFu) | (b << 16); }
inline uint fc_hi2(uint a, uint b) { return (a >> 16) | (b & 0xFFFF0000u); }

// One tile's loads for this lane (keys j0 .. j0 + 15 of the chunk; keys past
// `nk` load row nk - 1 again, in bounds, and are masked): K rows g and g + 8
// (kq[r][s]: dimensions 32 s + 8 tig .. + 7), V rows of keys 2 tig, 2 tig + 1,
// 2 tig + 8, 2 tig + 9 (vq[i][h]: dimensions 64 h + 8 g .. + 7), and the raw
// mask halves of score slot i (key g + 8 (i >> 1), column 2 tig + (i & 1)).
inline void fc_load_tile(const __global char *kr0, const __global char *vr0, uint ks, uint vs,
                         const __global char *m0, const __global char *m1, uint ms, int has_mask,
                         int j0, int nk, int g, int tig, const int D, uint4 kq[2][128 / 32],
                         uint4 vq[4][128 / 64], ushort mr[4]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const uint j = (uint)min(j0 + g + 8 * r, nk - 1);
        const __global uint4 *kr = (const __global uint4 *)(kr0 + (ulong)j * ks);
#pragma unroll
        for (int s = 0; s < D / 32; ++s) kq[r][s] = kr[4 * s + tig];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint j = (uint)min(j0 + 2 * tig + (i & 1) + (i >= 2 ? 8 : 0), nk - 1);
        const __global uint4 *vr = (const __global uint4 *)(vr0 + (ulong)j * vs);
#pragma unroll
        for (int h = 0; h < D / 64; ++h) vq[i][h] = vr[8 * h + g];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint j = (uint)min(j0 + g + (i >= 2 ? 8 : 0), nk - 1);
        mr[i] = has_mask ? *(const __global ushort *)(((i & 1) ? m1 : m0) + (ulong)j * ms) : 0;
    }
}

inline uint fc_word(uint4 v, const int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

inline __attribute__((always_inline)) void
fc_body(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask, __global float *part,
        ulong part_off, __global uint *cnt, ulong cnt_off, int chunk, int n_chunks, float scale,
        float max_bias, float m0, float m1, uint n_head_log2, float softcap, TENSOR(dst),
        int has_q8, __global char *q8, ulong q8_off, int rot, __local float *red,
        __local float *wstate, __local float *accs, __local int *last, __local uint *scratch,
        __local float *qscratch,
        const int D, const int prefetch) {
    FG_FRAME(FC_COLS)
    const long kv0 = (long)c * chunk;
    const int nk = (int)min((long)chunk, k_ne.s1 - kv0);

    // Column g's Q as B fragments in K's order (zero past the group's
    // columns): k-tile 2 s + u holds dimensions 32 s + 8 tig + 4 u .. + 3.
    uint2 qb[128 / 16];
    {
        const int cq = g < nrows ? g : 0;
        const long hq = h0 + cq % G, iq = iq0 + cq / G;
#pragma unroll
        for (int s = 0; s < D / 32; ++s) {
            float x[8];
#pragma unroll
            for (int i = 0; i < 8; ++i)
                x[i] = g < nrows ? load_f32(AT(q, 32 * s + 8 * tig + i, iq, hq, z)) : 0.0f;
            qb[2 * s] = (uint2)(fm_pack(x[0], x[1]), fm_pack(x[2], x[3]));
            qb[2 * s + 1] = (uint2)(fm_pack(x[4], x[5]), fm_pack(x[6], x[7]));
        }
    }
    // This lane's score columns 2 tig and 2 tig + 1: ALiBi slopes, mask rows.
    float slope[2];
    const __global char *mrow[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int cc = 2 * tig + e < nrows ? 2 * tig + e : 0;
        const long hh = h0 + cc % G, iq = iq0 + cc / G;
        slope[e] = alibi_slope((uint)hh, max_bias, m0, m1, n_head_log2);
        mrow[e] = has_mask ? AT(mask, kv0, iq, hh % mask_ne.s2, z % mask_ne.s3) : 0;
    }
    const __global char *kr0 = AT(k, 0, kv0, hk, z);
    const __global char *vr0 = AT(v, 0, kv0, hk, z);
    const uint ks = (uint)k_nb.s1, vs = (uint)v_nb.s1, ms = (uint)mask_nb.s0;

    // Per score column (2 tig + e): the running max M (the same on the 8
    // lanes of a tig) and this lane's share of the sum L.
    float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};
    float4 o[128 / 16];
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) o[mt] = (float4)(0.0f);
    uint4 kq[2][128 / 32], vq[4][128 / 64];
    ushort mr[4];
    // Every warp runs the same number of tiles (the emulated mma and
    // shuffles hold group barriers off NVIDIA); tiles past the chunk are
    // all masked.
    const int steps = (nk + FC_TILES - 1) / FC_TILES;
    if (prefetch)
        fc_load_tile(kr0, vr0, ks, vs, mrow[0], mrow[1], ms, has_mask, warp * FG_BK, nk, g, tig, D,
                     kq, vq, mr);
    for (int t = 0; t < steps; ++t) {
        const int j0 = t * FC_TILES + warp * FG_BK;
        uint4 kn[2][128 / 32], vn[4][128 / 64];
        ushort mn[4];
        if (!prefetch)
            fc_load_tile(kr0, vr0, ks, vs, mrow[0], mrow[1], ms, has_mask, j0, nk, g, tig, D, kq,
                         vq, mr);
        else if (t + 1 < steps)
            fc_load_tile(kr0, vr0, ks, vs, mrow[0], mrow[1], ms, has_mask, j0 + FC_TILES, nk, g,
                         tig, D, kn, vn, mn);
        // S^T: rows keys j0 + g (x, y) and j0 + g + 8 (z, w), columns 2 tig
        // (x, z) and 2 tig + 1 (y, w).
        float4 s = (float4)(0.0f);
#pragma unroll
        for (int p = 0; p < D / 32; ++p) {
            s = fm_mma((uint4)(kq[0][p].x, kq[1][p].x, kq[0][p].y, kq[1][p].y), qb[2 * p], s,
                       scratch);
            s = fm_mma((uint4)(kq[0][p].z, kq[1][p].z, kq[0][p].w, kq[1][p].w), qb[2 * p + 1], s,
                       scratch);
        }
        float x[4] = {s.x, s.y, s.z, s.w};
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float y = -INFINITY;
            if (j0 + g + (i >= 2 ? 8 : 0) < nk) {
                const float mv = has_mask ? vload_half(0, (const __private half *)&mr[i]) : 0.0f;
                if (mv != -INFINITY) {
                    y = x[i] * scale;
                    if (softcap != 0.0f) y = softcap * tanh(y);
                    y += slope[i & 1] * mv;
                }
            }
            x[i] = y;
            tmax[i & 1] = fmax(tmax[i & 1], y);
        }
        float alpha[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float mnew = fmax(M[e], fc_xor_max(tmax[e], qscratch));
            alpha[e] = M[e] == -INFINITY ? 0.0f : exp(M[e] - mnew);
            M[e] = mnew;
            L[e] *= alpha[e];
        }
#pragma unroll
        for (int mt = 0; mt < D / 16; ++mt) o[mt] *= (float4)(alpha[0], alpha[1], alpha[0], alpha[1]);
        float pr[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            pr[i] = x[i] == -INFINITY ? 0.0f : exp(x[i] - M[i & 1]);
            L[i & 1] += pr[i];
        }
        // P^T as the B fragment (keys 2 tig, + 1 | 2 tig + 8, + 9 of column
        // g): key row r of the scores sits on lane 4 (r % 8) + column / 2.
        const uint wlo = fm_pack(pr[0], pr[1]), whi = fm_pack(pr[2], pr[3]);
        const int src = 8 * tig + (g >> 1);
        const uint x0 = fc_shfl(wlo, src, scratch), x1 = fc_shfl(wlo, src + 4, scratch);
        const uint y0 = fc_shfl(whi, src, scratch), y1 = fc_shfl(whi, src + 4, scratch);
        const uint2 pb = (g & 1) ? (uint2)(fc_hi2(x0, x1), fc_hi2(y0, y1))
                                 : (uint2)(fc_lo2(x0, x1), fc_lo2(y0, y1));
        // A masked key's V row enters P V times 0: it must be finite (llama
        // clears its cache when it allocates it).
#pragma unroll
        for (int hv = 0; hv < D / 64; ++hv) {
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const uint k0 = fc_word(vq[0][hv], w), k1 = fc_word(vq[1][hv], w);
                const uint k8 = fc_word(vq[2][hv], w), k9 = fc_word(vq[3][hv], w);
                const uint4 a = (uint4)(fc_lo2(k0, k1), fc_hi2(k0, k1), fc_lo2(k8, k9), fc_hi2(k8, k9));
                o[4 * hv + w] = fm_mma(a, pb, o[4 * hv + w], scratch);
            }
        }
        if (prefetch && t + 1 < steps) {
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int p = 0; p < D / 32; ++p) kq[r][p] = kn[r][p];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
                for (int hv = 0; hv < D / 64; ++hv) vq[i][hv] = vn[i][hv];
                mr[i] = mn[i];
            }
        }
    }

    // The warps' states in local memory: (M, L) a column, and the
    // accumulator (m-tile 4 h + w: x, y dimension 64 h + 8 g + 2 w, z, w the
    // next one; x, z column 2 tig, y, w column 2 tig + 1).
    const float l0 = fc_xor_sum(L[0], qscratch), l1 = fc_xor_sum(L[1], qscratch);
    if (g == 0) {
        wstate[(warp * FC_COLS + 2 * tig) * 2] = M[0];
        wstate[(warp * FC_COLS + 2 * tig) * 2 + 1] = l0;
        wstate[(warp * FC_COLS + 2 * tig + 1) * 2] = M[1];
        wstate[(warp * FC_COLS + 2 * tig + 1) * 2 + 1] = l1;
    }
#pragma unroll
    for (int hv = 0; hv < D / 64; ++hv) {
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int d = 64 * hv + 8 * g + 2 * w;
            const float4 r = o[4 * hv + w];
            vstore2((float2)(r.x, r.z), 0, accs + (warp * FC_COLS + 2 * tig) * D + d);
            vstore2((float2)(r.y, r.w), 0, accs + (warp * FC_COLS + 2 * tig + 1) * D + d);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fg_chunk_end(part, part_off, cnt, cnt_off, c, n_chunks, D, h0, G, nrows, FC_COLS, iq0, n_head,
                 n_q, z, dst, dst_off, dst_ne, dst_nb, has_q8, q8, q8_off, rot, wstate, accs, red,
                 last);
}

#define FC_KERNEL(NAME, D, PREFETCH) FG_KERNEL_SHAPED(NAME, fc_body, FC_COLS, D, PREFETCH)

FC_KERNEL(kernel_fa_gqa_cols_d64, 64, 1)
// Without the prefetch: a tile's K and V pieces at head size 128 are 64
// registers.
FC_KERNEL(kernel_fa_gqa_cols_d128, 128, 0)
