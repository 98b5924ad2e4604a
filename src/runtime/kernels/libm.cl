// Ports of the libm routines ggml's CPU backend calls (glibc 2.36 expf, logf,
// powf, tanhf/expm1f, and the AVX2 ggml_v_expf), in float-float where the
// originals compute in double, shared by the programs that must reproduce the
// CPU bit for bit (unary, glu, softmax, rope). Prepended after common.cl.
#pragma OPENCL FP_CONTRACT OFF

// ---------------------------------------------------------------------------
// CPU-exact float math without double precision.
// ggml's CPU backend calls glibc's expf/logf/powf (which evaluate in double with
// small tables and round once) and uses IEEE-correct division and sqrt; OpenCL
// builtins only promise a few ulp. gm_expf/gm_logf/gm_powf below replay glibc's
// own algorithms (glibc 2.27+ flt-32 e_expf.c, e_logf.c, e_powf.c and their
// tables) in float-float (about 48 bits), so they return glibc's float results
// except in rare cases where glibc's double result lies within ~2^-45 of a
// rounding boundary. Requires no -cl-fast-relaxed-math / -cl-unsafe-math-optimizations.
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

// 2^(i/32) (glibc __exp2f_data.tab, as values) in float-float
__constant float2 gm_exp2_tab[32] = {
    (float2)(0x1.0000000000000p+0f, 0.0f),
    (float2)(0x1.059b0e0000000p+0f, -0x1.9d4f520000000p-25f),
    (float2)(0x1.0b55860000000p+0f, 0x1.9f31220000000p-25f),
    (float2)(0x1.11301e0000000p+0f, -0x1.fdb4960000000p-25f),
    (float2)(0x1.172b840000000p+0f, -0x1.c157420000000p-27f),
    (float2)(0x1.1d48740000000p+0f, -0x1.d2e8ca0000000p-25f),
    (float2)(0x1.2387a60000000p+0f, 0x1.ceac480000000p-25f),
    (float2)(0x1.29e9e00000000p+0f, -0x1.5c04240000000p-25f),
    (float2)(0x1.306fe00000000p+0f, 0x1.4636e20000000p-25f),
    (float2)(0x1.371a740000000p+0f, -0x1.18aac60000000p-25f),
    (float2)(0x1.3dea640000000p+0f, 0x1.8246840000000p-25f),
    (float2)(0x1.44e0860000000p+0f, 0x1.8624b40000000p-30f),
    (float2)(0x1.4bfdae0000000p+0f, -0x1.593abc0000000p-25f),
    (float2)(0x1.5342b60000000p+0f, -0x1.2c56100000000p-25f),
    (float2)(0x1.5ab07e0000000p+0f, -0x1.5bd5ec0000000p-27f),
    (float2)(0x1.6247ec0000000p+0f, -0x1.f8b5500000000p-25f),
    (float2)(0x1.6a09e60000000p+0f, 0x1.9fcef40000000p-26f),
    (float2)(0x1.71f75e0000000p+0f, 0x1.1d8bee0000000p-25f),
    (float2)(0x1.7a11480000000p+0f, -0x1.829fd00000000p-25f),
    (float2)(0x1.82589a0000000p+0f, -0x1.accc7c0000000p-26f),
    (float2)(0x1.8ace540000000p+0f, 0x1.15506e0000000p-27f),
    (float2)(0x1.93737c0000000p+0f, -0x1.e647440000000p-25f),
    (float2)(0x1.9c49180000000p+0f, 0x1.51f8480000000p-27f),
    (float2)(0x1.a5503c0000000p+0f, -0x1.b83b540000000p-25f),
    (float2)(0x1.ae89fa0000000p+0f, -0x1.a94b140000000p-26f),
    (float2)(0x1.b7f7700000000p+0f, -0x1.a094380000000p-25f),
    (float2)(0x1.c199be0000000p+0f, -0x1.3d56b20000000p-27f),
    (float2)(0x1.cb720e0000000p+0f, -0x1.8837cc0000000p-27f),
    (float2)(0x1.d5818e0000000p+0f, -0x1.822dbc0000000p-27f),
    (float2)(0x1.dfc9740000000p+0f, -0x1.908c940000000p-25f),
    (float2)(0x1.ea4afa0000000p+0f, 0x1.52486c0000000p-27f),
    (float2)(0x1.f507660000000p+0f, -0x1.246eb00000000p-26f),
};
#define GM_EXP2_C0 (float2)(0x1.c6af840000000p-5f, 0x1.7224720000000p-30f)
#define GM_EXP2_C1 (float2)(0x1.ebfce60000000p-3f, -0x1.e0a7620000000p-28f)
#define GM_EXP2_C2 (float2)(0x1.62e4300000000p-1f, -0x1.e75a540000000p-30f)
#define GM_EXP_CS0 (float2)(0x1.c6af840000000p-20f, 0x1.7224720000000p-45f)
#define GM_EXP_CS1 (float2)(0x1.ebfce60000000p-13f, -0x1.e0a7620000000p-38f)
#define GM_EXP_CS2 (float2)(0x1.62e4300000000p-6f, -0x1.e75a540000000p-35f)
#define GM_INVLN2N_1 0x1.7154760000000p+5f
#define GM_INVLN2N_2 0x1.4ae0c00000000p-21f
#define GM_INVLN2N_3 -0x1.0000000000000p-46f
// glibc __logf_data.tab {invc, logc} in float-float
__constant float2 gm_logf_invc[16] = {
    (float2)(0x1.661ec80000000p+0f, -0x1.81c3100000000p-26f),
    (float2)(0x1.571ed40000000p+0f, 0x1.55f1080000000p-25f),
    (float2)(0x1.4953a00000000p+0f, -0x1.e1fdea0000000p-25f),
    (float2)(0x1.3c995c0000000p+0f, -0x1.e8ff900000000p-25f),
    (float2)(0x1.30d1900000000p+0f, 0x1.910c940000000p-25f),
    (float2)(0x1.25e2280000000p+0f, -0x1.3d1c580000000p-26f),
    (float2)(0x1.1bb4a40000000p+0f, 0x1.4346880000000p-25f),
    (float2)(0x1.1235900000000p+0f, -0x1.eea3480000000p-25f),
    (float2)(0x1.0953f40000000p+0f, 0x1.9900a80000000p-28f),
    (float2)(0x1.0000000000000p+0f, 0.0f),
    (float2)(0x1.e608d00000000p-1f, -0x1.32dc2a0000000p-28f),
    (float2)(0x1.ca4b320000000p-1f, -0x1.fb2ac00000000p-30f),
    (float2)(0x1.b203660000000p-1f, -0x1.12a0640000000p-26f),
    (float2)(0x1.9c2d160000000p-1f, 0x1.d0d5160000000p-28f),
    (float2)(0x1.886e600000000p-1f, 0x1.bc20f60000000p-28f),
    (float2)(0x1.767dd00000000p-1f, -0x1.5596f40000000p-26f),
};
__constant float2 gm_logf_logc[16] = {
    (float2)(-0x1.57bf780000000p-2f, -0x1.1955bc0000000p-31f),
    (float2)(-0x1.2bef0a0000000p-2f, -0x1.f01b760000000p-28f),
    (float2)(-0x1.01eae80000000p-2f, 0x1.5d8b320000000p-31f),
    (float2)(-0x1.b31d8a0000000p-3f, -0x1.a0893a0000000p-29f),
    (float2)(-0x1.6574f00000000p-3f, -0x1.580eec0000000p-28f),
    (float2)(-0x1.1aa2bc0000000p-3f, -0x1.e720400000000p-29f),
    (float2)(-0x1.a4e76c0000000p-4f, -0x1.d181cc0000000p-29f),
    (float2)(-0x1.1973c60000000p-4f, 0x1.67b8cc0000000p-30f),
    (float2)(-0x1.252f440000000p-5f, 0x1.c7bcf80000000p-31f),
    (float2)(0.0f, 0.0f),
    (float2)(0x1.aa5aa60000000p-5f, -0x1.06d33e0000000p-32f),
    (float2)(0x1.c5e53a0000000p-4f, 0x1.46c5d60000000p-29f),
    (float2)(0x1.526e580000000p-3f, -0x1.1be4a00000000p-28f),
    (float2)(0x1.bc28600000000p-3f, 0x1.a448ee0000000p-28f),
    (float2)(0x1.1058bc0000000p-2f, 0x1.140fdc0000000p-27f),
    (float2)(0x1.4043060000000p-2f, -0x1.09223e0000000p-27f),
};
#define GM_LN2_1 0x1.62e4300000000p-1f
#define GM_LN2_2 -0x1.05c6100000000p-29f
#define GM_LN2_3 -0x1.0000000000000p-53f
#define GM_LOGF_A0 (float2)(-0x1.00ea340000000p-2f, -0x1.1710660000000p-27f)
#define GM_LOGF_A1 (float2)(0x1.5575b00000000p-2f, 0x1.7c016e0000000p-27f)
#define GM_LOGF_A2 (float2)(-0x1.fffff00000000p-2f, 0x1.beb7dc0000000p-27f)
// glibc __powf_log2_data.tab logc (invc is shared with logf) in float-float
__constant float2 gm_powf_logc[16] = {
    (float2)(-0x1.efec660000000p-2f, 0x1.1a73fa0000000p-28f),
    (float2)(-0x1.b0b6840000000p-2f, 0x1.a5606c0000000p-27f),
    (float2)(-0x1.7418b00000000p-2f, -0x1.43f6f00000000p-27f),
    (float2)(-0x1.39de920000000p-2f, 0x1.648c220000000p-28f),
    (float2)(-0x1.01d9c00000000p-2f, 0x1.81a93a0000000p-27f),
    (float2)(-0x1.97c1d20000000p-3f, 0x1.3121440000000p-29f),
    (float2)(-0x1.2f9e3a0000000p-3f, 0x1.8a186c0000000p-28f),
    (float2)(-0x1.960cbc0000000p-4f, 0x1.0ee5480000000p-33f),
    (float2)(-0x1.a6f9dc0000000p-5f, 0x1.3714060000000p-30f),
    (float2)(0.0f, 0.0f),
    (float2)(0x1.338caa0000000p-4f, -0x1.b615860000000p-33f),
    (float2)(0x1.476a960000000p-3f, -0x1.78edc80000000p-28f),
    (float2)(0x1.e840b40000000p-3f, 0x1.589c9a0000000p-28f),
    (float2)(0x1.4064600000000p-2f, -0x1.e7335c0000000p-27f),
    (float2)(0x1.88e9c20000000p-2f, 0x1.8374000000000p-27f),
    (float2)(0x1.ce0a440000000p-2f, 0x1.d62f7a0000000p-27f),
};
#define GM_POWF_A0 (float2)(0x1.27616c0000000p-2f, 0x1.292dc20000000p-27f)
#define GM_POWF_A1 (float2)(-0x1.71969a0000000p-2f, -0x1.d719e80000000p-32f)
#define GM_POWF_A2 (float2)(0x1.ec70a60000000p-2f, 0x1.94f75c0000000p-27f)
#define GM_POWF_A3 (float2)(-0x1.7154740000000p-1f, -0x1.17ded80000000p-26f)
#define GM_POWF_A4 (float2)(0x1.7154760000000p+0f, 0x1.4aae0a0000000p-26f)


