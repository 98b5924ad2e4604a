// MUL_MAT by the normalized Sylvester Hadamard matrix (the host's
// GGML_HINT_SRC0_IS_HADAMARD; llama rotates q, k, v and the attention's output
// so with quantized KV caches): the fast Walsh-Hadamard transform of each
// row, as ggml_compute_forward_fwht computes it: every element times
// 1/sqrt(n) first, then butterflies (u + v, u - v) at distances 1, 2, 4, ...,
// so every sum is the CPU's, in its order. A work-group a row, held in local
// memory; n a power of two up to HD_MAX (plan: `hadamard_applies`).
#define HD_WG 64
#define HD_MAX 4096

kernel void kernel_hadamard_f32(CTENSOR(x), TENSOR(dst), float scale) {
    __local float h[HD_MAX];
    const int lid = get_local_id(0);
    const long n = x_ne.s0;
    const long4 r = unravel4(get_group_id(1), (long4)(1, x_ne.s1, x_ne.s2, x_ne.s3));
    for (long i = lid; i < n; i += HD_WG) h[i] = load_f32(AT(x, i, r.s1, r.s2, r.s3)) * scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long len = 1; len < n; len <<= 1) {
        for (long b = lid; b < n / 2; b += HD_WG) {
            const long i = (b / len) * 2 * len + b % len;
            const float u = h[i], v = h[i + len];
            h[i] = u + v;
            h[i + len] = u - v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (long i = lid; i < n; i += HD_WG) store_f32(AT(dst, i, r.s1, r.s2, r.s3), h[i]);
}
