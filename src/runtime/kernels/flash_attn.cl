// FLASH_ATTN_EXT with F32 Q, F16 K/V and an optional F16 mask
// (common.cl + quant.cl + this file).
//
// Launch: global {64, n_q, n_head*ne3}, local {64,1,1}; one work-group per
// (query row iq, head, i3). The KV sequence is walked in tiles of 64 with an
// online softmax, so any n_kv works with bounded local memory. DK, DV <= 256.
//
// It reproduces the two routines of ggml's CPU backend (ops.cpp, x86 AVX2+FMA):
//
// * n_q < 64: ggml_compute_forward_flash_attn_ext_f16_one_chunk. Q is rounded
//   to F16; s = ggml_vec_dot_f16(K row, Q) (32 lanes, fixed reduce tree, tail in
//   double); s = s*scale; softcap: s = softcap*tanhf(s); s += slope*mask; a
//   -INFINITY mask entry skips the key entirely. The output accumulator VKQ is
//   F16: every rescale (VKQ = f16(VKQ*ms)) and every update
//   (VKQ = f16(fma(v, vs, VKQ))) rounds to half, one key at a time, in key order;
//   S = fma(S, ms, vs); out = f32(VKQ) * (1/S).
// * n_q >= 64 (GGML_FA_TILE_Q): ggml_compute_forward_flash_attn_ext_tiled. Q stays
//   F32; s = sequential fma chain over DK (simd_gemm); s*scale, tanh*softcap,
//   + slope*mask; per 64-key tile (tiles aligned at key 0, as on the CPU):
//   M' = max(M, tile max), VKQ *= expf(M - M'), S *= that, p = ggml_v_expf(s - M'),
//   S += sum(p) (8-wide float sums accumulated in double), VKQ = fma(v, p, VKQ)
//   in F32 key by key; out = VKQ * (1/S).
//
// Known differences from the CPU: for n_q == 1, ne3 == 1 and n_kv >= 512 the CPU
// splits the keys into one chunk per thread (F16 accumulation per chunk, merged
// in F32), which depends on its thread count; this kernel then runs the
// single-chunk routine with an F32 accumulator. (An F16 accumulator would be
// bit-exact against a 1-thread CPU; against a multi-threaded CPU the F32 one is
// about twice as close: NMSE ~3e-6 instead of ~1e-5.) expf follows glibc's
// algorithm (see fa_expf); the ALiBi slope powf(m, n) is correctly rounded,
// which differs from glibc's powf by one ulp for ~0.15% of (m, n) pairs; tanh
// (softcap) is the device's. Sinks (src4) are not supported.
//
// Host side: pass scale = op_params scale / softcap when softcap != 0 (the CPU
// divides inside the op: `scale /= logit_softcap`), softcap = op_params[2];
// n_head_log2 = 1u << (uint32_t)floor(log2((double)n_head)) with n_head = q ne[2],
// m0 = powf(2.0f, -max_bias / n_head_log2), m1 = powf(2.0f, -(max_bias / 2.0f) / n_head_log2),
// in f32 as ops.cpp does (Rust: 2f32.powf(..), which calls the same libm); the
// slope of head h is powf(m0, h+1) for h < n_head_log2, else powf(m1, 2*(h-n_head_log2)+1),
// and 1 when max_bias <= 0.

#pragma OPENCL FP_CONTRACT OFF

#define FA_WG    64
#define FA_TILE  64
#define FA_DMAX  256
#define FA_VPT   (FA_DMAX / FA_WG)   // output elements per work-item

// ---------------------------------------------------------------------------
// float-float helpers beyond libm.cl's ff_* (an unevaluated sum hi + lo)
// ---------------------------------------------------------------------------
inline float2 fa_two_prod(float a, float b) {
    const float p = a * b;
    return (float2)(p, fma(a, b, -p));
}


