// Flash attention for the prompt shape on GPUs (common.cl + this file): many
// query rows per graph node, so a work-group takes a tile of BQ rows of one
// head and every K/V row it stages in local memory serves all BQ of them
// (the portable kernel in flash_attn.cl re-reads the whole cache per row).
// Float accumulation and an online softmax, as fa_split.cl; same inputs
// (F32 Q, F16 K/V with any strides, optional F16 mask) and output layout.
//
// Threads: TPR = 8 consecutive work-items share a "row group" of RT = 2 query
// rows (rg and rg + BQ/2), so a warp holds 4 row groups. Lane li of a group
// scores keys li, li + 8, ... of the tile, and owns the float4 output columns
// li, li + 8, ... of both rows. Those are the same (row, key) pairs and the
// same columns in every tile, so the scores are a 2 x KPT register block
// (each float4 of Q and of K read from local memory feeds several FMAs) and
// the accumulator is a 2 x DPT4 float4 block in registers.
//
// Per KV tile: stage K | scores in registers, each lane's row maxima to local
// memory | row maxima, probabilities (one exp per pair, by the lane that
// scored it) to local memory, stage V over K | P V and the row sums. Four
// barriers, none inside a branch.
//
// Local memory, floats: Q tile BQ x (DMAX + 4), one K-or-V tile BK x (DMAX + 4)
// (V overwrites K once the scores are taken, which keeps D = 256 under 48 KiB),
// the probabilities BQ x (BK + 8) and the lane maxima BQ x 8. The paddings put
// the rows that one warp reads at once on distinct banks: +4 floats per Q/KV
// row (float4 reads of 8 rows), +8 per probability row (4 rows x 8
// consecutive keys).
//
// Masked tiles: each thread reads the mask of its own pairs of the next tile
// one step ahead and raises a per-tile flag in local memory; a tile where
// every pair is -INFINITY (most of the upper triangle of a causal mask) loads
// nothing and computes nothing. The flag is double-buffered by tile parity so
// one barrier separates its reset, its writes and its read. The branches on it
// are uniform and contain no barrier (PoCL 3.1 miscompiles an early return
// before a barrier; every barrier here is reached by all work-items).

#define FT_TPR 8
#define FT_RT 2
// Row stride padding of the Q and K/V tiles, and of the score tile.
#define FT_PAD 4
#define FT_SPAD 8
// Largest register blocks of the two variants (KPT = BK / 8, DPT4 = DMAX / 32).
#define FT_KPT_MAX 4
#define FT_DPT4_MAX 8

#define TARGS(t) t, t##_off, t##_ne, t##_nb

// Four F16 elements d..d+3 of a row with element stride nb0; zeros past n.
inline float4 ft_load_h4(const __global char *row, ulong nb0, int d, int n) {
    if (nb0 == 2 && d + 3 < n) {
        const __global half *p = (const __global half *)(row + (ulong)d * 2);
        // One 8-byte load where the row allows it (the usual KV cache with
        // DK % 4 == 0), not four 2-byte ones.
        return ((ulong)p & 7) == 0 ? vloada_half4(0, p) : vload_half4(0, p);
    }
    float4 r = (float4)(0.0f);
    if (d < n) r.s0 = load_f16(row + (ulong)d * nb0);
    if (d + 1 < n) r.s1 = load_f16(row + (ulong)(d + 1) * nb0);
    if (d + 2 < n) r.s2 = load_f16(row + (ulong)(d + 2) * nb0);
    if (d + 3 < n) r.s3 = load_f16(row + (ulong)(d + 3) * nb0);
    return r;
}

