// SOFT_MAX on F32 rows with optional F32/F16 mask and ALiBi
// (ops.cpp ggml_compute_forward_soft_max_f32, vec.cpp ggml_vec_soft_max_f32).
// One work-group of 64 work-items per row: global {64, ne1, ne2*ne3}, local {64,1,1}.
//
//   w[i] = a[i]*scale (+ slope*mask[i])      slope: ALiBi, powf(m0|m1, ...) or 1
//   max  = max_i w[i]
//   e[i] = exp(w[i] - max); sum = sum_i e[i] (the CPU sums in double)
//   dst  = e[i] * (float)(1.0/sum)
// As on the CPU (AVX2 build), every full group of 8 elements uses the vectorised
// ggml_v_expf and is summed in float with the same horizontal-add tree before the
// extended-precision accumulation; the row tail uses libm expf. A -INFINITY mask
// entry gives exp() == 0; a row that is entirely -INFINITY gives NaN, as on the CPU.
// Sinks (src2) are not handled here.
#pragma OPENCL FP_CONTRACT OFF

#define SM_WG 64

// ---------------------------------------------------------------------------
// Accurate float helpers (no double precision). ggml's CPU backend uses glibc
// libm (expf, powf, logf) and IEEE-correct division/sqrt; OpenCL builtins only
// promise a few ulp. These helpers compute in float-float (about 48 bits) and
// round once, which reproduces the glibc results in all but rare tie cases.
// Requires no -cl-fast-relaxed-math / -cl-unsafe-math-optimizations.
// ---------------------------------------------------------------------------

// a / b, correctly rounded even where the device's '/' is not.
inline float cr_div(float a, float b) {
    float q = a / b;
    if (!isfinite(q) || q == 0.0f) return q;
    float y = 1.0f / b;
    if (!isfinite(y)) return q;
    float r = fma(-q, b, a);
    if (r == 0.0f) return q;
    return fma(r, y, q);
}

// sqrt(x), correctly rounded even where the device's sqrt is not.
inline float cr_sqrt(float x) {
    float s = sqrt(x);
    if (!(x > 0.0f) || !isfinite(x) || !(s > 0.0f)) return s;
    float r = fma(-s, s, x);
    return fma(r, cr_div(0.5f, s), s);
}

inline float2 ff_two_sum(float a, float b) {
    float s  = a + b;
    float bb = s - a;
    float e  = (a - (s - bb)) + (b - bb);
    return (float2)(s, e);
}

inline float2 ff_fast_two_sum(float a, float b) {
    float s = a + b;
    float e = b - (s - a);
    return (float2)(s, e);
}

inline float2 ff_add(float2 a, float2 b) {
    float2 s = ff_two_sum(a.x, b.x);
    float2 t = ff_two_sum(a.y, b.y);
    s.y += t.x;
    s = ff_fast_two_sum(s.x, s.y);
    s.y += t.y;
    return ff_fast_two_sum(s.x, s.y);
}

inline float2 ff_mul(float2 a, float2 b) {
    float p = a.x * b.x;
    float e = fma(a.x, b.x, -p);
    e += a.x * b.y + a.y * b.x;
    return ff_fast_two_sum(p, e);
}

inline float2 ff_mul_f(float2 a, float b) {
    float p = a.x * b;
    float e = fma(a.x, b, -p);
    e += a.y * b;
    return ff_fast_two_sum(p, e);
}

inline float2 ff_div(float2 a, float2 b) {
    float q1 = a.x / b.x;
    float2 r = ff_add(a, -ff_mul_f(b, q1));
    float q2 = r.x / b.x;
    r = ff_add(r, -ff_mul_f(b, q2));
    float q3 = r.x / b.x;
    return ff_add(ff_fast_two_sum(q1, q2), (float2)(q3, 0.0f));
}

#define FF_LN2 ((float2)(0x1.62e430p-1f, -0x1.05c610p-29f))