// expf(x) as glibc 2.36 computes it (sysdeps/ieee754/flt-32/e_expf.c, the Arm
// optimized-routines algorithm that the CPU backend's libm calls): k = rint(x*32/ln2),
// r = x*32/ln2 - k, result = float(2^(k/32) * (C0 r^3 + C1 r^2 + C2 r + 1)). glibc
// evaluates this in double and is not correctly rounded (it differs from the
// correctly rounded exp in ~0.06% of inputs); here the same formula is evaluated in
// float-float (~2^-46 relative) and rounded once, which reproduces glibc's float
// except where its double result lies within ~2^-46 of a rounding boundary.
inline float fa_expf(float x) {
    if (isnan(x)) return x + x;
    if (x > 0x1.62e42ep6f) return INFINITY;
    if (x < -0x1.9fe368p6f) return 0.0f;
    // z = x * (32/ln2) with 32/ln2 = 0x1.71547652b82fep+5 = hi + mid + lo
    float2 z = ff_add(fa_two_prod(x, 0x1.715476p+5f), fa_two_prod(x, 0x1.4ae0cp-21f));
    z = ff_add(z, (float2)(x * -0x1p-46f, 0.0f));
    float k = rint(z.x);
    float2 r = ff_two_sum(z.x - k, z.y);   // z.x - k is exact
    if (r.x > 0.5f || (r.x == 0.5f && r.y > 0.0f)) {
        k += 1.0f;
        r = ff_two_sum(r.x - 1.0f, r.y);
    } else if (r.x < -0.5f || (r.x == -0.5f && r.y < 0.0f)) {
        k -= 1.0f;
        r = ff_two_sum(r.x + 1.0f, r.y);
    }
    const int ki = (int)k;
    const int e = (ki - (ki & 31)) / 32;   // floor(k / 32)
    // poly_scaled coefficients of __exp2f_data (C0..C2 of exp2 divided by 32^3, 32^2, 32)
    const float2 c0 = (float2)(0x1.c6af84p-20f, 0x1.722472p-45f);
    const float2 c1 = (float2)(0x1.ebfce6p-13f, -0x1.e0a762p-38f);
    const float2 c2 = (float2)(0x1.62e43p-6f, -0x1.e75a54p-35f);
    const float2 zz = ff_add(ff_mul(c0, r), c1);
    const float2 r2 = ff_mul(r, r);
    float2 y = ff_add(ff_mul(c2, r), (float2)(1.0f, 0.0f));
    y = ff_add(ff_mul(zz, r2), y);
    y = ff_mul(y, gm_exp2_tab[ki & 31]);
    if (e > -126 || (e == -126 && y.x >= 1.0f)) return ldexp(y.x + y.y, e);   // normal result
    // subnormal result: round (y.x + y.y) * 2^e once, to a multiple of 2^-149
    const float hi = ldexp(y.x, e + 149), lo = ldexp(y.y, e + 149);
    float n = rint(hi);
    const float d = (hi - n) + lo;
    if (d > 0.5f || (d == 0.5f && fmod(n, 2.0f) != 0.0f)) n += 1.0f;
    else if (d < -0.5f || (d == -0.5f && fmod(n, 2.0f) != 0.0f)) n -= 1.0f;
    return n * 0x1p-149f;   // exact: n < 2^23
}

// powf(b, e) for a positive integer e (the ALiBi slope), by float-float
// squaring, rounded once.
inline float fa_pown(float b, int e) {
    float2 r = (float2)(1.0f, 0.0f);
    float2 p = (float2)(b, 0.0f);
    while (e > 0) {
        if (e & 1) r = ff_mul(r, p);
        e >>= 1;
        if (e > 0) p = ff_mul(p, p);
    }
    return r.x + r.y;
}

