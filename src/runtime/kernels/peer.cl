// Device-to-device helpers (backend/comm.rs): the accumulation step of the
// -sm tensor all-reduce. One work-item per float: dst[i] = dst[i] + src[i],
// the same single rounding as ggml's ADD of two F32 tensors.

kernel void kernel_acc_f32(__global char *dst, ulong dst_off,
                           __global const char *src, ulong src_off, uint n) {
    const uint i = get_global_id(0);
    if (i >= n) return;
    __global float *d = (__global float *)(dst + dst_off);
    __global const float *s = (__global const float *)(src + src_off);
    d[i] = d[i] + s[i];
}
