// Flash attention for the prompt shape on tensor cores (common.cl + this
// file): the same inputs and output as fa_tile.cl (F32 Q, F16 K/V, optional
// F16 mask, scale, ALiBi slope, softcap), for head sizes D = DK = DV of 64
// or 128 with contiguous 4-byte aligned K/V rows (plan/flash_attn.rs checks;
// everything else keeps fa_tile.cl).
//
// A work-group of 4 warps takes 64 query rows of one head, 16 a warp; per
// tile of 64 keys it stages K (key-major) and V transposed (dimension-major)
// in local memory as F16, then each warp computes its 16 x 64 scores with
// mma m16n8k16 (F16 in, F32 accumulate; Q as F16, as ggml's CPU backend
// converts it for the F16 dot product), an online softmax on the score
// fragments in registers, and P V with the probabilities as F16 A fragments:
// an m16n8 score fragment pair (keys 16 kk..) is exactly the A fragment of
// m16n8k16, so P never leaves registers. The row statistics live with the
// fragment layout: lane (g, tig) holds rows g and g + 8 of its warp's 16,
// reduced over the 4 lanes of a quad (tig) by shuffles.
//
// Tiles whose every (row, key) mask value is -INFINITY (most of the upper
// triangle of a causal mask) are neither staged nor computed: each work-item
// reads its own pairs' mask values first and raises a per-tile flag.
//
// Built with -DPOLYCL_NVIDIA on NVIDIA devices: mma.sync, cvt.f16x2 and
// shfl.sync in inline PTX. Elsewhere a work-group-local emulation with the
// same fragment layout runs instead (every mma and quad reduction is reached
// by all work-items: they hold barriers), so CPU devices test the indexing.
//
// global {128, ceil(n_q / 64), n_head * ne3}, local {128, 1, 1}.

#define FM_BQ 64
#define FM_BK 64
#define FM_WG 128
// Padding in halves of a K row (D + 8) and a V^T row (64 + 8): a fragment
// load's 8 rows then start 4 banks apart, so its 32 lanes hit 32 banks.
#define FM_PAD 8
#define FM_VST (FM_BK + FM_PAD)

