// ADD / SUB / MUL / DIV on F32 (binary-ops.cpp apply_binary_op).
// dst and a have the same shape; b broadcasts: its index is dst's coords % b_ne.
// dst may alias a or b (in-place), so each work-item reads before it writes.
#pragma OPENCL FP_CONTRACT OFF

// a / b, correctly rounded even where the device's '/' is not (the CPU's is).
inline float bin_div_rn(float a, float b) {
    float q = a / b;
    if (!isfinite(q) || q == 0.0f) return q;
    float y = 1.0f / b;
    if (!isfinite(y)) return q;
    float r = fma(-q, b, a);
    if (r == 0.0f) return q;
    return fma(r, y, q);
}

#define BINARY_KERNEL(name, EXPR)                                                   \
kernel void name(CTENSOR(a), CTENSOR(b), TENSOR(dst)) {                             \
    const long i = get_global_id(0);                                                \
    if (i >= nelements4(dst_ne)) return;                                            \
    const long4 c = unravel4(i, dst_ne);                                            \
    const float x = load_f32(AT(a, c.s0, c.s1, c.s2, c.s3));                        \
    const float y = load_f32(AT(b, c.s0 % b_ne.s0, c.s1 % b_ne.s1,                  \
                                   c.s2 % b_ne.s2, c.s3 % b_ne.s3));                \
    store_f32(AT(dst, c.s0, c.s1, c.s2, c.s3), (EXPR));                             \
}

BINARY_KERNEL(kernel_add_f32, x + y)
BINARY_KERNEL(kernel_sub_f32, x - y)
BINARY_KERNEL(kernel_mul_f32, x * y)
BINARY_KERNEL(kernel_div_f32, bin_div_rn(x, y))