// Arithmetic shift right by 23 of a 32-bit pattern (floor division by 2^23).
inline int gm_asr23(uint v) {
    return (v & 0x80000000u) ? -(int)((~v) >> 23) - 1 : (int)(v >> 23);
}

// Rounds the float-float value v * 2^q to float once, also into the subnormal range.
inline float gm_round_scaled(float2 v, int q) {
    if (v.x == 0.0f || !isfinite(v.x)) return v.x;
    int ex;
    (void) frexp(v.x, &ex);                   // |v.x| in [2^(ex-1), 2^ex)
    const int e = ex + q;
    if (e > -125) return ldexp(v.x, q);       // normal (or overflow to inf)
    if (e < -151) return v.x * 0.0f;          // below half the smallest subnormal
    const int s = q + 149;                    // put the subnormal grid at 1
    const float a = ldexp(v.x, s);
    const float b = ldexp(v.y, s);
    float i = rint(a);
    const float rem = (a - i) + b;
    if (rem > 0.5f) i += 1.0f;
    else if (rem < -0.5f) i -= 1.0f;
    else if ((rem == 0.5f || rem == -0.5f) && fmod(i, 2.0f) != 0.0f) i += rem > 0.0f ? 1.0f : -1.0f;
    return ldexp(i, -149);
}

