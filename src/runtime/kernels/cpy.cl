// CPY / CONT / DUP between F32 and F16 (ggml_compute_forward_dup_flt).
// Element i is taken in logical row-major order from src and written at the
// same logical position of dst; the two shapes may differ (element counts are
// equal) and both may be arbitrary strided views.
// F32 -> F16 rounds to nearest even (the CPU's F16C _cvtss_sh(x, 0)).
// Same-type copies move raw bits, so any 4-byte (or 2-byte) type copies exactly.
// Q8_0 and Q4_0 rows copy to F32 or F16 of the same shape, a block of 32 a
// work-item, as dequantize_row_q8_0 / _q4_0 compute them (float(q) * d);
// flash attention takes its quantized K and V caches through the F16 form
// (plan/flash_attn.rs `dequantized`).

kernel void kernel_cpy_f32_f32(CTENSOR(src), TENSOR(dst)) {
    const long i = get_global_id(0);
    if (i >= nelements4(src_ne)) return;
    const long4 s = unravel4(i, src_ne);
    const long4 d = unravel4(i, dst_ne);
    *(__global uint *) AT(dst, d.s0, d.s1, d.s2, d.s3) =
        *(__global const uint *) AT(src, s.s0, s.s1, s.s2, s.s3);
}

kernel void kernel_cpy_f32_f16(CTENSOR(src), TENSOR(dst)) {
    const long i = get_global_id(0);
    if (i >= nelements4(src_ne)) return;
    const long4 s = unravel4(i, src_ne);
    const long4 d = unravel4(i, dst_ne);
    store_f16(AT(dst, d.s0, d.s1, d.s2, d.s3), load_f32(AT(src, s.s0, s.s1, s.s2, s.s3)));
}

kernel void kernel_cpy_f16_f32(CTENSOR(src), TENSOR(dst)) {
    const long i = get_global_id(0);
    if (i >= nelements4(src_ne)) return;
    const long4 s = unravel4(i, src_ne);
    const long4 d = unravel4(i, dst_ne);
    store_f32(AT(dst, d.s0, d.s1, d.s2, d.s3), load_f16(AT(src, s.s0, s.s1, s.s2, s.s3)));
}

kernel void kernel_cpy_f16_f16(CTENSOR(src), TENSOR(dst)) {
    const long i = get_global_id(0);
    if (i >= nelements4(src_ne)) return;
    const long4 s = unravel4(i, src_ne);
    const long4 d = unravel4(i, dst_ne);
    *(__global ushort *) AT(dst, d.s0, d.s1, d.s2, d.s3) =
        *(__global const ushort *) AT(src, s.s0, s.s1, s.s2, s.s3);
}

// The block of 32 elements this work-item copies: `blk`, its source bytes,
// and `out`, its first element in dst (same shape as src).
#define CPY_Q_BLOCK                                                            \
    const long4 q_ne = (long4)(src_ne.s0 / 32, src_ne.s1, src_ne.s2, src_ne.s3); \
    const long ib = get_global_id(0);                                          \
    if (ib >= nelements4(q_ne)) return;                                        \
    const long4 c = unravel4(ib, q_ne);                                        \
    const __global char *blk = AT(src, c.s0, c.s1, c.s2, c.s3);                \
    __global char *out = AT(dst, c.s0 * 32, c.s1, c.s2, c.s3);

inline void cpy_q8_0_values(const __global char *blk, float *v) {
    const float d = q8_0_d(blk);
    for (int e = 0; e < 32; ++e) v[e] = (float)q8_0_q(blk, e) * d;
}

inline void cpy_q4_0_values(const __global char *blk, float *v) {
    const float d = q4_0_d(blk);
    for (int e = 0; e < 32; ++e) v[e] = (float)(q4_0_code(blk, e) - 8) * d;
}

inline void cpy_block_f32(__global char *out, ulong stride, const float *v) {
    for (int e = 0; e < 32; ++e) store_f32(out + e * stride, v[e]);
}

// Packed F16 rows (the flash-attention operands) take two 16-wide stores.
inline void cpy_block_f16(__global char *out, ulong stride, const float *v) {
    if (stride == 2) {
        __global half *h = (__global half *)out;
        vstore_half16_rte((float16)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7],
                                    v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]), 0, h);
        vstore_half16_rte((float16)(v[16], v[17], v[18], v[19], v[20], v[21], v[22], v[23],
                                    v[24], v[25], v[26], v[27], v[28], v[29], v[30], v[31]), 1, h);
        return;
    }
    for (int e = 0; e < 32; ++e) store_f16(out + e * stride, v[e]);
}

kernel void kernel_cpy_q8_0_f32(CTENSOR(src), TENSOR(dst)) {
    CPY_Q_BLOCK
    float v[32];
    cpy_q8_0_values(blk, v);
    cpy_block_f32(out, dst_nb.s0, v);
}

kernel void kernel_cpy_q8_0_f16(CTENSOR(src), TENSOR(dst)) {
    CPY_Q_BLOCK
    float v[32];
    cpy_q8_0_values(blk, v);
    cpy_block_f16(out, dst_nb.s0, v);
}

kernel void kernel_cpy_q4_0_f32(CTENSOR(src), TENSOR(dst)) {
    CPY_Q_BLOCK
    float v[32];
    cpy_q4_0_values(blk, v);
    cpy_block_f32(out, dst_nb.s0, v);
}

kernel void kernel_cpy_q4_0_f16(CTENSOR(src), TENSOR(dst)) {
    CPY_Q_BLOCK
    float v[32];
    cpy_q4_0_values(blk, v);
    cpy_block_f16(out, dst_nb.s0, v);
}
