// FusedRmsNorm (fast kernels, common.cl + this file): [a + b ->] rms_norm ->
// * w, one work-group per row, every intermediate written (the host may read
// any of them), plus the Q8_1 copy of the result for the decode matmul that
// reads it. Float sums (not the CPU backend's double), so results match it
// up to rounding.
//
// global {FN_WG, ne1, ne2*ne3}, local {FN_WG, 1, 1}. Each work-item owns whole
// 32-element blocks of its row (single elements when ne0 % 32 != 0) in both
// passes, so it only re-reads what it wrote itself and a block's Q8_1 copy is
// made by the work-item that computed it. Every output may share memory with
// an input or another output (ggml's allocator places some ops in place), so
// each work-item reads an element's inputs before it writes its outputs.

#define FN_WG 128
#define FN_QK 32

inline float fn_input(const __global char *a, ulong a_off, long4 a_ne, ulong4 a_nb,
                      const __global char *b, ulong b_off, long4 b_ne, ulong4 b_nb, int has_add,
                      long i0, long i1, long i2, long i3) {
    float x = load_f32(AT(a, i0, i1, i2, i3));
    if (has_add) x += load_f32(AT(b, i0, i1, i2, i3));
    return x;
}

kernel void kernel_fused_rms_norm(CTENSOR(a), CTENSOR(b), int has_add, TENSOR(sum),
                                  TENSOR(normed), CTENSOR(w), TENSOR(dst), float eps,
                                  __global char *q8, ulong q8_off, int has_q8) {
    __local float red[FN_WG];
    const int lid = get_local_id(0);
    const long i1 = get_group_id(1);
    const long i2 = get_group_id(2) % dst_ne.s2;
    const long i3 = get_group_id(2) / dst_ne.s2;
    const long ne0 = dst_ne.s0;
    const long unit = (ne0 % FN_QK == 0) ? FN_QK : 1;
    const long units = ne0 / unit;

    float acc = 0.0f;
    for (long u = lid; u < units; u += FN_WG) {
        for (long j = 0; j < unit; ++j) {
            const long i0 = u * unit + j;
            const float x = fn_input(a, a_off, a_ne, a_nb, b, b_off, b_ne, b_nb, has_add, i0,
                                     i1, i2, i3);
            if (has_add) store_f32(AT(sum, i0, i1, i2, i3), x);
            acc += x * x;
        }
    }
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = FN_WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float scale = 1.0f / sqrt(red[0] / (float)ne0 + eps);

    const long row = i1 + dst_ne.s1 * (i2 + dst_ne.s2 * i3);
    for (long u = lid; u < units; u += FN_WG) {
        float amax = 0.0f;
        for (long j = 0; j < unit; ++j) {
            const long i0 = u * unit + j;
            // The sum, where there is one, is re-read: ggml may have placed it
            // in a's memory (an in-place add), which pass 1 overwrote.
            const float x = has_add ? load_f32(AT(sum, i0, i1, i2, i3))
                                    : load_f32(AT(a, i0, i1, i2, i3));
            const float n = x * scale;
            const float y = n * load_f32(w + w_off + i0 * 4);
            store_f32(AT(normed, i0, i1, i2, i3), n);
            store_f32(AT(dst, i0, i1, i2, i3), y);
            amax = fmax(amax, fabs(y));
        }
        if (has_q8 && unit == FN_QK) {
            __global char *blk = q8 + q8_off + (row * units + u) * 36;
            const float d = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            int qsum = 0;
            for (long j = 0; j < FN_QK; ++j) {
                const long i0 = u * unit + j;
                const int q = (int)rint(load_f32(AT(dst, i0, i1, i2, i3)) * id);
                blk[4 + j] = (char)q;
                qsum += q;
            }
            store_f16(blk, d);
            store_f16(blk + 2, d * (float)qsum);
        }
    }
}
