// GLU F32: SWIGLU and GEGLU (ops.cpp ggml_compute_forward_swiglu_f32/geglu_f32).
//  - has_b != 0 (split form): x = a, g = b, same shape as dst; the CPU ignores
//    'swapped' in this form.
//  - has_b == 0 (fused form): each row of a holds 2*nc values (nc = ne0(dst));
//    x is the first half and g the second, or the other way round when swapped.
//  - SWIGLU: silu(x)*g; for each full group of 8 elements of a row the CPU uses
//    its vectorised ggml_v_expf (ported below), for the row tail libm expf.
//  - GEGLU: fp16 table: x <= -10 -> 0, x >= 10 -> x*g, else fp16(gelu(fp16(x)))*g.
#pragma OPENCL FP_CONTRACT OFF

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

#define GELU_COEF_A     0.044715f
#define SQRT_2_OVER_PI  0.79788456080286535587989211986876f

// Loads x (the activated input) and g (the gate multiplier) for dst coords c.
inline void glu_load(CTENSOR(a), CTENSOR(b), long4 dst_ne, long4 c, int swapped, int has_b,
                     float *x, float *g) {
    if (has_b) {
        *x = load_f32(AT(a, c.s0, c.s1, c.s2, c.s3));
        *g = load_f32(AT(b, c.s0, c.s1, c.s2, c.s3));
    } else {
        const long nc = dst_ne.s0;
        const long ox = swapped ? nc : 0;
        const long og = swapped ? 0 : nc;
        *x = load_f32(AT(a, c.s0 + ox, c.s1, c.s2, c.s3));
        *g = load_f32(AT(a, c.s0 + og, c.s1, c.s2, c.s3));
    }
}

kernel void kernel_swiglu_f32(CTENSOR(a), CTENSOR(b), TENSOR(dst), int swapped, int has_b) {
    const long i = get_global_id(0);
    if (i >= nelements4(dst_ne)) return;
    const long4 c = unravel4(i, dst_ne);
    float x, g;
    glu_load(a, a_off, a_ne, a_nb, b, b_off, b_ne, b_nb, dst_ne, c, swapped, has_b, &x, &g);
    float y;
    if (c.s0 < (dst_ne.s0 & ~7L)) {
        y = cr_div(x, 1.0f + cpu_v_expf(0.0f - x)) * g;
    } else {
        y = cr_div(x, 1.0f + acc_expf(-x)) * g;
    }
    store_f32(AT(dst, c.s0, c.s1, c.s2, c.s3), y);
}

// ggml_gelu_f32 as the CPU evaluates it when filling ggml_table_gelu_f16.
inline float cpu_gelu_f32(float x) {
    const float inner = SQRT_2_OVER_PI * x * fma(GELU_COEF_A * x, x, 1.0f);
    return 0.5f * x * (1.0f + tanh(inner));
}

kernel void kernel_geglu_f32(CTENSOR(a), CTENSOR(b), TENSOR(dst), int swapped, int has_b) {
    const long i = get_global_id(0);
    if (i >= nelements4(dst_ne)) return;
    const long4 c = unravel4(i, dst_ne);
    float x, g;
    glu_load(a, a_off, a_ne, a_nb, b, b_off, b_ne, b_nb, dst_ne, c, swapped, has_b, &x, &g);
    float y;
    if (x <= -10.0f) {
        y = 0.0f;
    } else if (x >= 10.0f) {
        y = x * g;
    } else {
        y = round_f16(cpu_gelu_f32(round_f16(x))) * g;
    }
    store_f32(AT(dst, c.s0, c.s1, c.s2, c.s3), y);
}