// exp(y) for a float-float y with |y| < ~88 (callers guard the range).
inline float2 ff_exp(float2 y) {
    float k = rint(y.x * 0x1.715476p+0f);
    float2 r = ff_add(y, -ff_mul_f(FF_LN2, k));     // |r| <= ~0.35
    // Taylor series, Horner in float-float; 1/n! as float-float up to 1/8!.
    float2 p = (float2)(0x1.1eed8ep-29f, 0.0f);                       // 1/12!
    p = ff_add(ff_mul(p, r), (float2)(0x1.ae6456p-26f, 0.0f));        // 1/11!
    p = ff_add(ff_mul(p, r), (float2)(0x1.27e4fcp-22f, 0.0f));        // 1/10!
    p = ff_add(ff_mul(p, r), (float2)(0x1.71de3ap-19f, 0x1.55b1ccp-45f)); // 1/9!
    p = ff_add(ff_mul(p, r), (float2)(0x1.a01a02p-16f, -0x1.7f97fap-42f)); // 1/8!
    p = ff_add(ff_mul(p, r), (float2)(0x1.a01a02p-13f, -0x1.7f97fap-39f)); // 1/7!
    p = ff_add(ff_mul(p, r), (float2)(0x1.6c16c2p-10f, -0x1.27d27ep-35f)); // 1/6!
    p = ff_add(ff_mul(p, r), (float2)(0x1.111112p-7f, -0x1.ddddde0p-32f)); // 1/5!
    p = ff_add(ff_mul(p, r), (float2)(0x1.555556p-5f, -0x1.555556p-30f)); // 1/4!
    p = ff_add(ff_mul(p, r), (float2)(0x1.555556p-3f, -0x1.555556p-28f)); // 1/3!
    p = ff_add(ff_mul(p, r), (float2)(0.5f, 0.0f));
    p = ff_add(ff_mul(p, r), (float2)(1.0f, 0.0f));
    p = ff_add(ff_mul(p, r), (float2)(1.0f, 0.0f));
    int ki = (int) k;
    // scale in two steps so that 2^ki itself never overflows
    int k1 = ki / 2, k2 = ki - ki / 2;
    p.x = ldexp(ldexp(p.x, k1), k2);
    p.y = ldexp(ldexp(p.y, k1), k2);
    return p;
}

// expf(x) as glibc computes it (correctly rounded in practice).
inline float acc_expf(float x) {
    if (isnan(x)) return x;
    if (x > 88.8f) return INFINITY;
    if (x < -104.0f) return 0.0f;
    float2 p = ff_exp((float2)(x, 0.0f));
    return p.x + p.y;
}

// natural log of a positive finite float, as float-float.
inline float2 ff_log(float b) {
    int e;
    float m = frexp(b, &e);                  // b = m * 2^e, m in [0.5, 1)
    if (m < 0x1.6a09e6p-1f) { m *= 2.0f; e -= 1; }   // m in [sqrt(1/2), sqrt(2))
    float2 num = (float2)(m - 1.0f, 0.0f);   // exact (Sterbenz)
    float2 den = ff_two_sum(m, 1.0f);
    float2 s  = ff_div(num, den);
    float2 s2 = ff_mul(s, s);
    // ln(m) = 2 s (1 + s^2/3 + s^4/5 + ...), |s| <= 0.1716
    float2 p = (float2)(0x1.8618620p-5f, 0.0f);                          // 1/21
    p = ff_add(ff_mul(p, s2), (float2)(0x1.af286cp-5f, 0.0f));           // 1/19
    p = ff_add(ff_mul(p, s2), (float2)(0x1.e1e1e2p-5f, 0.0f));           // 1/17
    p = ff_add(ff_mul(p, s2), (float2)(0x1.111112p-4f, -0x1.ddddde0p-29f)); // 1/15
    p = ff_add(ff_mul(p, s2), (float2)(0x1.3b13b2p-4f, -0x1.89d89ep-29f)); // 1/13
    p = ff_add(ff_mul(p, s2), (float2)(0x1.745d18p-4f, -0x1.745d18p-29f)); // 1/11
    p = ff_add(ff_mul(p, s2), (float2)(0x1.c71c72p-4f, -0x1.c71c72p-31f)); // 1/9
    p = ff_add(ff_mul(p, s2), (float2)(0x1.24924ap-3f, -0x1.b6db6ep-28f)); // 1/7
    p = ff_add(ff_mul(p, s2), (float2)(0x1.99999ap-3f, -0x1.99999ap-29f)); // 1/5
    p = ff_add(ff_mul(p, s2), (float2)(0x1.555556p-2f, -0x1.555556p-27f)); // 1/3
    p = ff_add(ff_mul(p, s2), (float2)(1.0f, 0.0f));
    float2 lnm = ff_mul_f(ff_mul(s, p), 2.0f);
    return ff_add(ff_mul_f(FF_LN2, (float) e), lnm);
}

