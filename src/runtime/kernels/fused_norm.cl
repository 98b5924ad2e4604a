// FusedRmsNorm (fast kernels, common.cl + this file): [a + b ->] rms_norm ->
// * w, one work-group per row, every intermediate written (the host may read
// any of them), plus the Q8_1 copy of the result for the decode matmul that
// reads it. Float sums (not the CPU backend's double), so results match it
// up to rounding.
//
// global {FN_WG, ne1, ne2*ne3}, local {FN_WG, 1, 1}. Work-items stride over
// the row (consecutive work-items, consecutive elements: coalesced), and keep
// the row in local memory where it fits (FN_LOCAL_MAX elements), so the second
// pass and the Q8_1 blocks, which span 32 elements of different work-items,
// read it from there. A row is one work-group's: one row of a decode step is
// only a few microseconds of memory traffic, so the passes must not be
// chains of dependent global loads.
//
// Every output may share memory with an input or another output (ggml's
// allocator places some ops in place), so each work-item reads an element's
// inputs before it writes its outputs, and only ever re-reads what it wrote.

#define FN_WG 256
#define FN_QK 32
#define FN_LOCAL_MAX 8192
#define FN_BATCH 8

// Both kernels' buffer arguments (PK_SIG, PK_BEGIN_BUFS in common.cl).
#define FUSED_NORM_BUFS(R, W)                                                               \
    R(const char, a) R(const char, b) W(char, sum) W(char, normed) R(const char, w)         \
    W(char, dst) W(char, q8)