// ggml_vec_dot_f16(DK, K row, Q) of the AVX2 build: lane i (0..31) is a chain
// over elements i, i+32, ...; lanes reduced as GGML_F32x8_REDUCE; the tail
// (DK % 32 elements) is summed in double (emulated in float-float).
inline float fa_dot_f16(const __global char *kr, ulong kst, __local const float *qv, long DK) {
    float a[32];
    for (int l = 0; l < 32; ++l) a[l] = 0.0f;
    const long np = DK & ~31L;
    for (long i = 0; i < np; i += 32) {
        for (int l = 0; l < 32; ++l) {
            a[l] = fma(load_f16(kr + (ulong)(i + l) * kst), qv[i + l], a[l]);
        }
    }
    float t[8];
    for (int l = 0; l < 8; ++l) t[l] = (a[l] + a[l + 16]) + (a[l + 8] + a[l + 24]);
    const float u0 = t[0] + t[4], u1 = t[1] + t[5], u2 = t[2] + t[6], u3 = t[3] + t[7];
    float hi = (u0 + u1) + (u2 + u3);
    float lo = 0.0f;
    for (long i = np; i < DK; ++i) {
        const float p = load_f16(kr + (ulong)i * kst) * qv[i];   // exact (F16 x F16)
        const float2 s = ff_two_sum(hi, p);
        hi = s.x;
        lo = lo + s.y;
    }
    return hi + lo;
}

