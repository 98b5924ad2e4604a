// SET_ROWS (ops.cpp ggml_compute_forward_set_rows_impl), F32 values into an F32
// or F16 destination, I64 or I32 row indices. Kernel name = destination type,
// index type. global {ne0(src), ne1(src), ne2(src)*ne3(src)}.
// For src row (i01, i02, i03) the destination row is
//   idx[i01, i02 % ne1(idx), i03 % ne2(idx)]
// and the row is written to dst[:, that index, i02, i03]. F16 rounds to nearest even.

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
