// MUL_MAT and its activation conversions (common.cl + quant.cl + this file).
//
// These kernels reproduce ggml's CPU backend (pinned llama.cpp, x86 build with
// AVX2 + FMA + F16C, GGML_LLAMAFILE on, CPU "tiled" K-quant path on) bit for bit:
//
// * activations are converted exactly as the CPU's vec_dot_type from_float:
//   F16 weights: F32 -> F16 round-to-nearest-even (ggml_cpu_fp32_to_fp16);
//   Q4_0/Q8_0: quantize_row_q8_0 of arch/x86/quants.c (AVX2: d = amax/127,
//   id = 127/amax, q = round-half-even(x*id)), stored as Q8_1 blocks whose extra
//   s = fp16(d*sum(q)) with the unrounded float d (as x86 quantize_row_q8_1);
//   Q4_K/Q6_K: quantize_row_q8_K_ref (the x86 build uses the reference).
// * every dot product follows the CPU's own lane structure, in which each lane
//   is a sequential chain of fused multiply-adds and the lanes are summed in a
//   fixed tree. Which CPU routine runs depends on the shape, so each kernel picks
//   the same routine from its arguments:
//     F32:  ne11 >= 2, src1 contiguous, ne00 % 8 == 0, ne01 % 4 == 0 -> llamafile
//           tinyBLAS (8 lanes, element i on lane i % 8); else ggml_vec_dot_f32
//           (32 lanes, element i on lane i % 32, reduce tree, scalar tail).
//     F16:  ne11 >= 2, ne00 % 8 == 0, ne01 % 4 == 0 -> tinyBLAS; else ggml_vec_dot_f16
//           (its tail is summed in double; emulated in float-float).
//     Q4_0, Q8_0: ggml_vec_dot_q{4,8}_0_q8_0 AVX2 == tinyBLAS_Q0_AVX: 8 lanes of 4
//           elements per block, acc = fma(dx*dy, isum, acc), hsum.
//     Q4_K, Q6_K: ne11 >= 8 -> the CPU tiled path (one chain over super-blocks,
//           buf = fma(d*isum [- dmin*msum], y.d, buf)); else the AVX2 vec_dot
//           (8 lanes of int sums, acc = fma(y.d*d, isum, acc); Q4_K adds a 4-lane
//           min accumulator).
//   The CPU's weight repacking (CPU_REPACK extra buffer type, Q4_0/Q4_K/IQ4_NL
//   on AVX2) and GGML_CPU_TILED_MM=0 change the CPU's routine; compare against a
//   CPU run with --no-repack and default environment.
//
// MUL_MAT launch: global {32*ne01, ne11, ne12*ne13}, local {32,1,1}; one
// work-group per output element. Work-items that the CPU's lane structure does
// not need stay idle (correctness first: faster kernels come later).

#pragma OPENCL FP_CONTRACT OFF

#define MM_WG 32

// ---------------------------------------------------------------------------
// Activation conversion kernels. Input: F32 with arbitrary strides. Output
// rows are contiguous, row r = i1 + ne1*(i2 + ne2*i3).
// ---------------------------------------------------------------------------

