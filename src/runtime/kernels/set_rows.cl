// SET_ROWS (ops.cpp ggml_compute_forward_set_rows_impl), F32 values into an F32
// or F16 destination (Q8_0 and Q4_0 below), I64 or I32 row indices. Kernel name = destination type,
// index type. global {ne0(src), ne1(src), ne2(src)*ne3(src)}.
// For src row (i01, i02, i03) the destination row is
//   idx[i01, i02 % ne1(idx), i03 % ne2(idx)]
// and the row is written to dst[:, that index, i02, i03]. F16 rounds to nearest even.

// The work-item's source element i0 and its destination row's index.
#define SR_COORDS                                                   \
    const long i0  = get_global_id(0);                              \
    const long i01 = get_global_id(1);                              \
    const long i02 = get_global_id(2) % src_ne.s2;                  \
    const long i03 = get_global_id(2) / src_ne.s2;                  \
    if (i0 >= src_ne.s0 || i01 >= src_ne.s1 || i03 >= src_ne.s3) return; \
    const __global char *ip = AT(idx, i01, i02 % idx_ne.s1, i03 % idx_ne.s2, 0);

kernel void kernel_set_rows_f32_i64(CTENSOR(src), CTENSOR(idx), TENSOR(dst)) {
    SR_COORDS
    const long r = *(const __global long *) ip;
    *(__global uint *) AT(dst, i0, r, i02, i03) = *(const __global uint *) AT(src, i0, i01, i02, i03);
}

kernel void kernel_set_rows_f16_i64(CTENSOR(src), CTENSOR(idx), TENSOR(dst)) {
    SR_COORDS
    const long r = *(const __global long *) ip;
    store_f16(AT(dst, i0, r, i02, i03), load_f32(AT(src, i0, i01, i02, i03)));
}

kernel void kernel_set_rows_f32_i32(CTENSOR(src), CTENSOR(idx), TENSOR(dst)) {
    SR_COORDS
    const long r = *(const __global int *) ip;
    *(__global uint *) AT(dst, i0, r, i02, i03) = *(const __global uint *) AT(src, i0, i01, i02, i03);
}

kernel void kernel_set_rows_f16_i32(CTENSOR(src), CTENSOR(idx), TENSOR(dst)) {
    SR_COORDS
    const long r = *(const __global int *) ip;
    store_f16(AT(dst, i0, r, i02, i03), load_f32(AT(src, i0, i01, i02, i03)));
}

// Quantized destinations (a KV cache of `-ctk q8_0` / `q4_0`): a work-group
// of 32 a block, a work-item a value, global {ne0(src), ne1(src),
// ne2(src)*ne3(src)}, local {32, 1, 1}: one coalesced load and one byte
// store a work-item (a work-item a block took ~10 us a launch on the H100,
// docs/perf.md step 80); every work-item scans the block's 32 values from
// local memory in the CPU's order. The bytes of the CPU backend's
// from_float: for Q8_0 its AVX form (the scale 127 / amax, rounding half to
// even), for Q4_0 quantize_row_q4_0_ref. Divisions by qk_div, correctly
// rounded on every device. The destination's nb0 is a block's bytes (ggml's
// type size), so AT's first coordinate is the block.

inline void sr_block_q8_0(__local const float *v, int j, __global char *y) {
    float amax = 0.0f;
    for (int e = 0; e < 32; ++e) amax = fmax(amax, fabs(v[e]));
    const float id = amax != 0.0f ? qk_div(127.0f, amax) : 0.0f;
    if (j == 0) store_f16(y, qk_div(amax, 127.0f));
    y[2 + j] = (char)(int)rint(v[j] * id);
}

inline void sr_block_q4_0(__local const float *v, int j, __global char *y) {
    float amax = 0.0f, max = 0.0f;
    for (int e = 0; e < 32; ++e) {
        if (amax < fabs(v[e])) {
            amax = fabs(v[e]);
            max = v[e];
        }
    }
    const float d = qk_div(max, -8.0f);
    const float id = d != 0.0f ? qk_div(1.0f, d) : 0.0f;
    if (j == 0) store_f16(y, d);
    if (j < 16) {
        const uchar q0 = (uchar)min(15, (int)(char)(v[j] * id + 8.5f));
        const uchar q1 = (uchar)min(15, (int)(char)(v[16 + j] * id + 8.5f));
        y[2 + j] = (char)(q0 | (q1 << 4));
    }
}

#define SR_QUANT_KERNEL(NAME, INDEX, BLOCK)                                                 \
    kernel void NAME(CTENSOR(src), CTENSOR(idx), TENSOR(dst)) {                             \
        __local float vals[32];                                                             \
        SR_COORDS                                                                           \
        const long r = *(const __global INDEX *)ip;                                         \
        const int j = (int)(i0 % 32);                                                       \
        vals[j] = load_f32(AT(src, i0, i01, i02, i03));                                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                                       \
        BLOCK(vals, j, AT(dst, i0 / 32, r, i02, i03));                                      \
    }

SR_QUANT_KERNEL(kernel_set_rows_q8_0_i64, long, sr_block_q8_0)
SR_QUANT_KERNEL(kernel_set_rows_q8_0_i32, int, sr_block_q8_0)
SR_QUANT_KERNEL(kernel_set_rows_q4_0_i64, long, sr_block_q4_0)
SR_QUANT_KERNEL(kernel_set_rows_q4_0_i32, int, sr_block_q4_0)
