// ROPE, modes NORMAL (adjacent pairs) and NEOX (halves), F32
// (ops.cpp ggml_rope_cache_init / rope_yarn / rotate_pairs, x86 AVX2+FMA build).
// global {ne0/2, ne1, ne2*ne3}; work-item j handles one pair.
//
// The CPU builds a per-token cache: theta_0 = (float)pos, theta_{k+1} = theta_k *
// theta_scale with theta_scale = powf(freq_base, -2.0f/n_dims); repeated float
// multiplication is reproduced here, so theta_scale must be bit-identical to
// glibc's powf: it is computed in float-float (gm_powf). rope_yarn then mixes
// interpolation/extrapolation with the YaRN ramp (FMA-contracted on the CPU) and
// scales cos/sin by mscale (with glibc logf, gm_logf). The rotation, as compiled
// on the CPU:
//   NEOX: fused, x0*c - x1*s = fma(x0, c, -(x1*s)), x0*s + x1*c = fma(x0, s, x1*c).
//   NORMAL: the same fused form for every pair except the last one when the
//     number of pairs n_dims/2 is odd (the vectorised loop's tail), which is
//     x0*c - x1*s and x0*s + x1*c unfused.
// cos/sin: glibc's sincosf, emulated in float-float (gs_sincosf).
// Rotation window offset (op_params[15] n_offs) is assumed 0.
#pragma OPENCL FP_CONTRACT OFF

// Shared libm ports: libm.cl (prepended).
// 4/pi to 192 bits (glibc __inv_pio4), for gs_sincosf's large-argument reduction.
__constant uint gs_inv_pio4[24] = {
    0xa2,       0xa2f9,     0xa2f983,   0xa2f9836e,
    0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
    0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1,
    0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
    0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599,
    0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041
};

// glibc's sincosf (the 2018 s_sincosf.c / sincosf_poly.h, which evaluates in
// double and rounds once), emulated in float-float. The CPU's rope cache calls
// sinf/cosf (merged into sincosf by the compiler); emulating glibc's own
// reduction and polynomial reproduces its float results except in rare cases
// where its double result lies within ~2^-45 of a rounding boundary.
inline void gs_poly(float2 x, float2 x2, int neg_cos, int n, float *sinp, float *cosp) {
    float2 C0 = (float2)(1.0f, 0.0f);
    float2 C1 = (float2)(-0x1p-1f, 0x1.79cef2p-29f);
    float2 C2 = (float2)(0x1.55553ep-5f, 0x1.068f18p-33f);
    float2 C3 = (float2)(-0x1.6c087ep-10f, -0x1.1346b4p-35f);
    float2 C4 = (float2)(0x1.99343p-16f, 0x1.3dfc62p-43f);
    const float2 S1 = (float2)(-0x1.555546p-3f, 0x1.9a968p-29f);
    const float2 S2 = (float2)(0x1.11076p-7f, 0x1.48c2fp-33f);
    const float2 S3 = (float2)(-0x1.994eb4p-13f, 0x1.11661cp-38f);
    if (neg_cos) { C0 = -C0; C1 = -C1; C2 = -C2; C3 = -C3; C4 = -C4; }
    const float2 x4 = ff_mul(x2, x2);
    const float2 x3 = ff_mul(x2, x);
    const float2 c2 = ff_add(C3, ff_mul(x2, C4));
    const float2 s1 = ff_add(S2, ff_mul(x2, S3));
    const float2 c1 = ff_add(C0, ff_mul(x2, C1));
    const float2 x5 = ff_mul(x3, x2);
    const float2 x6 = ff_mul(x4, x2);
    const float2 s  = ff_add(x, ff_mul(x3, S1));
    const float2 c  = ff_add(c1, ff_mul(x4, C2));
    const float2 sv = ff_add(s, ff_mul(x5, s1));
    const float2 cv = ff_add(c, ff_mul(x6, c2));
    const float sf = sv.x + sv.y;
    const float cf = cv.x + cv.y;
    if (n & 1) { *sinp = cf; *cosp = sf; } else { *sinp = sf; *cosp = cf; }
}