#ifndef POLYCL_STEP
kernel void kernel_fused_rms_norm(PK_SIG(FUSED_NORM_BUFS)) {
    PK_BEGIN_BUFS(FUSED_NORM_BUFS)
    PK_TENSOR(a) PK_TENSOR(b) PK_INT(has_add) PK_TENSOR(sum) PK_TENSOR(normed)
    PK_TENSOR(w) PK_TENSOR(dst) PK_FLOAT(eps) PK_ULONG(q8_off) PK_INT(has_q8)
    __local float red[FN_WG];
    __local float row_vals[FN_LOCAL_MAX];
    const int lid = get_local_id(0);
    const long i1 = get_group_id(1);
    const long i2 = get_group_id(2) % dst_ne.s2;
    const long i3 = get_group_id(2) / dst_ne.s2;
    const long ne0 = dst_ne.s0;
    const int staged = ne0 <= FN_LOCAL_MAX;

    // Loads in batches of FN_BATCH before any store: the stores may alias the
    // inputs (in place), so the compiler cannot move a later load above an
    // earlier store, and one-at-a-time loads were a chain of memory latencies.
    float acc = 0.0f;
    for (long base = lid; base < ne0; base += FN_WG * FN_BATCH) {
        float xs[FN_BATCH];
        for (int k = 0; k < FN_BATCH; ++k) {
            const long i0 = min(base + k * FN_WG, ne0 - 1);
            xs[k] = load_f32(AT(a, i0, i1, i2, i3));
            if (has_add) xs[k] += load_f32(AT(b, i0, i1, i2, i3));
        }
        for (int k = 0; k < FN_BATCH; ++k) {
            const long i0 = base + k * FN_WG;
            if (i0 >= ne0) break;
            if (has_add) store_f32(AT(sum, i0, i1, i2, i3), xs[k]);
            if (staged) row_vals[i0] = xs[k];
            acc += xs[k] * xs[k];
        }
    }
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = FN_WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float scale = 1.0f / sqrt(red[0] / (float)ne0 + eps);

    for (long base = lid; base < ne0; base += FN_WG * FN_BATCH) {
        float xs[FN_BATCH], ws[FN_BATCH];
        for (int k = 0; k < FN_BATCH; ++k) {
            const long i0 = min(base + k * FN_WG, ne0 - 1);
            // Unstaged rows re-read the sum, not a: ggml may have placed the
            // sum in a's memory (an in-place add), which the first pass
            // overwrote.
            xs[k] = staged ? row_vals[i0]
                           : (has_add ? load_f32(AT(sum, i0, i1, i2, i3))
                                      : load_f32(AT(a, i0, i1, i2, i3)));
            ws[k] = load_f32(w + w_off + i0 * 4);
        }
        for (int k = 0; k < FN_BATCH; ++k) {
            const long i0 = base + k * FN_WG;
            if (i0 >= ne0) break;
            const float n = xs[k] * scale;
            const float y = n * ws[k];
            store_f32(AT(normed, i0, i1, i2, i3), n);
            store_f32(AT(dst, i0, i1, i2, i3), y);
            if (staged) row_vals[i0] = y;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // The host asks for the Q8_1 copy only for staged rows of whole blocks.
    if (has_q8 && staged) {
        const long units = ne0 / FN_QK;
        const long row = i1 + dst_ne.s1 * (i2 + dst_ne.s2 * i3);
        for (long u = lid; u < units; u += FN_WG) {
            store_q8_1_block(row_vals + u * FN_QK, q8 + q8_off + (row * units + u) * 36);
        }
    }
}
#endif // POLYCL_STEP

// The same node over several work-groups per row, for rows whose outputs
// share no memory with the inputs a and b (the host checks): work-group g
// writes elements [g*FW_WG, (g+1)*FW_WG) and the Q8_1 blocks among them, and
// sums the squares of the whole row itself (a few microseconds of L2 reads,
// where one work-group per row left the GPU idle behind one chain of loads).
// Other groups read every element of a and b, which is why no output may
// alias them.
//
// global {FW_WG * ceil(ne0 / FW_WG), ne1, ne2*ne3}, local {FW_WG, 1, 1}.
// The step program runs it on its 128-wide work-groups: twice the groups.
#ifdef POLYCL_STEP
#define FW_WG 128
#else
#define FW_WG 256
#endif
#define FW_WARPS (FW_WG / 32)

kernel void kernel_fused_rms_norm_wide(PK_SIG(FUSED_NORM_BUFS)) {
    PK_BEGIN_BUFS(FUSED_NORM_BUFS)
    PK_TENSOR(a) PK_TENSOR(b) PK_INT(has_add) PK_TENSOR(sum) PK_TENSOR(normed)
    PK_TENSOR(w) PK_TENSOR(dst) PK_FLOAT(eps) PK_ULONG(q8_off) PK_INT(has_q8)
    LOCAL_ARRAY(float, red, FW_WG);
    LOCAL_ARRAY(float, warps, FW_WARPS);
    const int lid = get_local_id(0);
    const int lane = lid % 32, warp = lid / 32;
    const long i1 = get_group_id(1);
    const long i2 = get_group_id(2) % dst_ne.s2;
    const long i3 = get_group_id(2) / dst_ne.s2;
    const long ne0 = dst_ne.s0;
    const long e = get_group_id(0) * FW_WG + lid;
    const int own = e < ne0;
    const long ec = own ? e : ne0 - 1;

    // This work-item's element and weight go out with the row's loads.
    float x = load_f32(AT(a, ec, i1, i2, i3));
    if (has_add) x += load_f32(AT(b, ec, i1, i2, i3));
    const float wv = load_f32(w + w_off + ec * 4);
    float acc = 0.0f;
    for (long base = lid; base < ne0; base += FW_WG * FN_BATCH) {
        float xs[FN_BATCH];
#pragma unroll
        for (int k = 0; k < FN_BATCH; ++k) {
            const long i0 = min(base + k * FW_WG, ne0 - 1);
            xs[k] = load_f32(AT(a, i0, i1, i2, i3));
            if (has_add) xs[k] += load_f32(AT(b, i0, i1, i2, i3));
        }
#pragma unroll
        for (int k = 0; k < FN_BATCH; ++k) {
            if (base + k * FW_WG < ne0) acc += xs[k] * xs[k];
        }
    }
    const float ws = warp_sum(acc, red + warp * 32);
    if (lane == 0) warps[warp] = ws;
    barrier(CLK_LOCAL_MEM_FENCE);
    float total = 0.0f;
    for (int i = 0; i < FW_WARPS; ++i) total += warps[i];
    const float scale = 1.0f / sqrt(total / (float)ne0 + eps);

    const float n = x * scale;
    const float y = n * wv;
    if (own) {
        if (has_add) store_f32(AT(sum, e, i1, i2, i3), x);
        store_f32(AT(normed, e, i1, i2, i3), n);
        store_f32(AT(dst, e, i1, i2, i3), y);
    }
    // One Q8_1 block per warp, the same bytes as store_q8_1_block: d =
    // amax / 127, q = rint(y / d); the sum of q is exact in float.
    if (has_q8) {
        const float amax = warp_max(own ? fabs(y) : 0.0f, red + warp * 32);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const int qi = (int)rint(y * id);
        const float qsum = warp_sum(own ? (float)qi : 0.0f, red + warp * 32);
        if (own) {
            const long units = ne0 / FN_QK;
            const long row = i1 + dst_ne.s1 * (i2 + dst_ne.s2 * i3);
            __global char *blk = q8 + q8_off + (row * units + e / FN_QK) * 36;
            blk[4 + lane] = (char)qi;
            if (lane == 0) {
                store_f16(blk, d);
                store_f16(blk + 2, d * qsum);
            }
        }
    }
}
