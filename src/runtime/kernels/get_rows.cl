// GET_ROWS (ops.cpp ggml_compute_forward_get_rows_*): dst is F32,
//   dst[i0, i10, i11, i12] = a[i0, rows[i10, i11, i12], i11, i12]
// global {ne0(dst), ne1(dst), ne2(dst)*ne3(dst)}.
// Quantized rows are decoded element by element exactly as ggml-quants.c's
// dequantize_row_* (ggml-base is built without FMA, so no contraction here).
// Blocks are only 2-byte aligned: every field is read with byte loads.
#pragma OPENCL FP_CONTRACT OFF

inline float gr_half(const __global uchar *p) {
    const ushort h = (ushort)((ushort) p[0] | ((ushort) p[1] << 8));
    return vload_half(0, (const __private half *) &h);
}

// Row r of the table for dst coords (i11, i12).
inline const __global uchar *gr_row(CTENSOR(a), CTENSOR(rows), long i10, long i11, long i12) {
    const int r = *(const __global int *) AT(rows, i10, i11, i12, 0);
    return (const __global uchar *) AT(a, 0, r, i11, i12);
}

#define GR_COORDS                                                   \
    const long i0  = get_global_id(0);                              \
    const long i10 = get_global_id(1);                              \
    const long i11 = get_global_id(2) % dst_ne.s2;                  \
    const long i12 = get_global_id(2) / dst_ne.s2;                  \
    if (i0 >= dst_ne.s0 || i10 >= dst_ne.s1 || i12 >= dst_ne.s3) return;

kernel void kernel_get_rows_f32(CTENSOR(a), CTENSOR(rows), TENSOR(dst)) {
    GR_COORDS
    const int r = *(const __global int *) AT(rows, i10, i11, i12, 0);
    // raw 32-bit copy: also serves I32 tables
    *(__global uint *) AT(dst, i0, i10, i11, i12) = *(const __global uint *) AT(a, i0, r, i11, i12);
}

kernel void kernel_get_rows_f16(CTENSOR(a), CTENSOR(rows), TENSOR(dst)) {
    GR_COORDS
    const int r = *(const __global int *) AT(rows, i10, i11, i12, 0);
    store_f32(AT(dst, i0, i10, i11, i12), load_f16(AT(a, i0, r, i11, i12)));
}

// Q4_0: 18 bytes {half d; u8 qs[16]}, 32 values:
// y[j] = ((qs[j] & 15) - 8)*d, y[j+16] = ((qs[j] >> 4) - 8)*d
kernel void kernel_get_rows_q4_0(CTENSOR(a), CTENSOR(rows), TENSOR(dst)) {
    GR_COORDS
    const __global uchar *blk = gr_row(a, a_off, a_ne, a_nb, rows, rows_off, rows_ne, rows_nb, i10, i11, i12)
                                + (i0 / 32) * 18;
    const int   j = (int)(i0 % 32);
    const float d = gr_half(blk);
    const uchar q = blk[2 + (j & 15)];
    const int   x = (j < 16 ? (q & 0x0F) : (q >> 4)) - 8;
    store_f32(AT(dst, i0, i10, i11, i12), (float) x * d);
}

// Q8_0: 34 bytes {half d; i8 qs[32]}: y[j] = qs[j]*d
kernel void kernel_get_rows_q8_0(CTENSOR(a), CTENSOR(rows), TENSOR(dst)) {
    GR_COORDS
    const __global uchar *blk = gr_row(a, a_off, a_ne, a_nb, rows, rows_off, rows_ne, rows_nb, i10, i11, i12)
                                + (i0 / 32) * 34;
    const int   j = (int)(i0 % 32);
    const float d = gr_half(blk);
    const int   x = (int)(char) blk[2 + j];
    store_f32(AT(dst, i0, i10, i11, i12), (float) x * d);
}

// Q4_K: 144 bytes {half d; half dmin; u8 scales[12]; u8 qs[128]}, 256 values in
// 4 chunks of 64; chunk c uses sub-blocks 2c (low nibbles of qs[32c..32c+31]) and
// 2c+1 (high nibbles): y = d*sc*q - dmin*m (get_scale_min_k4).
kernel void kernel_get_rows_q4_k(CTENSOR(a), CTENSOR(rows), TENSOR(dst)) {
    GR_COORDS
    const __global uchar *blk = gr_row(a, a_off, a_ne, a_nb, rows, rows_off, rows_ne, rows_nb, i10, i11, i12)
                                + (i0 / 256) * 144;
    const int e  = (int)(i0 % 256);
    const int c  = e / 64;
    const int l  = e % 64;
    const int is = 2*c + (l >= 32 ? 1 : 0);

    const float d    = gr_half(blk);
    const float dmin = gr_half(blk + 2);
    const __global uchar *scales = blk + 4;
    const __global uchar *qs     = blk + 16;

    uchar sc, m;
    if (is < 4) {
        sc = scales[is] & 63;
        m  = scales[is + 4] & 63;
    } else {
        sc = (scales[is + 4] & 0xF) | ((scales[is - 4] >> 6) << 4);
        m  = (scales[is + 4] >> 4)  | ((scales[is]     >> 6) << 4);
    }
    const float d1 = d * (float) sc;
    const float m1 = dmin * (float) m;
    const uchar qb = qs[32*c + (l & 31)];
    const int   q  = l < 32 ? (qb & 0xF) : (qb >> 4);
    store_f32(AT(dst, i0, i10, i11, i12), d1 * (float) q - m1);
}

// Q6_K: 210 bytes {u8 ql[128]; u8 qh[64]; i8 scales[16]; half d}, 256 values in
// 2 halves of 128; in a half, quarter t (32 values, l = 0..31) takes
// ql[l + 32*(t&1)] low (t<2) or high (t>=2) nibble, bits 2t..2t+1 of qh[l],
// scale scales[l/16 + 2t]: y = d*sc*(q - 32).
kernel void kernel_get_rows_q6_k(CTENSOR(a), CTENSOR(rows), TENSOR(dst)) {
    GR_COORDS
    const __global uchar *blk = gr_row(a, a_off, a_ne, a_nb, rows, rows_off, rows_ne, rows_nb, i10, i11, i12)
                                + (i0 / 256) * 210;
    const int e = (int)(i0 % 256);
    const int n = e / 128;
    const int w = e % 128;
    const int t = w / 32;
    const int l = w % 32;

    const __global uchar *ql = blk + 64*n;
    const __global uchar *qh = blk + 128 + 32*n;
    const __global uchar *sc = blk + 192 + 8*n;
    const float d = gr_half(blk + 208);

    const uchar lb = ql[l + 32*(t & 1)];
    const int   lo = (t < 2) ? (lb & 0xF) : (lb >> 4);
    const int   hi = (qh[l] >> (2*t)) & 3;
    const int   q  = (int)(char)(uchar)(lo | (hi << 4)) - 32;
    const int   s  = (int)(char) sc[l/16 + 2*t];
    store_f32(AT(dst, i0, i10, i11, i12), d * (float) s * (float) q);
}