// global {ne0/32, ne1, ne2*ne3}: one Q8_1 block (36 bytes) per work-item.
kernel void kernel_quantize_q8_1(CTENSOR(a), __global char *q, ulong q_off) {
    const long ib = get_global_id(0);
    const long i1 = get_global_id(1);
    const long i2 = get_global_id(2) % a_ne.s2;
    const long i3 = get_global_id(2) / a_ne.s2;
    const long nb = a_ne.s0 / QK8_1;
    if (ib >= nb || i1 >= a_ne.s1 || i3 >= a_ne.s3) return;
    const long row = i1 + a_ne.s1 * (i2 + a_ne.s2 * i3);
    __global char *y = q + q_off + (ulong)(row * nb + ib) * Q8_1_BYTES;

    float amax = 0.0f;
    for (int j = 0; j < QK8_1; ++j) {
        amax = fmax(amax, fabs(load_f32(AT(a, ib * QK8_1 + j, i1, i2, i3))));
    }
    const float d  = qk_div(amax, 127.0f);
    const float id = (amax != 0.0f) ? qk_div(127.0f, amax) : 0.0f;
    uint sum = 0;  // int32 wrap-around like _mm256_add_epi32
    for (int j = 0; j < QK8_1; ++j) {
        const float v = rint(load_f32(AT(a, ib * QK8_1 + j, i1, i2, i3)) * id);
        // _mm256_cvtps_epi32: NaN / out of range -> INT_MIN; packs saturate to int8
        const int qi = (isnan(v) || fabs(v) >= 2147483648.0f) ? INT_MIN : (int)v;
        sum += (uint)qi;
        y[4 + j] = (char)clamp(qi, -128, 127);
    }
    store_f16(y, d);
    store_f16(y + 2, d * (float)(int)sum);
}

// global {ne0/256, ne1, ne2*ne3}: one Q8_K block (292 bytes) per work-item,
// as quantize_row_q8_K_ref (bsums are zeroed for an all-zero block, where the
// CPU leaves them unset; they are multiplied by d == 0 there).
kernel void kernel_quantize_q8_k(CTENSOR(a), __global char *q, ulong q_off) {
    const long ib = get_global_id(0);
    const long i1 = get_global_id(1);
    const long i2 = get_global_id(2) % a_ne.s2;
    const long i3 = get_global_id(2) / a_ne.s2;
    const long nb = a_ne.s0 / QK_K;
    if (ib >= nb || i1 >= a_ne.s1 || i3 >= a_ne.s3) return;
    const long row = i1 + a_ne.s1 * (i2 + a_ne.s2 * i3);
    __global char *y = q + q_off + (ulong)(row * nb + ib) * Q8_K_BYTES;

    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
        const float x = load_f32(AT(a, ib * QK_K + j, i1, i2, i3));
        const float ax = fabs(x);
        if (ax > amax) { amax = ax; max = x; }
    }
    if (amax == 0.0f) {
        qk_store_f32(y, 0.0f);
        for (int j = 0; j < QK_K; ++j) y[4 + j] = 0;
        for (int j = 0; j < QK_K / 16; ++j) qk_store_i16(y + 260 + 2 * j, 0);
        return;
    }
    const float iscale = qk_div(-127.0f, max);
    for (int j = 0; j < QK_K / 16; ++j) {
        int bsum = 0;
        for (int ii = 0; ii < 16; ++ii) {
            const int e = 16 * j + ii;
            // nearest_int(): round half to even (magic-number trick)
            const int v = min(127, (int)rint(iscale * load_f32(AT(a, ib * QK_K + e, i1, i2, i3))));
            y[4 + e] = (char)v;
            bsum += (int)(char)v;
        }
        qk_store_i16(y + 260 + 2 * j, bsum);
    }
    qk_store_f32(y, qk_div(1.0f, iscale));
}

// global {ne0, ne1, ne2*ne3}: F32 -> F16 (round to nearest even), contiguous rows.
kernel void kernel_convert_f16(CTENSOR(a), __global char *q, ulong q_off) {
    const long i0 = get_global_id(0);
    const long i1 = get_global_id(1);
    const long i2 = get_global_id(2) % a_ne.s2;
    const long i3 = get_global_id(2) / a_ne.s2;
    if (i0 >= a_ne.s0 || i1 >= a_ne.s1 || i3 >= a_ne.s3) return;
    const long row = i1 + a_ne.s1 * (i2 + a_ne.s2 * i3);
    store_f16(q + q_off + (ulong)(row * a_ne.s0 + i0) * 2, load_f32(AT(a, i0, i1, i2, i3)));
}

// ---------------------------------------------------------------------------
// Shared pieces of the MUL_MAT kernels
// ---------------------------------------------------------------------------

#define MM_ARGS CTENSOR(w), __global const char *act, ulong act_off, ulong4 act_nb, \
                long4 b_ne, TENSOR(dst)

