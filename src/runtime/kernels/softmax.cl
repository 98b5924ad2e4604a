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
// extended-precision accumulation; the row tail uses glibc expf (gm_expf). The
// ALiBi slope is glibc powf (gm_powf) of the host's m0/m1. A -INFINITY mask entry
// gives exp() == 0; a row that is entirely -INFINITY gives NaN, as on the CPU.
// Sinks (src2) are not handled here.
#pragma OPENCL FP_CONTRACT OFF

#define SM_WG 64

// Shared libm ports: libm.cl (prepended).
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
        slope = h < n_head_log2 ? gm_powf(m0, (float)(h + 1))
                                : gm_powf(m1, (float)(2*(h - n_head_log2) + 1));
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
        const float v = gm_expf(w - max);
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
