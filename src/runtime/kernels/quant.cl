// Quant block layouts and decoders shared by mul_mat.cl and flash_attn.cl.
// Compiled as common.cl + quant.cl + <program>.cl.
//
// Blocks follow ggml-common.h byte for byte. Weight blocks are only 2-byte
// aligned inside a tensor (18-, 34-, 210-byte blocks), so every field is read
// with byte or ushort loads, never with wider types. Fields are addressed by
// byte offset (no structs: OpenCL C 1.2 has no portable packed layout).
//
// Numerics: these programs reproduce ggml's CPU backend (x86 build with AVX2,
// FMA and F16C) bit for bit where the CPU's own operation order is
// deterministic. They rely on IEEE single precision: build them WITHOUT
// -cl-fast-relaxed-math, -cl-unsafe-math-optimizations, -cl-mad-enable or
// -cl-finite-math-only. Contraction of a*b+c into fused multiply-adds is
// switched off for the whole program here (and again in each file, in case they
// are ever compiled on their own); every fused multiply-add the CPU performs is
// an explicit fma().
#pragma OPENCL FP_CONTRACT OFF

#define QK4_0 32
#define QK8_0 32
#define QK8_1 32
#define QK_K  256

// block_q4_0: half d @0; u8 qs[16] @2 (element j: low nibble of qs[j], j+16: high nibble)
#define Q4_0_BYTES 18
// block_q8_0: half d @0; i8 qs[32] @2
#define Q8_0_BYTES 34
// block_q8_1: half d @0; half s @2 (s = d*sum(qs)); i8 qs[32] @4
#define Q8_1_BYTES 36
// block_q4_K: half d @0; half dmin @2; u8 scales[12] @4; u8 qs[128] @16
#define Q4_K_BYTES 144
// block_q6_K: u8 ql[128] @0; u8 qh[64] @128; i8 scales[16] @192; half d @208
#define Q6_K_BYTES 210
// block_q8_K: float d @0; i8 qs[256] @4; i16 bsums[16] @260
#define Q8_K_BYTES 292

// ---------------------------------------------------------------------------
// Byte-safe loads and stores (2-byte alignment at most)
// ---------------------------------------------------------------------------

inline uint qk_u8(const __global char *p) { return (uint)(*(const __global uchar *)p); }
inline int  qk_i8(const __global char *p) { return (int)(*p); }
inline uint qk_u16(const __global char *p) { return (uint)(*(const __global ushort *)p); }
inline int  qk_i16(const __global char *p) { return (int)(*(const __global short *)p); }
// A float stored at a 2-byte aligned address.
inline float qk_f32(const __global char *p) {
    const __global ushort *h = (const __global ushort *)p;
    return as_float((uint)h[0] | ((uint)h[1] << 16));
}
inline void qk_store_f32(__global char *p, float v) {
    __global ushort *h = (__global ushort *)p;
    const uint u = as_uint(v);
    h[0] = (ushort)(u & 0xffffu);
    h[1] = (ushort)(u >> 16);
}
inline void qk_store_i16(__global char *p, int v) { *(__global short *)p = (short)v; }

// ggml's horizontal sum of one __m256 (hsum_float_8 in arch/x86/quants.c,
// hsum(__m256) in llamafile/sgemm.cpp): ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)).
inline float qk_hsum8(float x0, float x1, float x2, float x3,
                      float x4, float x5, float x6, float x7) {
    const float t0 = x0 + x4, t1 = x1 + x5, t2 = x2 + x6, t3 = x3 + x7;
    return (t0 + t2) + (t1 + t3);
}

// ---------------------------------------------------------------------------
// Q4_0
// ---------------------------------------------------------------------------
inline float q4_0_d(const __global char *b) { return load_f16(b); }
// unsigned 4-bit code of element e (0..31)
inline int q4_0_code(const __global char *b, int e) {
    const uint byte = qk_u8(b + 2 + (e & 15));
    return (int)((e < 16) ? (byte & 0xFu) : (byte >> 4));
}
// dequantized value, as dequantize_row_q4_0: (code - 8) * d
inline float q4_0_value(const __global char *b, int e) {
    return (float)(q4_0_code(b, e) - 8) * q4_0_d(b);
}