// (float-float) z*c - 1 for a float z and a float-float c with z*c close to 1.
inline float2 gm_mul_sub1(float z, float2 c) {
    const float p = z * c.x;
    float e = fma(z, c.x, -p);
    e += z * c.y;
    return ff_two_sum(p - 1.0f, e);
}

// s * (C0*r^3 + C1*r^2 + C2*r + 1) * 2^q, glibc's shared exp2 polynomial step.
inline float gm_exp_poly(float2 r, int ki, float2 c0, float2 c1, float2 c2) {
    const int i = ki & 31;
    const int q = (ki - i) / 32;
    const float2 z  = ff_add(ff_mul(c0, r), c1);
    const float2 r2 = ff_mul(r, r);
    float2 y = ff_add(ff_mul(c2, r), (float2)(1.0f, 0.0f));
    y = ff_add(ff_mul(z, r2), y);
    y = ff_mul(y, gm_exp2_tab[i]);
    return gm_round_scaled(y, q);
}

// Splits z into k + r, k = nearest integer (ties to even), r float-float.
inline float2 gm_round_split(float2 z, float *k) {
    float kk = rint(z.x);
    float2 r = ff_two_sum(z.x - kk, z.y);
    if (r.x > 0.5f)       { kk += 1.0f; r = ff_add(r, (float2)(-1.0f, 0.0f)); }
    else if (r.x < -0.5f) { kk -= 1.0f; r = ff_add(r, (float2)( 1.0f, 0.0f)); }
    *k = kk;
    return r;
}

