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
    const long4 qc = unravel4(ib, q_ne);                                       \
    const __global char *blk = AT(src, qc.s0, qc.s1, qc.s2, qc.s3);            \
    __global char *out = AT(dst, qc.s0 * 32, qc.s1, qc.s2, qc.s3);

// Elements 8c .. 8c + 7 of a block (Q4_0: low nibbles of its 16 bytes are
// elements 0-15, high ones 16-31).
inline float8 cpy_q8_0_8(const __global char *blk, int c) {
    return convert_float8(vload8(0, blk + 2 + 8 * c)) * q8_0_d(blk);
}

inline float8 cpy_q4_0_8(const __global char *blk, int c) {
    const uchar8 b = vload8(0, (const __global uchar *)(blk + 2 + 8 * (c & 1)));
    const uchar8 code = c < 2 ? (b & (uchar8)0xF) : (b >> (uchar8)4);
    return convert_float8(convert_int8(code) - 8) * q4_0_d(blk);
}

// Stores them at out + 8c elements of `stride` bytes, as F16 or F32;
// packed rows at once.
inline void cpy_store8(__global char *out, ulong stride, int c, float8 v, const int f16) {
    if (f16 && stride == 2) {
        vstore_half8_rte(v, c, (__global half *)out);
        return;
    }
    if (!f16 && stride == 4) {
        vstore8(v, c, (__global float *)out);
        return;
    }
    float e[8];
    vstore8(v, 0, e);
    for (int i = 0; i < 8; ++i) {
        __global char *p = out + (8 * c + i) * stride;
        if (f16) store_f16(p, e[i]); else store_f32(p, e[i]);
    }
}

#define CPY_Q_KERNEL(NAME, VALUES8, F16)                                       \
    kernel void NAME(CTENSOR(src), TENSOR(dst)) {                              \
        CPY_Q_BLOCK                                                            \
        for (int c = 0; c < 4; ++c) cpy_store8(out, dst_nb.s0, c, VALUES8(blk, c), F16); \
    }
CPY_Q_KERNEL(kernel_cpy_q8_0_f32, cpy_q8_0_8, 0)
CPY_Q_KERNEL(kernel_cpy_q8_0_f16, cpy_q8_0_8, 1)
CPY_Q_KERNEL(kernel_cpy_q4_0_f32, cpy_q4_0_8, 0)
CPY_Q_KERNEL(kernel_cpy_q4_0_f16, cpy_q4_0_8, 1)
