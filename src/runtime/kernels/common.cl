// Prepended to every polycl kernel program (OpenCL C 1.2, no fp16 extension).
//
// A tensor is passed as four kernel arguments, exactly as ggml lays it out:
// base pointer, byte offset of element (0,0,0,0), element counts per dim (ne)
// and byte strides per dim (nb). Offsets are explicit arguments (not sub-buffers)
// because sub-buffer origins must be aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN,
// which ggml's tensor offsets are not.
#define TENSOR(t)  __global char *t, ulong t##_off, long4 t##_ne, ulong4 t##_nb
#define CTENSOR(t) __global const char *t, ulong t##_off, long4 t##_ne, ulong4 t##_nb

// Byte address of element (i0, i1, i2, i3) of tensor t.
#define AT(t, i0, i1, i2, i3) \
    ((t) + (t##_off) + (ulong)(i0) * (t##_nb).s0 + (ulong)(i1) * (t##_nb).s1 + \
     (ulong)(i2) * (t##_nb).s2 + (ulong)(i3) * (t##_nb).s3)

// Splits a flat row-major element index into coordinates of shape ne.
inline long4 unravel4(long i, long4 ne) {
    long4 c;
    c.s0 = i % ne.s0; i /= ne.s0;
    c.s1 = i % ne.s1; i /= ne.s1;
    c.s2 = i % ne.s2; i /= ne.s2;
    c.s3 = i;
    return c;
}

inline long nelements4(long4 ne) { return ne.s0 * ne.s1 * ne.s2 * ne.s3; }

inline float load_f16(const __global char *p) { return vload_half(0, (const __global half *)p); }
inline void store_f16(__global char *p, float v) { vstore_half_rte(v, 0, (__global half *)p); }
inline float load_f32(const __global char *p) { return *(const __global float *)p; }
inline void store_f32(__global char *p, float v) { *(__global float *)p = v; }

// The value v takes after a round trip through IEEE half (round to nearest even),
// which is what ggml's CPU backend does wherever it converts activations to F16.
inline float round_f16(float v) {
    ushort h;
    vstore_half_rte(v, 0, (__private half *)&h);
    return vload_half(0, (__private const half *)&h);
}
