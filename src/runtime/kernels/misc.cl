// SUM_ROWS and CONCAT.
#pragma OPENCL FP_CONTRACT OFF

#define MISC_WG 64

inline float2 misc_two_sum(float a, float b) {
    float s  = a + b;
    float bb = s - a;
    float e  = (a - (s - bb)) + (b - bb);
    return (float2)(s, e);
}

inline float2 misc_fast_two_sum(float a, float b) {
    float s = a + b;
    float e = b - (s - a);
    return (float2)(s, e);
}

inline float2 misc_add(float2 a, float2 b) {
    float2 s = misc_two_sum(a.x, b.x);
    float2 t = misc_two_sum(a.y, b.y);
    s.y += t.x;
    s = misc_fast_two_sum(s.x, s.y);
    s.y += t.y;
    return misc_fast_two_sum(s.x, s.y);
}

// SUM_ROWS (ops.cpp ggml_compute_forward_sum_rows_f32): dst[0, i1, i2, i3] = sum of
// row (i1, i2, i3). The CPU sums in double (ggml_vec_sum_f32) and rounds to float;
// here the sum is float-float (about 48 bits) rounded once.
// global {64, ne1, ne2*ne3}, local {64,1,1}.
kernel void kernel_sum_rows_f32(CTENSOR(a), TENSOR(dst)) {
    __local float lhi[MISC_WG];
    __local float llo[MISC_WG];

    const int  lid = get_local_id(0);
    const long i1  = get_global_id(1);
    const long i2  = get_global_id(2) % a_ne.s2;
    const long i3  = get_global_id(2) / a_ne.s2;
    const long n   = a_ne.s0;

    float2 acc = (float2)(0.0f, 0.0f);
    for (long i0 = lid; i0 < n; i0 += MISC_WG) {
        acc = misc_add(acc, (float2)(load_f32(AT(a, i0, i1, i2, i3)), 0.0f));
    }
    lhi[lid] = acc.x;
    llo[lid] = acc.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = MISC_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            const float2 r = misc_add((float2)(lhi[lid], llo[lid]), (float2)(lhi[lid + s], llo[lid + s]));
            lhi[lid] = r.x;
            llo[lid] = r.y;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        store_f32(AT(dst, 0, i1, i2, i3), lhi[0] + llo[0]);
    }
}

// CONCAT (ops.cpp ggml_compute_forward_concat_*): dst = a followed by b along dim.
// Any 4-byte element type (copied as raw bits). global {nelements(dst)}.
kernel void kernel_concat_f32(CTENSOR(a), CTENSOR(b), TENSOR(dst), int dim) {
    const long i = get_global_id(0);
    if (i >= nelements4(dst_ne)) return;
    const long4 c = unravel4(i, dst_ne);
    const long ca = dim == 0 ? c.s0 : dim == 1 ? c.s1 : dim == 2 ? c.s2 : c.s3;
    const long na = dim == 0 ? a_ne.s0 : dim == 1 ? a_ne.s1 : dim == 2 ? a_ne.s2 : a_ne.s3;
    uint v;
    if (ca < na) {
        v = *(const __global uint *) AT(a, c.s0, c.s1, c.s2, c.s3);
    } else {
        long4 cb = c;
        if (dim == 0) cb.s0 -= na;
        else if (dim == 1) cb.s1 -= na;
        else if (dim == 2) cb.s2 -= na;
        else cb.s3 -= na;
        v = *(const __global uint *) AT(b, cb.s0, cb.s1, cb.s2, cb.s3);
    }
    *(__global uint *) AT(dst, c.s0, c.s1, c.s2, c.s3) = v;
}
