// RMS_NORM and NORM over rows of F32 (ops.cpp ggml_compute_forward_rms_norm_f32 /
// ggml_compute_forward_norm_f32). One work-group of 64 work-items per row:
// global {64, ne1, ne2*ne3}, local {64,1,1}.
//
// The CPU accumulates these sums in double (ggml_float). Without double we sum
// in float-float (about 48 bits) and round once, which gives the same float in
// all but rare tie cases. NORM's variance is summed, as on the CPU (AVX2 build),
// in float per group of 8 elements (ggml_vec_cvar_f32's horizontal-add tree) and
// those partial sums are then accumulated in extended precision.
#pragma OPENCL FP_CONTRACT OFF

#define NORM_WG 64

// a / b, correctly rounded even where the device's '/' is not.
inline float nrm_div(float a, float b) {
    float q = a / b;
    if (!isfinite(q) || q == 0.0f) return q;
    float y = 1.0f / b;
    if (!isfinite(y)) return q;
    float r = fma(-q, b, a);
    if (r == 0.0f) return q;
    return fma(r, y, q);
}

// sqrt(x), correctly rounded even where the device's sqrt is not.
inline float nrm_sqrt(float x) {
    float s = sqrt(x);
    if (!(x > 0.0f) || !isfinite(x) || !(s > 0.0f)) return s;
    float r = fma(-s, s, x);
    return fma(r, nrm_div(0.5f, s), s);
}

inline float2 nrm_two_sum(float a, float b) {
    float s  = a + b;
    float bb = s - a;
    float e  = (a - (s - bb)) + (b - bb);
    return (float2)(s, e);
}

inline float2 nrm_fast_two_sum(float a, float b) {
    float s = a + b;
    float e = b - (s - a);
    return (float2)(s, e);
}

// float-float + float
inline float2 nrm_add_f(float2 a, float b) {
    float2 s = nrm_two_sum(a.x, b);
    s.y += a.y;
    return nrm_fast_two_sum(s.x, s.y);
}

// float-float + float-float
inline float2 nrm_add(float2 a, float2 b) {
    float2 s = nrm_two_sum(a.x, b.x);
    float2 t = nrm_two_sum(a.y, b.y);
    s.y += t.x;
    s = nrm_fast_two_sum(s.x, s.y);
    s.y += t.y;
    return nrm_fast_two_sum(s.x, s.y);
}

// Sums v over the work-group (float-float); every work-item gets the result.
inline float2 nrm_reduce(float2 v, __local float *lhi, __local float *llo) {
    const int lid = get_local_id(0);
    lhi[lid] = v.x;
    llo[lid] = v.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = NORM_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            float2 r = nrm_add((float2)(lhi[lid], llo[lid]), (float2)(lhi[lid + s], llo[lid + s]));
            lhi[lid] = r.x;
            llo[lid] = r.y;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float2 r = (float2)(lhi[0], llo[0]);
    // also orders this row's global reads before any in-place writes that follow
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    return r;
}

// (float)(S / n) for a float-float S, rounded once (the CPU: double / int64 -> float).
inline float nrm_div_ff(float2 s, float n) {
    float q = nrm_div(s.x, n);
    if (!isfinite(q)) return q;
    float r = fma(-q, n, s.x) + s.y;
    return fma(r, nrm_div(1.0f, n), q);
}

kernel void kernel_rms_norm_f32(CTENSOR(a), TENSOR(dst), float eps) {
    __local float lhi[NORM_WG];
    __local float llo[NORM_WG];

    const int  lid = get_local_id(0);
    const long i1  = get_global_id(1);
    const long i2  = get_global_id(2) % dst_ne.s2;
    const long i3  = get_global_id(2) / dst_ne.s2;
    const long n   = a_ne.s0;

    float2 acc = (float2)(0.0f, 0.0f);
    for (long i0 = lid; i0 < n; i0 += NORM_WG) {
        const float x = load_f32(AT(a, i0, i1, i2, i3));
        acc = nrm_add_f(acc, x * x);
    }
    const float2 sum = nrm_reduce(acc, lhi, llo);

    const float mean  = nrm_div_ff(sum, (float) n);
    const float scale = nrm_div(1.0f, nrm_sqrt(mean + eps));

    for (long i0 = lid; i0 < n; i0 += NORM_WG) {
        const float x = load_f32(AT(a, i0, i1, i2, i3));
        store_f32(AT(dst, i0, i1, i2, i3), x * scale);
    }
}