// logf(x) for positive finite x, as glibc computes it (in practice).
inline float acc_logf(float x) {
    if (!(x > 0.0f) || !isfinite(x)) return log(x);
    float2 l = ff_log(x);
    return l.x + l.y;
}

// powf(b, e) for positive finite b, as glibc computes it (in practice).
inline float acc_powf(float b, float e) {
    if (!(b > 0.0f) || !isfinite(b) || !isfinite(e)) return pow(b, e);
    if (e == 0.0f || b == 1.0f) return 1.0f;
    float2 y = ff_mul_f(ff_log(b), e);
    if (y.x > 88.8f) return INFINITY;
    if (y.x < -104.0f) return 0.0f;
    float2 p = ff_exp(y);
    return p.x + p.y;
}

// ggml_v_expf (vec.h, AVX2 + FMA build): the CPU backend's vectorised expf,
// used for every full group of 8 elements of a row (the tail uses libm expf).
// Ported lane for lane, including its overflow/underflow fix-ups.
inline float cpu_v_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fma(-n, 0x1.7f7d1cp-20f, fma(-n, 0x1.62e4p-1f, x));
    const uint  e = as_uint(z) << 23;
    const float k = as_float(e + as_uint(1.0f));
    const bool  c = fabs(n) > 126.0f;
    const float u = b * b;
    const float j = fma(fma(fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                            fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                        u, 0x1.ffffecp-1f * b);
    if (!c) return fma(k, j, k);
    const uint  g  = (n <= 0.0f) ? 0x82000000u : 0u;
    const float s1 = as_float(g + 0x7f000000u);
    const float s2 = as_float(e - g);
    if (fabs(n) > 192.0f) return s1 * s1;
    return fma(s2, j, s2) * s1;
}

// w[i] for column i0 of this row; slope*mask is fused (the CPU loop is FMA-contracted).
inline float sm_w(CTENSOR(a), CTENSOR(mask), long i0, long i1, long i2, long i3,
                  float scale, float slope, int mask_type) {
    float w = load_f32(AT(a, i0, i1, i2, i3)) * scale;
    if (mask_type != 0) {
        const __global char *mp = AT(mask, i0, i1, i2 % mask_ne.s2, i3 % mask_ne.s3);
        const float m = (mask_type == 2) ? load_f16(mp) : load_f32(mp);
        w = fma(slope, m, w);
    }
    return w;
}

inline float sm_max(float a, float b) { return a > b ? a : b; }