#ifdef POLYCL_NVIDIA
// Two floats as one F16x2 word, `lo` in the low half (round to nearest).
inline uint fm_pack(float lo, float hi) {
    uint r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// D = A (16x16, row) * B (16x8, col) + C, F16 in, F32 accumulate.
inline float4 fm_mma(uint4 a, uint2 b, float4 c, __local uint *scratch) {
    (void)scratch;
    float d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y), "f"(c.x),
                   "f"(c.y), "f"(c.z), "f"(c.w));
    return (float4)(d0, d1, d2, d3);
}
// Max / sum over the 4 lanes of a quad (lanes 4 g .. 4 g + 3).
inline float fm_quad_max(float v, __local float *scratch) {
    (void)scratch;
    for (int m = 1; m <= 2; m <<= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
        v = fmax(v, o);
    }
    return v;
}
inline float fm_quad_sum(float v, __local float *scratch) {
    (void)scratch;
    for (int m = 1; m <= 2; m <<= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
        v += o;
    }
    return v;
}
#define FM_SCRATCH
#define FM_SCRATCH_PTR ((__local uint *)0)
#define FM_QSCRATCH_PTR ((__local float *)0)
#else
inline uint fm_pack(float lo, float hi) {
    ushort a, b;
    vstore_half_rte(lo, 0, (__private half *)&a);
    vstore_half_rte(hi, 0, (__private half *)&b);
    return (uint)a | ((uint)b << 16);
}
// Half `hi` of an F16x2 word as a float.
inline float fm_half(uint w, int hi) {
    const ushort h = (ushort)(hi ? w >> 16 : w);
    return vload_half(0, (const __private half *)&h);
}
// The warp-wide product from the same per-lane fragments (PTX ISA layout:
// A registers (g, 2tig..), (g + 8, 2tig..), (g, 2tig + 8..), (g + 8,
// 2tig + 8..); B registers (k 2tig.., n g), (k 2tig + 8.., n g); C (g, 2tig),
// (g, 2tig + 1), (g + 8, 2tig), (g + 8, 2tig + 1)). `scratch` holds 6 words
// per work-item.
inline float4 fm_mma(uint4 a, uint2 b, float4 c, __local uint *scratch) {
    const int lane = get_local_id(0) % 32;
    __local uint *s = scratch + (get_local_id(0) / 32) * 32 * 6;
    vstore4(a, lane, s);
    vstore2(b, lane, s + 32 * 4);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int g = lane >> 2, tig = lane & 3;
    float r[4] = {c.x, c.y, c.z, c.w};
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = tig * 2 + (i & 1);
        float acc = r[i];
        for (int k = 0; k < 16; ++k) {
            const uint aw = s[((row & 7) * 4 + ((k & 7) >> 1)) * 4 + (k >= 8 ? 2 : 0) + (row >= 8)];
            const uint bw = s[32 * 4 + (col * 4 + ((k & 7) >> 1)) * 2 + (k >= 8)];
            acc = fma(fm_half(aw, k & 1), fm_half(bw, k & 1), acc);
        }
        r[i] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return (float4)(r[0], r[1], r[2], r[3]);
}
inline float fm_quad_max(float v, __local float *scratch) {
    const int l = get_local_id(0);
    scratch[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int q = l & ~3;
    const float r = fmax(fmax(scratch[q], scratch[q + 1]), fmax(scratch[q + 2], scratch[q + 3]));
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
inline float fm_quad_sum(float v, __local float *scratch) {
    const int l = get_local_id(0);
    scratch[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int q = l & ~3;
    const float r = (scratch[q] + scratch[q + 1]) + (scratch[q + 2] + scratch[q + 3]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
#define FM_SCRATCH                                                                           \
    __local uint fm_scratch[FM_WG * 6];                                                      \
    __local float fm_qscratch[FM_WG];
#define FM_SCRATCH_PTR fm_scratch
#define FM_QSCRATCH_PTR fm_qscratch
#endif

// One key tile's online softmax step on this lane's NT score fragments
// (rows g and g + 8, keys 8 nt + 2 tig, + 1): each score scaled, capped,
// plus its row's ALiBi slope (slope[0] row g, slope[1] row g + 8) times the
// mask value, and -INFINITY where mk is; then the running maxima M move to
// the tile's, and the sums L and the accumulator o (D / 8 fragments) are
// rescaled to them. fa_gqa.cl shares it.
inline __attribute__((always_inline)) void
fm_softmax_tile(float4 *s, float mk[][4], const int NT, float scale, float softcap,
                const float *slope, float *M, float *L, float4 *o, const int D,
                __local float *qscratch) {
    float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        float x[4] = {s[nt].x, s[nt].y, s[nt].z, s[nt].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float y = -INFINITY;
            if (mk[nt][i] != -INFINITY) {
                y = x[i] * scale;
                if (softcap != 0.0f) y = softcap * tanh(y);
                y += slope[i >> 1] * mk[nt][i];
            }
            x[i] = y;
            mt[i >> 1] = fmax(mt[i >> 1], y);
        }
        s[nt] = (float4)(x[0], x[1], x[2], x[3]);
    }
    float alpha[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const float mn = fmax(M[j], fm_quad_max(mt[j], qscratch));
        alpha[j] = M[j] == -INFINITY ? 0.0f : exp(M[j] - mn);
        M[j] = mn;
        L[j] *= alpha[j];
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) o[nd] *= (float4)(alpha[0], alpha[0], alpha[1], alpha[1]);
}

// Two score fragments (keys 16 kk .. 16 kk + 15 of rows g and g + 8) as
// probabilities against the running maxima M (0 where masked, and on rows
// with nothing live yet), added to the lane-partial sums L, and packed as
// the A fragment of P V: an m16n8 pair is exactly one m16n8k16 A.
inline __attribute__((always_inline)) uint4 fm_probs(float4 s0, float4 s1, const float *M,
                                                     float *L) {
    const float xv[2][4] = {{s0.x, s0.y, s0.z, s0.w}, {s1.x, s1.y, s1.z, s1.w}};
    float p[2][4];
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float pv = xv[h2][i] == -INFINITY ? 0.0f : exp(xv[h2][i] - M[i >> 1]);
            p[h2][i] = pv;
            L[i >> 1] += pv;
        }
    }
    return (uint4)(fm_pack(p[0][0], p[0][1]), fm_pack(p[0][2], p[0][3]), fm_pack(p[1][0], p[1][1]),
                   fm_pack(p[1][2], p[1][3]));
}

// The kernel body for head size D (a constant at each call). `ks` holds a K
// tile (FM_BK rows of D + FM_PAD halves), `vt` a V tile transposed (D rows
// of FM_VST halves), `live` the two tile flags.
inline __attribute__((always_inline)) void
fm_body(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask, float scale,
        float max_bias, float m0, float m1, uint n_head_log2, float softcap, TENSOR(dst),
        __local ushort *ks, __local ushort *vt, __local int *live, __local uint *scratch,
        __local float *qscratch, const int D) {
    const int KST = D + FM_PAD;
    const int tid = get_local_id(0);
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane >> 2, tig = lane & 3;
    const long hz = get_group_id(2);
    const long h = hz % q_ne.s2, z = hz / q_ne.s2;
    const long hk = h / (q_ne.s2 / k_ne.s2);
    const long n_q = q_ne.s1, n_kv = k_ne.s1;
    const long r0 = (long)get_group_id(1) * FM_BQ + warp * 16 + g, r1 = r0 + 8;
    const float slope = alibi_slope((uint)h, max_bias, m0, m1, n_head_log2);
    const float slopes[2] = {slope, slope};

    // This warp's Q rows as A fragments, one per 16 dimensions.
    uint4 qf[128 / 16];
#pragma unroll
    for (int kt = 0; kt < D / 16; ++kt) {
        float2 x[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const long r = (i & 1) ? r1 : r0;
            const int d = 16 * kt + 2 * tig + (i >= 2 ? 8 : 0);
            x[i] = r < n_q ? vload2(0, (const __global float *)AT(q, d, r, h, z)) : (float2)(0.0f);
        }
        qf[kt] = (uint4)(fm_pack(x[0].x, x[0].y), fm_pack(x[1].x, x[1].y), fm_pack(x[2].x, x[2].y),
                         fm_pack(x[3].x, x[3].y));
    }

    float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};
    float4 o[128 / 8];
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) o[nd] = (float4)(0.0f);
    const __global char *kbase = AT(k, 0, 0, hk, z);
    const __global char *vbase = AT(v, 0, 0, hk, z);
    if (tid < 2) live[tid] = 0;

    for (long t0 = 0, it = 0; t0 < n_kv; t0 += FM_BK, ++it) {
        const int cur = (int)(it & 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        // This lane's mask values: rows r0 (i 0, 1) and r1 (i 2, 3), keys
        // t0 + 8 nt + 2 tig + (i & 1), the score fragments' layout.
        float mk[FM_BK / 8][4];
        int any = 0;
#pragma unroll
        for (int nt = 0; nt < FM_BK / 8; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const long r = i >= 2 ? r1 : r0;
                const long c = t0 + 8 * nt + 2 * tig + (i & 1);
                float mv = -INFINITY;
                if (r < n_q && c < n_kv)
                    mv = has_mask ? load_f16(AT(mask, c, r, h % mask_ne.s2, z % mask_ne.s3)) : 0.0f;
                mk[nt][i] = mv;
                any |= mv != -INFINITY;
            }
        }
        if (any) live[cur] = 1;
        if (tid == 0) live[cur ^ 1] = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int go = live[cur];
        if (go) {
            // K rows as they are; V transposed. Word w of a row holds
            // dimensions 2w and 2w + 1; consecutive work-items take
            // consecutive words of a row.
            for (int i = tid; i < FM_BK * (D / 2); i += FM_WG) {
                const int c = i / (D / 2), w = i - c * (D / 2);
                const long ic = t0 + c;
                uint kw = 0, vw = 0;
                if (ic < n_kv) {
                    kw = ((const __global uint *)(kbase + ic * k_nb.s1))[w];
                    vw = ((const __global uint *)(vbase + ic * v_nb.s1))[w];
                }
                ((__local uint *)(ks + c * KST))[w] = kw;
                vt[(2 * w) * FM_VST + c] = (ushort)vw;
                vt[(2 * w + 1) * FM_VST + c] = (ushort)(vw >> 16);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!go) continue;

        // Scores: keys 8 nt.. of this warp's 16 rows.
        float4 s[FM_BK / 8];
#pragma unroll
        for (int nt = 0; nt < FM_BK / 8; ++nt) {
            float4 a = (float4)(0.0f);
            const __local uint *kr = (const __local uint *)(ks + (8 * nt + g) * KST);
#pragma unroll
            for (int kt = 0; kt < D / 16; ++kt)
                a = fm_mma(qf[kt], (uint2)(kr[8 * kt + tig], kr[8 * kt + 4 + tig]), a, scratch);
            s[nt] = a;
        }
        // Scaled, capped, sloped, masked; the row maxima, sums and
        // accumulator moved to the tile's.
        fm_softmax_tile(s, mk, FM_BK / 8, scale, softcap, slopes, M, L, o, D, qscratch);
        // Probabilities (0 where masked, and on rows with nothing live yet),
        // their lane-partial row sums, and P V.
#pragma unroll
        for (int kk = 0; kk < FM_BK / 16; ++kk) {
            const uint4 pa = fm_probs(s[2 * kk], s[2 * kk + 1], M, L);
#pragma unroll
            for (int nd = 0; nd < D / 8; ++nd) {
                const __local uint *vr = (const __local uint *)(vt + (8 * nd + g) * FM_VST);
                o[nd] = fm_mma(pa, (uint2)(vr[8 * kk + tig], vr[8 * kk + 4 + tig]), o[nd], scratch);
            }
        }
    }

    const float l0 = fm_quad_sum(L[0], qscratch), l1 = fm_quad_sum(L[1], qscratch);
    const float inv0 = l0 == 0.0f ? 0.0f : 1.0f / l0, inv1 = l1 == 0.0f ? 0.0f : 1.0f / l1;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
        const int d = 8 * nd + 2 * tig;
        if (r0 < n_q) {
            store_f32(AT(dst, d, h, r0, z), o[nd].x * inv0);
            store_f32(AT(dst, d + 1, h, r0, z), o[nd].y * inv0);
        }
        if (r1 < n_q) {
            store_f32(AT(dst, d, h, r1, z), o[nd].z * inv1);
            store_f32(AT(dst, d + 1, h, r1, z), o[nd].w * inv1);
        }
    }
}

#define FM_KERNEL(NAME, D)                                                                     \
    kernel void NAME(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask,         \
                     float scale, float max_bias, float m0, float m1, uint n_head_log2,       \
                     float softcap, TENSOR(dst)) {                                             \
        __local uint ks[FM_BK * (D + FM_PAD) / 2];                                             \
        __local uint vt[D * FM_VST / 2];                                                       \
        __local int live[2];                                                                   \
        FM_SCRATCH                                                                             \
        fm_body(q, q_off, q_ne, q_nb, k, k_off, k_ne, k_nb, v, v_off, v_ne, v_nb, mask,      \
                mask_off, mask_ne, mask_nb, has_mask, scale, max_bias, m0, m1, n_head_log2,   \
                softcap, dst, dst_off, dst_ne, dst_nb, (__local ushort *)ks,                  \
                (__local ushort *)vt, live, FM_SCRATCH_PTR, FM_QSCRATCH_PTR, D);              \
    }

// FA_HELPERS_ONLY: another program (fa_gqa.cl) takes the helpers above.
#ifndef FA_HELPERS_ONLY
FM_KERNEL(kernel_fa_mma_d64, 64)
FM_KERNEL(kernel_fa_mma_d128, 128)
#endif