// Copies rows t0.. of a K or V tile (n4 float4 per row, zero past n and past
// n_kv) into local memory: 32 work-items per row, so a warp reads 256
// consecutive bytes of one row.
inline void ft_stage(__local float *dst, int st, const __global char *base, ulong nb0, ulong nb1,
                     long t0, long n_kv, int n, int n4, int BK, int WG) {
    const int t = get_local_id(0);
    for (int c = t / 32; c < BK; c += WG / 32) {
        const long ic = t0 + c;
        const __global char *row = base + (ulong)ic * nb1;
        for (int f = t % 32; f < n4; f += 32) {
            const float4 x = ic < n_kv ? ft_load_h4(row, nb0, 4 * f, n) : (float4)(0.0f);
            vstore4(x, 0, dst + c * st + 4 * f);
        }
    }
}

// Mask values of this thread's (row, key) pairs of the tile at t0, -INFINITY
// outside the rows and keys; true when any pair is live.
inline int ft_peek(float mk[FT_RT][FT_KPT_MAX], CTENSOR(mask), int has_mask, long q0, long t0,
                   long n_q, long n_kv, long h, long z, int rg, int li, int RS, int KPT) {
    int any = 0;
#pragma unroll
    for (int i = 0; i < FT_RT; ++i) {
        const long iq = q0 + rg + i * RS;
#pragma unroll
        for (int j = 0; j < FT_KPT_MAX; ++j) {
            if (j >= KPT) break;
            const long ic = t0 + li + j * FT_TPR;
            float mv = -INFINITY;
            if (iq < n_q && ic < n_kv)
                mv = has_mask ? load_f16(AT(mask, ic, iq, h % mask_ne.s2, z % mask_ne.s3)) : 0.0f;
            mk[i][j] = mv;
            any |= mv != -INFINITY;
        }
    }
    return any;
}

// The kernel body for BQ query rows, BK keys per tile and head sizes up to
// DMAX (all three compile-time constants at the call sites, so the register
// blocks below unroll into registers); WG = BQ * TPR / RT work-items.
inline void ft_body(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask, float scale,
                    float max_bias, float m0, float m1, uint n_head_log2, float softcap,
                    TENSOR(dst), __local float *qs, __local float *kv, __local float *ps,
                    __local float *red, __local int *live, const int BQ, const int BK,
                    const int DMAX) {
    const int WG = BQ * FT_TPR / FT_RT;
    const int RS = BQ / FT_RT;
    const int KPT = BK / FT_TPR;
    const int DPT4 = DMAX / (4 * FT_TPR);
    const int ST = DMAX + FT_PAD;
    const int PST = BK + FT_SPAD;
    const int t = get_local_id(0);
    const int rg = t / FT_TPR, li = t % FT_TPR;
    const long q0 = (long)get_group_id(1) * BQ;
    const long hz = get_group_id(2);
    const long h = hz % q_ne.s2, z = hz / q_ne.s2;
    const long hk = h / (q_ne.s2 / k_ne.s2);
    const int DK = (int)q_ne.s0, DV = (int)v_ne.s0;
    const long n_q = q_ne.s1, n_kv = k_ne.s1;
    const int DK4 = (DK + 3) / 4, DV4 = (DV + 3) / 4;
    const float slope = alibi_slope((uint)h, max_bias, m0, m1, n_head_log2);

    for (int i = t; i < BQ * DK4; i += WG) {
        const int r = i / DK4, f = i - r * DK4;
        const long iq = q0 + r;
        float4 x = (float4)(0.0f);
        if (iq < n_q) {
            const __global char *row = AT(q, 0, iq, h, z);
            const int d = 4 * f;
            if (d < DK) x.s0 = load_f32(row + (ulong)d * q_nb.s0);
            if (d + 1 < DK) x.s1 = load_f32(row + (ulong)(d + 1) * q_nb.s0);
            if (d + 2 < DK) x.s2 = load_f32(row + (ulong)(d + 2) * q_nb.s0);
            if (d + 3 < DK) x.s3 = load_f32(row + (ulong)(d + 3) * q_nb.s0);
        }
        vstore4(x, 0, qs + r * ST + 4 * f);
    }
    float mk[FT_RT][FT_KPT_MAX];
    if (t == 0) live[0] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ft_peek(mk, TARGS(mask), has_mask, q0, 0, n_q, n_kv, h, z, rg, li, RS, KPT)) live[0] = 1;

    float M[FT_RT], S[FT_RT];
    float4 acc[FT_RT][FT_DPT4_MAX];