// Output element (i01, i11, i12, i13); src0 batch (i02, i03) by broadcast;
// arow: start of the src1 / converted activation row.
#define MM_PROLOGUE                                                              \
    const int  lid = (int)get_local_id(0);                                       \
    const long i01 = get_group_id(0);                                            \
    const long i11 = get_global_id(1);                                           \
    const long i12 = get_global_id(2) % b_ne.s2;                                 \
    const long i13 = get_global_id(2) / b_ne.s2;                                 \
    const long i02 = i12 / (b_ne.s2 / w_ne.s2);                                  \
    const long i03 = i13 / (b_ne.s3 / w_ne.s3);                                  \
    const long n   = w_ne.s0;                                                    \
    const __global char *wrow = AT(w, 0, i01, i02, i03);                         \
    const __global char *arow = act + act_off + (ulong)i11 * act_nb.s1 +         \
                                (ulong)i12 * act_nb.s2 + (ulong)i13 * act_nb.s3;

// ggml_is_contiguous() of src1 (F32, element size 4)
inline bool mm_src1_contiguous(ulong4 nb, long4 ne) {
    ulong next = 4;
    if (ne.s0 != 1 && nb.s0 != next) return false;
    next *= (ulong)ne.s0;
    if (ne.s1 != 1) { if (nb.s1 != next) return false; next *= (ulong)ne.s1; }
    if (ne.s2 != 1) { if (nb.s2 != next) return false; next *= (ulong)ne.s2; }
    if (ne.s3 != 1) { if (nb.s3 != next) return false; }
    return true;
}

// GGML_F32x8_REDUCE over the 32 lanes of ggml_vec_dot_{f32,f16} (lane i holds
// elements i, i+32, ...): sum[0]+=sum[2], sum[1]+=sum[3], sum[0]+=sum[1], then
// lo128+hi128 and two hadds: (t0+t1)+(t2+t3). All work-items must call it.
inline float mm_reduce_vec32(__local float *sh, int lid) {
    if (lid < 16) sh[lid] = sh[lid] + sh[lid + 16];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < 8) sh[lid] = sh[lid] + sh[lid + 8];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < 4) sh[lid] = sh[lid] + sh[lid + 4];
    barrier(CLK_LOCAL_MEM_FENCE);
    return (sh[0] + sh[1]) + (sh[2] + sh[3]);
}

inline float mm_hsum8_local(__local const float *sh) {
    return qk_hsum8(sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], sh[7]);
}

inline void mm_store(TENSOR(dst), long i01, long i11, long i12, long i13, float v) {
    store_f32(AT(dst, i01, i11, i12, i13), v);
}

// ---------------------------------------------------------------------------
// F32 weights x F32 src1 (strided)
// ---------------------------------------------------------------------------
kernel void kernel_mul_mat_f32(MM_ARGS) {
    __local float sh[MM_WG];
    MM_PROLOGUE
    const bool tiny = b_ne.s1 >= 2 && (n % 8) == 0 && (w_ne.s1 % 4) == 0 &&
                      mm_src1_contiguous(act_nb, b_ne);
    float acc = 0.0f;
    if (tiny) {
        if (lid < 8) {
            for (long i = lid; i < n; i += 8) {
                acc = fma(load_f32(wrow + i * w_nb.s0), load_f32(arow + i * act_nb.s0), acc);
            }
        }
    } else {
        const long np = n & ~31L;
        for (long i = lid; i < np; i += MM_WG) {
            acc = fma(load_f32(wrow + i * w_nb.s0), load_f32(arow + i * act_nb.s0), acc);
        }
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tiny) {
        if (lid == 0) mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, mm_hsum8_local(sh));
    } else {
        float r = mm_reduce_vec32(sh, lid);
        if (lid == 0) {
            // tail of ggml_vec_dot_f32 as compiled in the pinned build: groups of
            // 8 and then of 4 are multiplied, then added one by one; the last
            // (n % 4) elements are fused multiply-adds.
            long i = n & ~31L;
            const long L = n - i;
            const long e8 = i + (L & ~7L);
            for (; i < e8; ++i) {
                const float p = load_f32(wrow + i * w_nb.s0) * load_f32(arow + i * act_nb.s0);
                r = r + p;
            }
            if (n - i >= 4) {
                const long e4 = i + 4;
                for (; i < e4; ++i) {
                    const float p = load_f32(wrow + i * w_nb.s0) * load_f32(arow + i * act_nb.s0);
                    r = r + p;
                }
            }
            for (; i < n; ++i) {
                r = fma(load_f32(wrow + i * w_nb.s0), load_f32(arow + i * act_nb.s0), r);
            }
            mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, r);
        }
    }
}