kernel void kernel_soft_max_f32(CTENSOR(a), CTENSOR(mask), TENSOR(dst),
                                float scale, float max_bias, float m0, float m1,
                                uint n_head_log2, int mask_type) {
    __local float lhi[SM_WG];
    __local float llo[SM_WG];

    const int  lid = get_local_id(0);
    const long i1  = get_global_id(1);
    const long i2  = get_global_id(2) % dst_ne.s2;
    const long i3  = get_global_id(2) / dst_ne.s2;
    const long n   = a_ne.s0;
    const long n8  = n & ~7L;

    // ALiBi slope for head i2
    float slope = 1.0f;
    if (max_bias > 0.0f) {
        const uint h = (uint) i2;
        slope = h < n_head_log2 ? acc_powf(m0, (float)(h + 1))
                                : acc_powf(m1, (float)(2*(h - n_head_log2) + 1));
    }

    // pass 1: row max. Work-item lid owns groups of 8 (g = 8*lid, 8*(lid+64), ...)
    // and tail element n8 + lid; the same ownership is kept in every pass, which
    // makes in-place operation (dst == a) safe.
    float mx = -INFINITY;
    for (long g = (long) lid * 8; g < n8; g += SM_WG * 8) {
        for (int k = 0; k < 8; k++) {
            mx = sm_max(mx, sm_w(a, a_off, a_ne, a_nb, mask, mask_off, mask_ne, mask_nb,
                                 g + k, i1, i2, i3, scale, slope, mask_type));
        }
    }
    for (long i0 = n8 + lid; i0 < n; i0 += SM_WG) {
        mx = sm_max(mx, sm_w(a, a_off, a_ne, a_nb, mask, mask_off, mask_ne, mask_nb,
                             i0, i1, i2, i3, scale, slope, mask_type));
    }
    lhi[lid] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = SM_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            lhi[lid] = sm_max(lhi[lid], lhi[lid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float max = lhi[0];
    barrier(CLK_LOCAL_MEM_FENCE);

    // pass 2: exponentials, written to dst, and their sum
    float2 acc = (float2)(0.0f, 0.0f);
    for (long g = (long) lid * 8; g < n8; g += SM_WG * 8) {
        float v[8];
        for (int k = 0; k < 8; k++) {
            const float w = sm_w(a, a_off, a_ne, a_nb, mask, mask_off, mask_ne, mask_nb,
                                 g + k, i1, i2, i3, scale, slope, mask_type);
            v[k] = cpu_v_expf(w - max);
        }
        for (int k = 0; k < 8; k++) {
            store_f32(AT(dst, g + k, i1, i2, i3), v[k]);
        }
        const float s8 = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
        acc = ff_add(acc, (float2)(s8, 0.0f));
    }
    for (long i0 = n8 + lid; i0 < n; i0 += SM_WG) {
        const float w = sm_w(a, a_off, a_ne, a_nb, mask, mask_off, mask_ne, mask_nb,
                             i0, i1, i2, i3, scale, slope, mask_type);
        const float v = acc_expf(w - max);
        store_f32(AT(dst, i0, i1, i2, i3), v);
        acc = ff_add(acc, (float2)(v, 0.0f));
    }
    lhi[lid] = acc.x;
    llo[lid] = acc.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = SM_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            const float2 r = ff_add((float2)(lhi[lid], llo[lid]), (float2)(lhi[lid + s], llo[lid + s]));
            lhi[lid] = r.x;
            llo[lid] = r.y;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float2 sum = (float2)(lhi[0], llo[0]);

    // (float)(1.0/sum), rounded once
    float inv = cr_div(1.0f, sum.x);
    if (isfinite(inv) && inv != 0.0f) {
        const float e = fma(-inv, sum.x, 1.0f) - inv * sum.y;
        inv = fma(inv, e, inv);
    }

    // pass 3: normalise (each work-item rereads only what it wrote)
    for (long g = (long) lid * 8; g < n8; g += SM_WG * 8) {
        for (int k = 0; k < 8; k++) {
            __global char *p = AT(dst, g + k, i1, i2, i3);
            store_f32(p, load_f32(p) * inv);
        }
    }
    for (long i0 = n8 + lid; i0 < n; i0 += SM_WG) {
        __global char *p = AT(dst, i0, i1, i2, i3);
        store_f32(p, load_f32(p) * inv);
    }
}