// returns (sinf(y), cosf(y)) as glibc computes them
inline float2 gs_sincosf(float y) {
    float sv, cv;
    const uint u   = as_uint(y);
    const uint t12 = (u >> 20) & 0x7ff;
    if (t12 < 0x3f4) {                                   // |y| < pi/4 (coarse)
        if (t12 < 0x398) return (float2)(y, 1.0f);       // |y| < 2^-12
        const float2 x = (float2)(y, 0.0f);
        gs_poly(x, ff_mul(x, x), 0, 0, &sv, &cv);
    } else if (t12 < 0x42f) {                            // |y| < 120: reduce_fast
        // r = y * (2/pi * 2^24); n = ((int32)r + 0x800000) >> 24
        const float2 r = ff_mul_f((float2)(0x1.45f306p+23f, 0x1.b93910p-2f), y);
        const float  th = trunc(r.x);
        const float  fr = (r.x - th) + r.y;
        long ti = (long) th;
        if (r.x >= 0.0f) { if (fr < 0.0f) ti -= 1; else if (fr >= 1.0f) ti += 1; }
        else             { if (fr > 0.0f) ti += 1; else if (fr <= -1.0f) ti -= 1; }
        const long v = ti + 0x800000;
        const int  n = (int)(v >= 0 ? (v >> 24) : -((-v + 0xffffff) >> 24));
        // x = y - n * pi/2 with pi/2 (the double constant) = H1 + H2 + H3
        const float fn = (float) n;
        const float p1 = fn * 0x1.921fb6p+0f,  e1 = fma(fn, 0x1.921fb6p+0f, -p1);
        const float p2 = fn * -0x1.777a5cp-25f, e2 = fma(fn, -0x1.777a5cp-25f, -p2);
        float2 x = ff_add((float2)(y, 0.0f), (float2)(-p1, -e1));
        x = ff_add(x, (float2)(-p2, -e2));
        x = ff_add(x, (float2)(fn * 0x1p-49f, 0.0f));
        const int q = n & 3;
        const float2 xs = (q == 1 || q == 2) ? -x : x;
        gs_poly(xs, ff_mul(x, x), n & 2, n, &sv, &cv);
    } else if (t12 < 0x7f8) {                            // finite: reduce_large
        __constant const uint *inv_pio4 = gs_inv_pio4 + ((u >> 26) & 15);
        const uint shift = (u >> 23) & 7;
        uint xi = ((u & 0xffffffu) | 0x800000u) << shift;
        ulong res0 = (ulong)(xi * inv_pio4[0]);
        const ulong res1 = (ulong) xi * inv_pio4[4];
        const ulong res2 = (ulong) xi * inv_pio4[8];
        res0 = (res2 >> 32) | (res0 << 32);
        res0 += res1;
        const ulong nn = (res0 + (1UL << 61)) >> 62;
        res0 -= nn << 62;
        const long  iv = (long) res0;
        const float vh = (float) iv;
        const float vl = (float)(iv - (long) vh);
        const float2 x = ff_mul((float2)(vh, vl), (float2)(0x1.921fb6p-62f, -0x1.777a5cp-87f));
        const int n = (int) nn;
        const int m = n + (int)(u >> 31);
        const int q = m & 3;
        const float2 xs = (q == 1 || q == 2) ? -x : x;
        gs_poly(xs, ff_mul(x, x), m & 2, n, &sv, &cv);
    } else {
        return (float2)(y - y, y - y);
    }
    return (float2)(sv, cv);
}

// cos/sin of pair k for token position p (ggml_rope_cache_init + rope_yarn).
inline float2 rope_cos_sin(int k, float p, float theta_scale,
                           __global const float *ff, ulong ff_off, int has_ff,
                           float freq_scale, float ext_factor, float attn_factor,
                           float corr0, float corr1) {
    float theta = p;
    for (int t = 0; t < k; t++) {
        theta *= theta_scale;
    }
    const float ffk = has_ff ? *(__global const float *)((__global const char *) ff + ff_off + (ulong) k * 4)
                             : 1.0f;
    const float theta_extrap = cr_div(theta, ffk);
    const float theta_interp = freq_scale * theta_extrap;
    float th     = theta_interp;
    float mscale = attn_factor;
    if (ext_factor != 0.0f) {
        // rope_yarn_ramp(low, high, i0) with i0/2 == k
        const float span = corr1 - corr0;
        const float y    = cr_div((float) k - corr0, 0.001f > span ? 0.001f : span);
        const float y0   = 0.0f > y ? 0.0f : y;
        const float ramp = 1.0f - (1.0f < y0 ? 1.0f : y0);
        const float ramp_mix = ramp * ext_factor;
        th = fma(theta_interp, 1.0f - ramp_mix, theta_extrap * ramp_mix);
        mscale *= fma(0.1f, gm_logf(cr_div(1.0f, freq_scale)), 1.0f);
    }
    const float2 sc = gs_sincosf(th);
    return (float2)(sc.y * mscale, sc.x * mscale);
}

