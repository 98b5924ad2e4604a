// GLU F32: SWIGLU and GEGLU (ops.cpp ggml_compute_forward_swiglu_f32/geglu_f32).
//  - has_b != 0 (split form): x = a, g = b, same shape as dst; the CPU ignores
//    'swapped' in this form.
//  - has_b == 0 (fused form): each row of a holds 2*nc values (nc = ne0(dst));
//    x is the first half and g the second, or the other way round when swapped.
//  - SWIGLU: silu(x)*g; for each full group of 8 elements of a row the CPU uses
//    its vectorised ggml_v_expf (ported below), for the row tail glibc expf
//    (replayed by gm_expf).
//  - GEGLU: fp16 table: x <= -10 -> 0, x >= 10 -> x*g, else fp16(gelu(fp16(x)))*g,
//    the table filled with glibc's tanhf (ported below as cpu_tanhf).
#pragma OPENCL FP_CONTRACT OFF

// Shared libm ports: libm.cl (prepended).
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
        y = cr_div(x, 1.0f + gm_expf(-x)) * g;
    }
    store_f32(AT(dst, c.s0, c.s1, c.s2, c.s3), y);
}

// ggml_gelu_f32 as the CPU evaluates it when filling ggml_table_gelu_f16.
inline float cpu_gelu_f32(float x) {
    const float inner = SQRT_2_OVER_PI * x * fma(GELU_COEF_A * x, x, 1.0f);
    return 0.5f * x * (1.0f + cpu_tanhf(inner));
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