// ---------------------------------------------------------------------------
// F16 weights x F16 activations (kernel_convert_f16 rows). F16 x F16 products
// are exact in float, so fma and multiply-then-add agree.
// ---------------------------------------------------------------------------
kernel void kernel_mul_mat_f16(MM_ARGS) {
    __local float sh[MM_WG];
    MM_PROLOGUE
    const bool tiny = b_ne.s1 >= 2 && (n % 8) == 0 && (w_ne.s1 % 4) == 0;
    float acc = 0.0f;
    if (tiny) {
        if (lid < 8) {
            for (long i = lid; i < n; i += 8) {
                acc = fma(load_f16(wrow + i * w_nb.s0), load_f16(arow + 2 * i), acc);
            }
        }
    } else {
        const long np = n & ~31L;
        for (long i = lid; i < np; i += MM_WG) {
            acc = fma(load_f16(wrow + i * w_nb.s0), load_f16(arow + 2 * i), acc);
        }
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tiny) {
        if (lid == 0) mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, mm_hsum8_local(sh));
    } else {
        const float r = mm_reduce_vec32(sh, lid);
        if (lid == 0) {
            // tail: sumf (double) += (double)(x*y); emulated as an unevaluated
            // float pair (hi, lo) with exact two-sum steps, rounded once.
            float hi = r, lo = 0.0f;
            for (long i = n & ~31L; i < n; ++i) {
                const float p = load_f16(wrow + i * w_nb.s0) * load_f16(arow + 2 * i);
                const float s = hi + p;
                const float bp = s - hi;
                const float e = (hi - (s - bp)) + (p - bp);
                hi = s;
                lo = lo + e;
            }
            mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, hi + lo);
        }
    }
}

// ---------------------------------------------------------------------------
// Q4_0 / Q8_0 weights x Q8_1 activations (d and qs of the CPU's Q8_0).
// Lane l (0..7) covers elements 4l..4l+3 of every block.
// ---------------------------------------------------------------------------
kernel void kernel_mul_mat_q4_0(MM_ARGS) {
    __local float sh[MM_WG];
    MM_PROLOGUE
    const long nb = n / QK4_0;
    float acc = 0.0f;
    if (lid < 8) {
        const int e0 = 4 * lid;
        for (long ib = 0; ib < nb; ++ib) {
            const __global char *xb = wrow + ib * Q4_0_BYTES;
            const __global char *yb = arow + ib * Q8_1_BYTES;
            int isum = 0;
            for (int e = e0; e < e0 + 4; ++e) {
                isum += (q4_0_code(xb, e) - 8) * q8_1_q(yb, e);
            }
            acc = fma(q4_0_d(xb) * q8_1_d(yb), (float)isum, acc);
        }
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, mm_hsum8_local(sh));
}

kernel void kernel_mul_mat_q8_0(MM_ARGS) {
    __local float sh[MM_WG];
    MM_PROLOGUE
    const long nb = n / QK8_0;
    float acc = 0.0f;
    if (lid < 8) {
        const int e0 = 4 * lid;
        for (long ib = 0; ib < nb; ++ib) {
            const __global char *xb = wrow + ib * Q8_0_BYTES;
            const __global char *yb = arow + ib * Q8_1_BYTES;
            int isum = 0;
            for (int e = e0; e < e0 + 4; ++e) {
                isum += q8_0_q(xb, e) * q8_1_q(yb, e);
            }
            acc = fma(q8_0_d(xb) * q8_1_d(yb), (float)isum, acc);
        }
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, mm_hsum8_local(sh));
}