kernel void kernel_flash_attn_ext_f16(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask),
                                      int has_mask, TENSOR(dst),
                                      float scale, float max_bias, float m0, float m1,
                                      uint n_head_log2, float softcap) {
    __local float qv[FA_DMAX];
    __local float sc[FA_TILE];    // scores of the current tile (-INFINITY: skipped key)
    __local float cms[FA_TILE];   // rescale factor applied before key t
    __local float cvs[FA_TILE];   // weight of key t
    __local int   cfl[FA_TILE];   // bit 1: rescale before key t; bit 0: accumulate key t
    __local float sS;

    const int  lid    = (int)get_local_id(0);
    const long iq     = get_global_id(1);
    const long n_head = q_ne.s2;
    const long head   = get_global_id(2) % n_head;
    const long i3     = get_global_id(2) / n_head;
    const long DK     = k_ne.s0;
    const long DV     = v_ne.s0;
    const long n_kv   = k_ne.s1;
    const long hk     = head / (n_head / k_ne.s2);
    const long hv     = head / (n_head / v_ne.s2);
    const long i3k    = i3 / (q_ne.s3 / k_ne.s3);
    const long i3v    = i3 / (q_ne.s3 / v_ne.s3);
    const bool f32acc = q_ne.s1 >= 64;   // CPU: tiled path when n_q >= GGML_FA_TILE_Q
    // CPU split-KV decode (one F16-accumulated chunk per thread, merged in F32): the
    // chunking depends on the CPU's thread count, so keep the per-key routine but
    // accumulate in F32, which is closer to any multi-threaded CPU result.
    const bool splitkv = q_ne.s1 == 1 && q_ne.s3 == 1 && n_kv >= 512;
    const bool f16acc = !f32acc && !splitkv;

    float slope = 1.0f;
    if (max_bias > 0.0f) {
        const uint h = (uint)head;
        slope = h < n_head_log2 ? fa_pown(m0, (int)(h + 1))
                                : fa_pown(m1, (int)(2 * (h - n_head_log2) + 1));
    }

    for (long d = lid; d < DK; d += FA_WG) {
        const float x = load_f32(AT(q, d, iq, head, i3));
        qv[d] = f32acc ? x : round_f16(x);
    }

    float acc[FA_VPT];
    for (int r = 0; r < FA_VPT; ++r) acc[r] = 0.0f;
    float M = -INFINITY, S = 0.0f;   // meaningful in work-item 0 only

    barrier(CLK_LOCAL_MEM_FENCE);

    for (long c0 = 0; c0 < n_kv; c0 += FA_TILE) {
        const int cnt = (int)min((long)FA_TILE, n_kv - c0);

        // 1. scores, one key per work-item
        if (lid < cnt) {
            const long ic = c0 + lid;
            float mv = 0.0f;
            if (has_mask) {
                mv = slope * load_f16(AT(mask, ic, iq, head % mask_ne.s2, i3 % mask_ne.s3));
            }
            const __global char *kr = AT(k, 0, ic, hk, i3k);
            float s;
            if (f32acc) {
                s = 0.0f;
                for (long i = 0; i < DK; ++i) s = fma(load_f16(kr + (ulong)i * k_nb.s0), qv[i], s);
                s = s * scale;
                if (softcap != 0.0f) s = tanh(s) * softcap;
                if (has_mask) s = s + mv;
            } else if (mv == -INFINITY) {
                s = -INFINITY;
            } else {
                s = fa_dot_f16(kr, k_nb.s0, qv, DK);
                s = s * scale;
                if (softcap != 0.0f) s = softcap * tanh(s);
                s = s + mv;
            }
            sc[lid] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        // 2. online softmax bookkeeping, serial in key order (work-item 0). Its loops
        // run the whole tile: PoCL 5.0's work-group functions abort (Kernel.cc:129,
        // region_entry_barrier) where a branch after a barrier skips a loop of a
        // variable trip count (pocl PR 2281); the keys from cnt on read as skipped.
        if (lid == 0) {
            if (!f32acc) {
                for (int t = 0; t < FA_TILE; ++t) {
                    const float s = t < cnt ? sc[t] : -INFINITY;
                    if (s == -INFINITY) { cfl[t] = 0; continue; }
                    float ms = 1.0f, vs = 1.0f;
                    if (s > M) {
                        ms = fa_expf(M - s);
                        M = s;
                        cfl[t] = 3;
                    } else {
                        vs = fa_expf(s - M);
                        cfl[t] = 1;
                    }
                    cms[t] = ms;
                    cvs[t] = vs;
                    S = fma(S, ms, vs);
                }
            } else {
                float tmax = -INFINITY;
                for (int t = 0; t < FA_TILE; ++t) tmax = t < cnt && sc[t] > tmax ? sc[t] : tmax;
                if (tmax == -INFINITY) {
                    for (int t = 0; t < FA_TILE; ++t) cfl[t] = 0;
                } else {
                    const float Mnew = fmax(M, tmax);
                    const bool rescale = Mnew > M;
                    if (rescale) {
                        const float ms = fa_expf(M - Mnew);
                        S = S * ms;
                        cms[0] = ms;
                    }
                    M = Mnew;
                    // ggml_vec_soft_max_f32 over the 64-wide tile row (padding is -INFINITY):
                    // per 8 values a float hsum, accumulated in double.
                    float2 sum = (float2)(0.0f, 0.0f);
                    for (int g = 0; g < FA_TILE; g += 8) {
                        float p[8];
                        for (int l = 0; l < 8; ++l) {
                            const int t = g + l;
                            p[l] = (t < cnt) ? cpu_v_expf(sc[t] - M) : 0.0f;
                            if (t < cnt) { cvs[t] = p[l]; cfl[t] = 1; }
                        }
                        const float hs = qk_hsum8(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
                        const float2 s2 = ff_two_sum(sum.x, hs);
                        sum = (float2)(s2.x, sum.y + s2.y);
                    }
                    if (rescale) cfl[0] |= 2;
                    // S = (float)((double)S + sum)
                    const float2 t2 = ff_two_sum(S, sum.x);
                    S = t2.x + (t2.y + sum.y);
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        // 3. apply to this work-item's output elements, key by key
        for (int t = 0; t < cnt; ++t) {
            const int f = cfl[t];
            if (f == 0) continue;
            const long ic = c0 + t;
            if (f & 2) {
                const float ms = cms[t];
                for (int r = 0; r < FA_VPT; ++r) {
                    const float y = acc[r] * ms;
                    acc[r] = f16acc ? round_f16(y) : y;
                }
            }
            const float vs = cvs[t];
            for (int r = 0; r < FA_VPT; ++r) {
                const long d = lid + (long)r * FA_WG;
                if (d < DV) {
                    const float y = fma(load_f16(AT(v, d, ic, hv, i3v)), vs, acc[r]);
                    acc[r] = f16acc ? round_f16(y) : y;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (lid == 0) sS = S;
    barrier(CLK_LOCAL_MEM_FENCE);
    const float Sf = sS;
    const float S_inv = (Sf == 0.0f) ? 0.0f : qk_div(1.0f, Sf);
    for (int r = 0; r < FA_VPT; ++r) {
        const long d = lid + (long)r * FA_WG;
        if (d < DV) store_f32(AT(dst, d, head, iq, i3), acc[r] * S_inv);
    }
}