inline float rope_pos(__global const int *pos, ulong pos_off, long i2) {
    return (float) *(__global const int *)((__global const char *) pos + pos_off + (ulong) i2 * 4);
}

kernel void kernel_rope_norm_f32(CTENSOR(a), __global const int *pos, ulong pos_off,
                                 __global const float *ff, ulong ff_off, int has_ff,
                                 TENSOR(dst), int n_dims, float freq_base, float freq_scale,
                                 float ext_factor, float attn_factor, float corr0, float corr1) {
    const long j  = get_global_id(0);
    const long i1 = get_global_id(1);
    const long i2 = get_global_id(2) % dst_ne.s2;
    const long i3 = get_global_id(2) / dst_ne.s2;
    if (2*j >= dst_ne.s0) return;

    const __global char *src = AT(a,   2*j, i1, i2, i3);
    __global char       *out = AT(dst, 2*j, i1, i2, i3);
    const float x0 = load_f32(src);
    const float x1 = load_f32(src + a_nb.s0);

    if (2*j >= n_dims) {
        store_f32(out, x0);
        store_f32(out + dst_nb.s0, x1);
        return;
    }

    const float theta_scale = gm_powf(freq_base, cr_div(-2.0f, (float) n_dims));
    const float2 cs = rope_cos_sin((int) j, rope_pos(pos, pos_off, i2), theta_scale, ff, ff_off, has_ff,
                                   freq_scale, ext_factor, attn_factor, corr0, corr1);

    // the CPU's vectorised loop fuses every pair but the last one of an odd count
    const int n_pairs = n_dims / 2;
    const bool fused = !((n_pairs & 1) && j == n_pairs - 1);

    float y0, y1;
    if (fused) {
        y0 = fma(x0, cs.x, -(x1 * cs.y));
        y1 = fma(x0, cs.y, x1 * cs.x);
    } else {
        y0 = x0 * cs.x - x1 * cs.y;
        y1 = x0 * cs.y + x1 * cs.x;
    }
    store_f32(out, y0);
    store_f32(out + dst_nb.s0, y1);
}

kernel void kernel_rope_neox_f32(CTENSOR(a), __global const int *pos, ulong pos_off,
                                 __global const float *ff, ulong ff_off, int has_ff,
                                 TENSOR(dst), int n_dims, float freq_base, float freq_scale,
                                 float ext_factor, float attn_factor, float corr0, float corr1) {
    const long j  = get_global_id(0);
    const long i1 = get_global_id(1);
    const long i2 = get_global_id(2) % dst_ne.s2;
    const long i3 = get_global_id(2) / dst_ne.s2;
    if (2*j >= dst_ne.s0) return;

    if (2*j >= n_dims) {
        const __global char *src = AT(a,   2*j, i1, i2, i3);
        __global char       *out = AT(dst, 2*j, i1, i2, i3);
        const float x0 = load_f32(src);
        const float x1 = load_f32(src + a_nb.s0);
        store_f32(out, x0);
        store_f32(out + dst_nb.s0, x1);
        return;
    }
    const long nh = n_dims / 2;
    if (j >= nh) return;

    const float x0 = load_f32(AT(a, j,        i1, i2, i3));
    const float x1 = load_f32(AT(a, j + nh,   i1, i2, i3));

    const float theta_scale = gm_powf(freq_base, cr_div(-2.0f, (float) n_dims));
    const float2 cs = rope_cos_sin((int) j, rope_pos(pos, pos_off, i2), theta_scale, ff, ff_off, has_ff,
                                   freq_scale, ext_factor, attn_factor, corr0, corr1);

    store_f32(AT(dst, j,        i1, i2, i3), fma(x0, cs.x, -(x1 * cs.y)));
    store_f32(AT(dst, j + nh,   i1, i2, i3), fma(x0, cs.y, x1 * cs.x));
}