// ---------------------------------------------------------------------------
// Q8_0 / Q8_1
// ---------------------------------------------------------------------------
inline float q8_0_d(const __global char *b) { return load_f16(b); }
inline int   q8_0_q(const __global char *b, int e) { return qk_i8(b + 2 + e); }
inline float q8_0_value(const __global char *b, int e) { return (float)q8_0_q(b, e) * q8_0_d(b); }

inline float q8_1_d(const __global char *b) { return load_f16(b); }
inline float q8_1_s(const __global char *b) { return load_f16(b + 2); }
inline int   q8_1_q(const __global char *b, int e) { return qk_i8(b + 4 + e); }

// ---------------------------------------------------------------------------
// Q4_K: 8 sub-blocks of 32; sub-block j has a 6-bit scale and min
// (get_scale_min_k4). Element 32*j + l: nibble (j & 1) of qs[32*(j/2) + l].
// value = d*sc*q - dmin*m
// ---------------------------------------------------------------------------
inline float q4_K_d(const __global char *b)    { return load_f16(b); }
inline float q4_K_dmin(const __global char *b) { return load_f16(b + 2); }
inline void q4_K_scale_min(const __global char *b, int j, int *sc, int *m) {
    const __global char *q = b + 4;
    if (j < 4) {
        *sc = (int)(qk_u8(q + j) & 63u);
        *m  = (int)(qk_u8(q + j + 4) & 63u);
    } else {
        *sc = (int)((qk_u8(q + j + 4) & 0xFu) | ((qk_u8(q + j - 4) >> 6) << 4));
        *m  = (int)((qk_u8(q + j + 4) >> 4)   | ((qk_u8(q + j)     >> 6) << 4));
    }
}
// 4-bit code of element e (0..255)
inline int q4_K_code(const __global char *b, int e) {
    const int j = e >> 5, l = e & 31;
    const uint byte = qk_u8(b + 16 + 32 * (j >> 1) + l);
    return (int)((j & 1) ? (byte >> 4) : (byte & 0xFu));
}
// as dequantize_row_q4_K: (d*sc)*q - (dmin*m)
inline float q4_K_value(const __global char *b, int e) {
    int sc, m;
    q4_K_scale_min(b, e >> 5, &sc, &m);
    const float d1 = q4_K_d(b) * (float)sc;
    const float m1 = q4_K_dmin(b) * (float)m;
    return d1 * (float)q4_K_code(b, e) - m1;
}

// ---------------------------------------------------------------------------
// Q6_K: 16 sub-blocks of 16 with int8 scales. Element e = 128*n + 32*k + l
// (n = 0..1, k = 0..3, l = 0..31): low 4 bits from ql[64n + l + 32*(k&1)]
// (low nibble for k < 2, high nibble for k >= 2), high 2 bits from
// qh[32n + l] >> 2k; scale index 8n + 2k + l/16 = e/16.
// value = d * sc * (q - 32)
// ---------------------------------------------------------------------------
inline float q6_K_d(const __global char *b) { return load_f16(b + 208); }
inline int   q6_K_scale(const __global char *b, int is) { return qk_i8(b + 192 + is); }
// unsigned 6-bit code (0..63) of element e
inline int q6_K_code(const __global char *b, int e) {
    const int n = e >> 7, k = (e >> 5) & 3, l = e & 31;
    const uint lo = qk_u8(b + 64 * n + l + 32 * (k & 1));
    const uint hi = qk_u8(b + 128 + 32 * n + l);
    const uint q4 = (k < 2) ? (lo & 0xFu) : (lo >> 4);
    return (int)(q4 | (((hi >> (2 * k)) & 3u) << 4));
}
// as dequantize_row_q6_K: (d * sc) * (q - 32)
inline float q6_K_value(const __global char *b, int e) {
    return q6_K_d(b) * (float)q6_K_scale(b, e >> 4) * (float)(q6_K_code(b, e) - 32);
}

// ---------------------------------------------------------------------------
// Q8_K
// ---------------------------------------------------------------------------
inline float q8_K_d(const __global char *b) { return qk_f32(b); }
inline int   q8_K_q(const __global char *b, int e) { return qk_i8(b + 4 + e); }
inline int   q8_K_bsum(const __global char *b, int i) { return qk_i16(b + 260 + 2 * i); }
