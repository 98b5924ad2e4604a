// CPY / CONT / DUP between F32 and F16 (ggml_compute_forward_dup_flt).
// Element i is taken in logical row-major order from src and written at the
// same logical position of dst; the two shapes may differ (element counts are
// equal) and both may be arbitrary strided views.
// F32 -> F16 rounds to nearest even (the CPU's F16C _cvtss_sh(x, 0)).
// Same-type copies move raw bits, so any 4-byte (or 2-byte) type copies exactly.

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
