// Buffers reached through their device addresses (runtime/addresses.rs): a
// packed kernel built with POLYCL_ADDR takes its buffers as ulong arguments,
// their addresses. This kernel writes those addresses, for the host to read
// back once when a plan binds the launch, from buffer arguments, so the
// addresses are the ones the driver gives kernels.
//
// pk[first + i] = the address of m<i>, for i < n (at most 16 a launch).
kernel void kernel_pk_addresses(__global ulong *pk, uint first, uint n, __global char *m0,
                                __global char *m1, __global char *m2, __global char *m3,
                                __global char *m4, __global char *m5, __global char *m6,
                                __global char *m7, __global char *m8, __global char *m9,
                                __global char *m10, __global char *m11, __global char *m12,
                                __global char *m13, __global char *m14, __global char *m15) {
    if (get_global_id(0) != 0) return;
    __global char *m[16] = {m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15};
    for (uint i = 0; i < n && i < 16; ++i) pk[first + i] = (ulong)m[i];
}

// The check a device passes before its kernels take addresses: reads
// through one address and writes through the other, as kernel_pk_addresses
// wrote them and the host read them back.
kernel void kernel_address_check(ulong src_addr, ulong dst_addr) {
    const size_t i = get_global_id(0);
    const __global float *src = (const __global float *)src_addr;
    __global float *dst = (__global float *)dst_addr;
    dst[i] = 2.0f * src[i] + 1.0f;
}
