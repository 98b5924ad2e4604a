// Unary F32 ops: SCALE, SILU, GELU, GELU_QUICK, reproducing the CPU backend
// (ops.cpp / vec.h / vec.cpp, x86 AVX2+FMA build) element for element:
//  - SCALE: dst = a*s when b == 0, else fma(a, s, b) (ggml_vec_mad1_f32 uses FMA).
//  - SILU: x/(1+exp(-x)); for each full group of 8 elements of a row the CPU uses
//    its vectorised ggml_v_expf (ported below), for the row tail glibc expf
//    (replayed by gm_expf).
//  - GELU: the CPU uses an fp16 lookup table (GGML_GELU_FP16): x <= -10 -> 0,
//    x >= 10 -> x, else fp16(gelu(fp16(x))) with the tanh approximation, where the
//    table was filled with glibc's tanhf (ported below as cpu_tanhf).
//  - GELU_QUICK: also an fp16 table, for every x (no clamp):
//    fp16(x' * (1/(1 + expf(-1.702*x')))) with x' = fp16(x).
#pragma OPENCL FP_CONTRACT OFF

// Shared libm ports: libm.cl (prepended).
#define GELU_QUICK_COEF (-1.702f)
#define SQRT_2_OVER_PI  0.79788456080286535587989211986876f

kernel void kernel_scale_f32(CTENSOR(a), TENSOR(dst), float s, float b) {
    const long i = get_global_id(0);
    if (i >= nelements4(dst_ne)) return;
    const long4 c = unravel4(i, dst_ne);
    const float x = load_f32(AT(a, c.s0, c.s1, c.s2, c.s3));
    float y;
    if (b == 0.0f) {
        y = x * s;
    } else {
        y = fma(x, s, b);
    }
    store_f32(AT(dst, c.s0, c.s1, c.s2, c.s3), y);
}

kernel void kernel_silu_f32(CTENSOR(a), TENSOR(dst)) {
    const long i = get_global_id(0);
    if (i >= nelements4(dst_ne)) return;
    const long4 c = unravel4(i, dst_ne);
    const float x = load_f32(AT(a, c.s0, c.s1, c.s2, c.s3));
    const float ex = (c.s0 < (dst_ne.s0 & ~7L)) ? cpu_v_expf(0.0f - x) : gm_expf(-x);
    store_f32(AT(dst, c.s0, c.s1, c.s2, c.s3), cr_div(x, 1.0f + ex));
}

// ggml_gelu_f32 as the CPU evaluates it when filling ggml_table_gelu_f16.
inline float cpu_gelu_f32(float x) {
    const float inner = SQRT_2_OVER_PI * x * fma(GELU_COEF_A * x, x, 1.0f);
    return 0.5f * x * (1.0f + cpu_tanhf(inner));
}

kernel void kernel_gelu_f32(CTENSOR(a), TENSOR(dst)) {
    const long i = get_global_id(0);
    if (i >= nelements4(dst_ne)) return;
    const long4 c = unravel4(i, dst_ne);
    const float x = load_f32(AT(a, c.s0, c.s1, c.s2, c.s3));
    float y;
    if (x <= -10.0f) {
        y = 0.0f;
    } else if (x >= 10.0f) {
        y = x;
    } else {
        y = round_f16(cpu_gelu_f32(round_f16(x)));
    }
    store_f32(AT(dst, c.s0, c.s1, c.s2, c.s3), y);
}

kernel void kernel_gelu_quick_f32(CTENSOR(a), TENSOR(dst)) {
    const long i = get_global_id(0);
    if (i >= nelements4(dst_ne)) return;
    const long4 c = unravel4(i, dst_ne);
    const float x = round_f16(load_f32(AT(a, c.s0, c.s1, c.s2, c.s3)));
    const float y = x * cr_div(1.0f, 1.0f + gm_expf(GELU_QUICK_COEF * x));
    store_f32(AT(dst, c.s0, c.s1, c.s2, c.s3), round_f16(y));
}