// glibc expf
inline float gm_expf(float x) {
    const uint ux = as_uint(x);
    const uint abstop = (ux >> 20) & 0x7ff;
    if (abstop >= 0x42b) {                    // |x| >= 88 or nan
        if (ux == 0xff800000u) return 0.0f;
        if (abstop >= 0x7f8) return x + x;
        if (x > 0x1.62e42ep6f) return INFINITY;
        if (x < -0x1.9fe368p6f) return 0.0f;
    }
    // z = x * 32/ln2
    const float p1 = x * GM_INVLN2N_1, e1 = fma(x, GM_INVLN2N_1, -p1);
    const float p2 = x * GM_INVLN2N_2, e2 = fma(x, GM_INVLN2N_2, -p2);
    const float2 z = ff_add((float2)(p1, e1), (float2)(p2, e2 + x * GM_INVLN2N_3));
    float k;
    const float2 r = gm_round_split(z, &k);
    return gm_exp_poly(r, (int) k, GM_EXP_CS0, GM_EXP_CS1, GM_EXP_CS2);
}

// glibc logf
inline float gm_logf(float x) {
    uint ix = as_uint(x);
    if (ix == 0x3f800000u) return 0.0f;
    if (ix - 0x00800000u >= 0x7f800000u - 0x00800000u) {
        if (ix * 2 == 0) return -INFINITY;
        if (ix == 0x7f800000u) return x;
        if ((ix & 0x80000000u) || ix * 2 >= 0xff000000u) return isnan(x) ? x : NAN;
        ix = as_uint(x * 0x1p23f);            // subnormal: normalise
        ix -= 23u << 23;
    }
    const uint tmp = ix - 0x3f330000u;
    const int  i   = (int)((tmp >> 19) % 16);
    const int  k   = gm_asr23(tmp);
    const uint iz  = ix - (tmp & (0x1ffu << 23));
    const float2 r = gm_mul_sub1(as_float(iz), gm_logf_invc[i]);
    const float fk = (float) k;
    const float q1 = fk * GM_LN2_1, f1 = fma(fk, GM_LN2_1, -q1);
    const float q2 = fk * GM_LN2_2, f2 = fma(fk, GM_LN2_2, -q2);
    const float2 y0 = ff_add(gm_logf_logc[i], ff_add((float2)(q1, f1), (float2)(q2, f2 + fk * GM_LN2_3)));
    const float2 r2 = ff_mul(r, r);
    float2 y = ff_add(ff_mul(GM_LOGF_A1, r), GM_LOGF_A2);
    y = ff_add(ff_mul(GM_LOGF_A0, r2), y);
    y = ff_add(ff_mul(y, r2), ff_add(y0, r));
    return y.x + y.y;
}

