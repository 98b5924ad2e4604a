// MUL_MAT by the normalized Sylvester Hadamard matrix (the host's
// GGML_HINT_SRC0_IS_HADAMARD; llama rotates q, k, v and the attention's output
// so with quantized KV caches): the fast Walsh-Hadamard transform of each
// row, as ggml_compute_forward_fwht computes it: every element times
// 1/sqrt(n) first, then butterflies (u + v, u - v) at distances 1, 2, 4, ...,
// so every sum is the CPU's, in its order. A work-group a row, held in local
// memory; n a power of two up to HD_MAX (frontend: `hadamard_applies`).
// With has_q8, the row's Q8_1 blocks too (kernel_quantize_q8_1_fast's
// bytes, store_q8_1_block), where the next matmul reads them (the rotation
// of the attention's output before the O projection): one launch fewer.
#define HD_WG 64
#define HD_MAX 4096

kernel void kernel_hadamard_f32(CTENSOR(x), TENSOR(dst), float scale, int has_q8,
                                __global char *q8, ulong q8_off) {
    __local float h[HD_MAX];
    const int lid = get_local_id(0);
    const int n = (int)x_ne.s0;
    const long g = get_group_id(1);
    const long i1 = g % x_ne.s1, i2 = (g / x_ne.s1) % x_ne.s2, i3 = g / (x_ne.s1 * x_ne.s2);
    const __global char *row = AT(x, 0, i1, i2, i3);
    __global char *out = AT(dst, 0, i1, i2, i3);
    for (int i = lid; i < n; i += HD_WG) h[i] = load_f32(row + i * x_nb.s0) * scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    fwht_runs(h, n, n, HD_WG);
    for (int i = lid; i < n; i += HD_WG) store_f32(out + i * dst_nb.s0, h[i]);
    if (has_q8) {
        for (int b = lid; b < n / 32; b += HD_WG)
            store_q8_1_block(h + 32 * b, q8 + q8_off + ((ulong)g * (n / 32) + b) * 36);
    }
}