// ---------------------------------------------------------------------------
// Q4_K weights x Q8_K activations
// ---------------------------------------------------------------------------

// Tiled CPU path, one super-block: res = d*s1 - dmin*s2 (fnmadd), s1 = sum_j sc_j*dot_j,
// s2 = sum_j m_j*(bsums[2j]+bsums[2j+1]).
inline float q4_K_tiled_res(const __global char *xb, const __global char *yb) {
    int s1 = 0, s2 = 0;
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        q4_K_scale_min(xb, j, &sc, &m);
        int dot = 0;
        for (int l = 0; l < 32; ++l) {
            dot += q4_K_code(xb, 32 * j + l) * q8_K_q(yb, 32 * j + l);
        }
        s1 += sc * dot;
        s2 += m * (q8_K_bsum(yb, 2 * j) + q8_K_bsum(yb, 2 * j + 1));
    }
    const float res = q4_K_d(xb) * (float)s1;
    return fma(-q4_K_dmin(xb), (float)s2, res);
}

kernel void kernel_mul_mat_q4_k(MM_ARGS) {
    __local float sh[MM_WG];
    __local float shd[MM_WG];
    MM_PROLOGUE
    const long nb = n / QK_K;
    if (b_ne.s1 >= 8) {
        // tiled path: buf = fma(res_b, y_b.d, buf) over super-blocks in order
        float buf = 0.0f;
        for (long base = 0; base < nb; base += MM_WG) {
            const long ib = base + lid;
            float res = 0.0f, yd = 0.0f;
            if (ib < nb) {
                const __global char *xb = wrow + ib * Q4_K_BYTES;
                const __global char *yb = arow + ib * Q8_K_BYTES;
                res = q4_K_tiled_res(xb, yb);
                yd = q8_K_d(yb);
            }
            sh[lid] = res;
            shd[lid] = yd;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid == 0) {
                const long cnt = min((long)MM_WG, nb - base);
                for (long t = 0; t < cnt; ++t) buf = fma(sh[t], shd[t], buf);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lid == 0) mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, buf);
        return;
    }
    // ggml_vec_dot_q4_K_q8_K (AVX2): lanes 0..7 = scaled quant sums,
    // work-items 8..11 = the 4 lanes of the min accumulator.
    float acc = 0.0f;
    if (lid < 8) {
        const int e0 = 4 * lid;
        for (long ib = 0; ib < nb; ++ib) {
            const __global char *xb = wrow + ib * Q4_K_BYTES;
            const __global char *yb = arow + ib * Q8_K_BYTES;
            const float d = q8_K_d(yb) * q4_K_d(xb);
            int sumi = 0;
            for (int j = 0; j < 4; ++j) {
                int sc0, m0, sc1, m1;
                q4_K_scale_min(xb, 2 * j, &sc0, &m0);
                q4_K_scale_min(xb, 2 * j + 1, &sc1, &m1);
                int lo = 0, hi = 0;
                for (int e = e0; e < e0 + 4; ++e) {
                    const uint byte = qk_u8(xb + 16 + 32 * j + e);
                    lo += (int)(byte & 0xFu) * q8_K_q(yb, 64 * j + e);
                    hi += (int)(byte >> 4) * q8_K_q(yb, 64 * j + 32 + e);
                }
                sumi += sc0 * lo + sc1 * hi;
            }
            acc = fma(d, (float)sumi, acc);
        }
    } else if (lid < 12) {
        const int k = lid - 8;
        for (long ib = 0; ib < nb; ++ib) {
            const __global char *xb = wrow + ib * Q4_K_BYTES;
            const __global char *yb = arow + ib * Q8_K_BYTES;
            const float dmin = -q8_K_d(yb) * q4_K_dmin(xb);
            int sc0, m0, sc1, m1;
            q4_K_scale_min(xb, 2 * k, &sc0, &m0);
            q4_K_scale_min(xb, 2 * k + 1, &sc1, &m1);
            const int s0 = q8_K_bsum(yb, 4 * k) + q8_K_bsum(yb, 4 * k + 1);
            const int s1 = q8_K_bsum(yb, 4 * k + 2) + q8_K_bsum(yb, 4 * k + 3);
            acc = fma(dmin, (float)(m0 * s0 + m1 * s1), acc);
        }
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        const float accm = (sh[8] + sh[10]) + (sh[9] + sh[11]);
        mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, mm_hsum8_local(sh) + accm);
    }
}