#pragma unroll
    for (int i = 0; i < FT_RT; ++i) {
        M[i] = -INFINITY;
        S[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < FT_DPT4_MAX; ++j) acc[i][j] = (float4)(0.0f);
    }
    const __global char *kbase = AT(k, 0, 0, hk, z);
    const __global char *vbase = AT(v, 0, 0, hk, z);

    int cur = 0;
    for (long t0 = 0; t0 < n_kv; t0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const int go = live[cur];
        if (go) ft_stage(kv, ST, kbase, k_nb.s0, k_nb.s1, t0, n_kv, DK, DK4, BK, WG);
        barrier(CLK_LOCAL_MEM_FENCE);

        // Scores of this thread's pairs stay in registers; each lane's
        // maximum per row goes to red for the row's other 7 lanes.
        if (t == 0) live[cur ^ 1] = 0;
        float s[FT_RT][FT_KPT_MAX];
        if (go) {
#pragma unroll
            for (int i = 0; i < FT_RT; ++i)
#pragma unroll
                for (int j = 0; j < FT_KPT_MAX; ++j) s[i][j] = 0.0f;
            for (int f = 0; f < DK4; ++f) {
                float4 qv[FT_RT];
#pragma unroll
                for (int i = 0; i < FT_RT; ++i) qv[i] = vload4(0, qs + (rg + i * RS) * ST + 4 * f);
#pragma unroll
                for (int j = 0; j < FT_KPT_MAX; ++j) {
                    if (j >= KPT) break;
                    const float4 kk = vload4(0, kv + (li + j * FT_TPR) * ST + 4 * f);
#pragma unroll
                    for (int i = 0; i < FT_RT; ++i) {
                        float a = s[i][j];
                        a = fma(qv[i].s0, kk.s0, a);
                        a = fma(qv[i].s1, kk.s1, a);
                        a = fma(qv[i].s2, kk.s2, a);
                        a = fma(qv[i].s3, kk.s3, a);
                        s[i][j] = a;
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < FT_RT; ++i) {
                float mt = -INFINITY;
#pragma unroll
                for (int j = 0; j < FT_KPT_MAX; ++j) {
                    if (j >= KPT) break;
                    float x = -INFINITY;
                    if (mk[i][j] != -INFINITY) {
                        x = s[i][j] * scale;
                        if (softcap != 0.0f) x = softcap * tanh(x);
                        x += slope * mk[i][j];
                    }
                    s[i][j] = x;
                    mt = fmax(mt, x);
                }
                red[(rg + i * RS) * FT_TPR + li] = mt;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        // The row maxima (all 8 lanes of a row take the same one), then each
        // probability once, by the lane that scored it; V replaces K.
        float Mn[FT_RT];
        if (go) {
#pragma unroll
            for (int i = 0; i < FT_RT; ++i) {
                const int r = rg + i * RS;
                float mt = M[i];
#pragma unroll
                for (int l = 0; l < FT_TPR; ++l) mt = fmax(mt, red[r * FT_TPR + l]);
                Mn[i] = mt;
#pragma unroll
                for (int j = 0; j < FT_KPT_MAX; ++j) {
                    if (j >= KPT) break;
                    const float x = s[i][j];
                    ps[r * PST + li + j * FT_TPR] = (x == -INFINITY) ? 0.0f : exp(x - mt);
                }
            }
            ft_stage(kv, ST, vbase, v_nb.s0, v_nb.s1, t0, n_kv, DV, DV4, BK, WG);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        // P V, and the row sums (the same on a row's 8 lanes).
        if (go) {
#pragma unroll
            for (int i = 0; i < FT_RT; ++i) {
                const __local float *prow = ps + (rg + i * RS) * PST;
                const float ms = (M[i] == -INFINITY) ? 0.0f : exp(M[i] - Mn[i]);
                float4 a[FT_DPT4_MAX];
#pragma unroll
                for (int j = 0; j < FT_DPT4_MAX; ++j) a[j] = acc[i][j] * ms;
                float sum = 0.0f;
                if (Mn[i] != -INFINITY) {
                    for (int c = 0; c < BK; ++c) {
                        const float p = prow[c];
                        sum += p;
                        const __local float *vrow = kv + c * ST;
#pragma unroll
                        for (int j = 0; j < FT_DPT4_MAX; ++j) {
                            if (j >= DPT4) break;
                            const int f = li + j * FT_TPR;
                            if (f < DV4) a[j] = fma((float4)(p), vload4(0, vrow + 4 * f), a[j]);
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < FT_DPT4_MAX; ++j) acc[i][j] = a[j];
                S[i] = S[i] * ms + sum;
                M[i] = Mn[i];
            }
        }
        if (t0 + BK < n_kv &&
            ft_peek(mk, TARGS(mask), has_mask, q0, t0 + BK, n_q, n_kv, h, z, rg, li, RS, KPT))
            live[cur ^ 1] = 1;
        cur ^= 1;
    }

#pragma unroll
    for (int i = 0; i < FT_RT; ++i) {
        const long iq = q0 + rg + i * RS;
        if (iq >= n_q) continue;
        const float inv = S[i] == 0.0f ? 0.0f : 1.0f / S[i];
#pragma unroll
        for (int j = 0; j < FT_DPT4_MAX; ++j) {
            if (j >= DPT4) break;
            const int d = 4 * (li + j * FT_TPR);
            const float4 r = acc[i][j] * inv;
            if (d < DV) store_f32(AT(dst, d, h, iq, z), r.s0);
            if (d + 1 < DV) store_f32(AT(dst, d + 1, h, iq, z), r.s1);
            if (d + 2 < DV) store_f32(AT(dst, d + 2, h, iq, z), r.s2);
            if (d + 3 < DV) store_f32(AT(dst, d + 3, h, iq, z), r.s3);
        }
    }
}

// Head sizes up to 128: 32 query rows x 32 keys, 128 work-items, 39 KiB of
// local memory. global {128, ceil(n_q / 32), n_head * ne3}, local {128, 1, 1}.
kernel void kernel_fa_tile_d128(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask,
                                float scale, float max_bias, float m0, float m1, uint n_head_log2,
                                float softcap, TENSOR(dst)) {
    __local float qs[32 * (128 + FT_PAD)];
    __local float kv[32 * (128 + FT_PAD)];
    __local float ps[32 * (32 + FT_SPAD)];
    __local float red[32 * FT_TPR];
    __local int live[2];
    ft_body(TARGS(q), TARGS(k), TARGS(v), TARGS(mask), has_mask, scale, max_bias, m0, m1,
            n_head_log2, softcap, TARGS(dst), qs, kv, ps, red, live, 32, 32, 128);
}

// Head sizes up to 256: 16 query rows x 16 keys, 64 work-items, 35 KiB.
// global {64, ceil(n_q / 16), n_head * ne3}, local {64, 1, 1}.
kernel void kernel_fa_tile_d256(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask,
                                float scale, float max_bias, float m0, float m1, uint n_head_log2,
                                float softcap, TENSOR(dst)) {
    __local float qs[16 * (256 + FT_PAD)];
    __local float kv[16 * (256 + FT_PAD)];
    __local float ps[16 * (16 + FT_SPAD)];
    __local float red[16 * FT_TPR];
    __local int live[2];
    ft_body(TARGS(q), TARGS(k), TARGS(v), TARGS(mask), has_mask, scale, max_bias, m0, m1,
            n_head_log2, softcap, TARGS(dst), qs, kv, ps, red, live, 16, 16, 256);
}