inline int gm_checkint(uint iy) {
    const int e = (iy >> 23) & 0xff;
    if (e < 0x7f) return 0;
    if (e > 0x7f + 23) return 2;
    if (iy & ((1u << (0x7f + 23 - e)) - 1)) return 0;
    if (iy & (1u << (0x7f + 23 - e))) return 1;
    return 2;
}

inline int gm_zeroinfnan(uint i) { return 2 * i - 1 >= 2u * 0x7f800000u - 1; }

// glibc powf
inline float gm_powf(float x, float y) {
    uint ix = as_uint(x);
    const uint iy = as_uint(y);
    int neg = 0;
    if (ix - 0x00800000u >= 0x7f800000u - 0x00800000u || gm_zeroinfnan(iy)) {
        if (gm_zeroinfnan(iy)) {
            if (2 * iy == 0) return 1.0f;
            if (ix == 0x3f800000u) return 1.0f;
            if (2 * ix > 2u * 0x7f800000u || 2 * iy > 2u * 0x7f800000u) return x + y;
            if (2 * ix == 2u * 0x3f800000u) return 1.0f;
            if ((2 * ix < 2u * 0x3f800000u) == !(iy & 0x80000000u)) return 0.0f;
            return y * y;
        }
        if (gm_zeroinfnan(ix)) {
            float x2 = x * x;
            if ((ix & 0x80000000u) && gm_checkint(iy) == 1) x2 = -x2;
            return (iy & 0x80000000u) ? 1.0f / x2 : x2;
        }
        if (ix & 0x80000000u) {
            const int yint = gm_checkint(iy);
            if (yint == 0) return NAN;
            if (yint == 1) neg = 1;
            ix &= 0x7fffffffu;
        }
        if (ix < 0x00800000u) {
            ix = as_uint(as_float(ix) * 0x1p23f);
            ix &= 0x7fffffffu;
            ix -= 23u << 23;
        }
    }
    // log2(x) (log2_inline)
    const uint tmp = ix - 0x3f330000u;
    const int  i   = (int)((tmp >> 19) % 16);
    const uint top = tmp & 0xff800000u;
    const uint iz  = ix - top;
    const int  k   = gm_asr23(top);
    const float2 r  = gm_mul_sub1(as_float(iz), gm_logf_invc[i]);
    const float2 y0 = ff_add(gm_powf_logc[i], (float2)((float) k, 0.0f));
    const float2 r2 = ff_mul(r, r);
    float2 yy = ff_add(ff_mul(GM_POWF_A0, r), GM_POWF_A1);
    const float2 p  = ff_add(ff_mul(GM_POWF_A2, r), GM_POWF_A3);
    const float2 r4 = ff_mul(r2, r2);
    float2 q = ff_add(ff_mul(GM_POWF_A4, r), y0);
    q  = ff_add(ff_mul(p, r2), q);
    yy = ff_add(ff_mul(yy, r4), q);
    const float2 ylogx = ff_mul_f(yy, y);
    if (fabs(ylogx.x) >= 126.0f) {
        // overflow above 0x1.fffffffd1d571p+6, underflow at or below -150
        const float2 d = ff_add(ylogx, (float2)(-0x1p+7f, 0x1.715478p-25f));
        if (d.x > 0.0f) return neg ? -INFINITY : INFINITY;
        if (ylogx.x < -150.0f || (ylogx.x == -150.0f && ylogx.y <= 0.0f)) return neg ? -0.0f : 0.0f;
    }
    // exp2(ylogx) (exp2_inline): ylogx = k/32 + r
    float kk;
    const float2 r32 = gm_round_split((float2)(ylogx.x * 32.0f, ylogx.y * 32.0f), &kk);
    const float2 rr  = (float2)(r32.x * 0x1p-5f, r32.y * 0x1p-5f);
    const float res = gm_exp_poly(rr, (int) kk, GM_EXP2_C0, GM_EXP2_C1, GM_EXP2_C2);
    return neg ? -res : res;
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

// glibc's tanhf (the SunPro s_tanhf.c / s_expm1f.c pair that the CPU's
// ggml_table_gelu_f16 was built with on the pinned Debian 12 / glibc 2.36 host),
// ported operation for operation; it matches glibc on every finite float.
// Divisions must be correctly rounded (cr_div) for the port to be exact.
inline float cpu_expm1f(float x) {
    const float one = 1.0f, ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f,
                invln2 = 1.4426950216e+00f, Q1 = -3.3333335072e-02f, Q2 = 1.5873016091e-03f,
                Q3 = -7.9365076090e-05f, Q4 = 4.0082177293e-06f, Q5 = -2.0109921195e-07f;
    float hi, lo, c = 0.0f, t, e, hxs, hfx, r1, y;
    int k;
    uint hx = as_uint(x);
    const uint xsb = hx & 0x80000000u;
    hx &= 0x7fffffffu;
    if (hx >= 0x4195b844u) {                       // |x| >= 27*ln2
        if (hx >= 0x42b17218u) {                   // |x| >= 88.72
            if (hx > 0x7f800000u) return x + x;    // NaN
            if (hx == 0x7f800000u) return xsb == 0 ? x : -1.0f;
            if (x > 8.8721679688e+01f) return INFINITY;
        }
        if (xsb != 0) return -1.0f;                // tiny - one
    }
    if (hx > 0x3eb17218u) {                        // |x| > 0.5 ln2
        if (hx < 0x3F851592u) {                    // and |x| < 1.5 ln2
            if (xsb == 0) { hi = x - ln2_hi; lo =  ln2_lo; k =  1; }
            else          { hi = x + ln2_hi; lo = -ln2_lo; k = -1; }
        } else {
            k  = (int)(invln2 * x + (xsb == 0 ? 0.5f : -0.5f));
            t  = (float) k;
            hi = x - t * ln2_hi;
            lo = t * ln2_lo;
        }
        x = hi - lo;
        c = (hi - x) - lo;
    } else if (hx < 0x33000000u) {                 // |x| < 2^-25
        return x;
    } else {
        k = 0;
    }
    hfx = 0.5f * x;
    hxs = x * hfx;
    r1 = one + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))));
    t  = 3.0f - r1 * hfx;
    e  = hxs * cr_div(r1 - t, 6.0f - x * t);
    if (k == 0) return x - (x * e - hxs);
    e  = (x * (e - c) - c);
    e -= hxs;
    if (k == -1) return 0.5f * (x - e) - 0.5f;
    if (k == 1) {
        if (x < -0.25f) return -2.0f * (e - (x + 0.5f));
        return one + 2.0f * (x - e);
    }
    if (k <= -2 || k > 56) {
        y = one - (e - x);
        y = as_float(as_uint(y) + ((uint) k << 23));
        return y - one;
    }
    if (k < 23) {
        t = as_float(0x3f800000u - (0x1000000u >> k));   // 1 - 2^-k
        y = t - (e - x);
        y = as_float(as_uint(y) + ((uint) k << 23));
    } else {
        t = as_float((uint)(0x7f - k) << 23);             // 2^-k
        y = x - (e + t);
        y += one;
        y = as_float(as_uint(y) + ((uint) k << 23));
    }
    return y;
}

inline float cpu_tanhf(float x) {
    const int jx = as_int(x);
    const int ix = jx & 0x7fffffff;
    float t, z;
    if (ix >= 0x7f800000) {
        return isnan(x) ? x : (jx >= 0 ? 1.0f : -1.0f);
    }
    if (ix < 0x41b00000) {                         // |x| < 22
        if (ix == 0) return x;
        if (ix < 0x24000000) return x * (1.0f + x); // |x| < 2^-55
        if (ix >= 0x3f800000) {                    // |x| >= 1
            t = cpu_expm1f(2.0f * fabs(x));
            z = 1.0f - cr_div(2.0f, t + 2.0f);
        } else {
            t = cpu_expm1f(-2.0f * fabs(x));
            z = cr_div(-t, t + 2.0f);
        }
    } else {
        z = 1.0f;                                  // one - tiny
    }
    return jx >= 0 ? z : -z;
}

#define GELU_COEF_A     0.044715f