// ---------------------------------------------------------------------------
// Q6_K weights x Q8_K activations
// ---------------------------------------------------------------------------

// Tiled CPU path, one super-block: d * sum_s sc_s * sum_{e in s} q8_e*(q6_e - 32)
inline float q6_K_tiled_res(const __global char *xb, const __global char *yb) {
    int s1 = 0;
    for (int s = 0; s < 16; ++s) {
        int dot = 0;
        for (int l = 0; l < 16; ++l) {
            dot += (q6_K_code(xb, 16 * s + l) - 32) * q8_K_q(yb, 16 * s + l);
        }
        s1 += q6_K_scale(xb, s) * dot;
    }
    return q6_K_d(xb) * (float)s1;
}

kernel void kernel_mul_mat_q6_k(MM_ARGS) {
    __local float sh[MM_WG];
    __local float shd[MM_WG];
    MM_PROLOGUE
    const long nb = n / QK_K;
    if (b_ne.s1 >= 8) {
        float buf = 0.0f;
        for (long base = 0; base < nb; base += MM_WG) {
            const long ib = base + lid;
            float res = 0.0f, yd = 0.0f;
            if (ib < nb) {
                const __global char *xb = wrow + ib * Q6_K_BYTES;
                const __global char *yb = arow + ib * Q8_K_BYTES;
                res = q6_K_tiled_res(xb, yb);
                yd = q8_K_d(yb);
            }
            sh[lid] = res;
            shd[lid] = yd;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid == 0) {
                const long cnt = min((long)MM_WG, nb - base);
                for (long t = 0; t < cnt; ++t) buf = fma(sh[t], shd[t], buf);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lid == 0) mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, buf);
        return;
    }
    // ggml_vec_dot_q6_K_q8_K (AVX2): lane l covers elements 4l..4l+3 of every
    // 32-element chunk (scale index 2*chunk + (l >= 4)); the -32 offset is
    // applied per lane through bsums: 32*(bsums[2l]*sc[2l] + bsums[2l+1]*sc[2l+1]).
    float acc = 0.0f;
    if (lid < 8) {
        const int e0 = 4 * lid;
        for (long ib = 0; ib < nb; ++ib) {
            const __global char *xb = wrow + ib * Q6_K_BYTES;
            const __global char *yb = arow + ib * Q8_K_BYTES;
            const float d = q8_K_d(yb) * q6_K_d(xb);
            int sumi = 0;
            for (int c = 0; c < 8; ++c) {           // 32-element chunk c = 4*half + k
                const int sc = q6_K_scale(xb, 2 * c + (lid >= 4 ? 1 : 0));
                int p = 0;
                for (int e = e0; e < e0 + 4; ++e) {
                    p += q6_K_code(xb, 32 * c + e) * q8_K_q(yb, 32 * c + e);
                }
                sumi += sc * p;
            }
            sumi -= 32 * (q8_K_bsum(yb, 2 * lid) * q6_K_scale(xb, 2 * lid) +
                          q8_K_bsum(yb, 2 * lid + 1) * q6_K_scale(xb, 2 * lid + 1));
            acc = fma(d, (float)sumi, acc);
        }
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) mm_store(dst, dst_off, dst_ne, dst_nb, i01, i11, i12, i13, mm_hsum8_local(sh));
}