kernel void kernel_norm_f32(CTENSOR(a), TENSOR(dst), float eps) {
    __local float lhi[NORM_WG];
    __local float llo[NORM_WG];

    const int  lid = get_local_id(0);
    const long i1  = get_global_id(1);
    const long i2  = get_global_id(2) % dst_ne.s2;
    const long i3  = get_global_id(2) / dst_ne.s2;
    const long n   = a_ne.s0;

    // The CPU has a separate path for rows that are not contiguous (see the end).
    // No early return: PoCL miscompiles barriers after a work-group-uniform return.
    const bool strided = a_nb.s0 != sizeof(float) || dst_nb.s0 != sizeof(float);

    // mean: ggml_vec_sum_f32 (double accumulation), then float division
    float2 acc = (float2)(0.0f, 0.0f);
    for (long i0 = lid; i0 < n; i0 += NORM_WG) {
        acc = nrm_add_f(acc, load_f32(AT(a, i0, i1, i2, i3)));
    }
    const float2 sum = nrm_reduce(acc, lhi, llo);
    const float mean = nrm_div(sum.x + sum.y, (float) n);

    // variance: ggml_vec_cvar_f32; each work-item owns whole groups of 8
    const long n8 = n & ~7L;
    acc = (float2)(0.0f, 0.0f);
    for (long g = (long) lid * 8; g < n8; g += NORM_WG * 8) {
        float v[8];
        for (int k = 0; k < 8; k++) {
            v[k] = load_f32(AT(a, g + k, i1, i2, i3)) - mean;
        }
        const float s = ((v[0]*v[0] + v[4]*v[4]) + (v[2]*v[2] + v[6]*v[6])) +
                        ((v[1]*v[1] + v[5]*v[5]) + (v[3]*v[3] + v[7]*v[7]));
        acc = nrm_add_f(acc, s);
    }
    for (long i0 = n8 + lid; i0 < n; i0 += NORM_WG) {
        const float v = load_f32(AT(a, i0, i1, i2, i3)) - mean;
        acc = nrm_add_f(acc, v * v);
    }
    const float2 var_sum  = nrm_reduce(acc, lhi, llo);
    const float  variance = nrm_div_ff(var_sum, (float) n);
    const float  scale    = nrm_div(1.0f, nrm_sqrt(variance + eps));

    if (!strided) {
        for (long i0 = lid; i0 < n; i0 += NORM_WG) {
            const float v = load_f32(AT(a, i0, i1, i2, i3)) - mean;
            store_f32(AT(dst, i0, i1, i2, i3), v * scale);
        }
    } else if (lid == 0) {
        // The CPU's strided path: plain sequential float sums.
        float sum = 0.0f;
        for (long i0 = 0; i0 < n; i0++) {
            sum += load_f32(AT(a, i0, i1, i2, i3));
        }
        const float smean = nrm_div(sum, (float) n);
        float variance2 = 0.0f;
        for (long i0 = 0; i0 < n; i0++) {
            const float v = load_f32(AT(a, i0, i1, i2, i3)) - smean;
            store_f32(AT(dst, i0, i1, i2, i3), v);
            variance2 = fma(v, v, variance2);
        }
        variance2 = nrm_div(variance2, (float) n);
        const float sscale = nrm_div(1.0f, nrm_sqrt(variance2 + eps));
        for (long i0 = 0; i0 < n; i0++) {
            __global char *p = AT(dst, i0, i1, i2, i3);
            store_f32(p, load_f32(p) * sscale);
        }
    }
}
