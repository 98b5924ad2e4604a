// Prepended to every polycl kernel program (OpenCL C 1.2, no fp16 extension).
//
// A tensor is passed as four kernel arguments, exactly as ggml lays it out:
// base pointer, byte offset of element (0,0,0,0), element counts per dim (ne)
// and byte strides per dim (nb). Offsets are explicit arguments (not sub-buffers)
// because sub-buffer origins must be aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN,
// which ggml's tensor offsets are not.
#define TENSOR(t)  __global char *t, ulong t##_off, long4 t##_ne, ulong4 t##_nb
#define CTENSOR(t) __global const char *t, ulong t##_off, long4 t##_ne, ulong4 t##_nb

// Packed scalars (the kernels listed in program.rs PACKED, which a decode
// step launches): a tensor is only its pointer in the signature (PTENSOR),
// and its offset, ne and nb, like every other scalar, come from `pk`, the
// last argument, in 8-byte slots in signature order, unpacked at the top of
// the kernel (PK_BEGIN, then PK_TENSOR / PK_INT / ...). NVIDIA's enqueue
// costs microseconds more per launch for large scalar argument lists.
// `pk` is a global (read-only, restrict) pointer, not __constant: on the
// H200 a decode step ran 2-4% faster that way (docs/perf.md step 31; the
// slots then come through the L1 data cache instead of the constant cache,
// and why that is faster was not measured further).
//
// A packed kernel's buffer arguments are one list, a macro L(R, W) that
// applies R(type, name) to each buffer it only reads and W(type, name) to
// each it writes (`__global type *name`), given twice: to PK_SIG(L), its
// signature, and to PK_BEGIN_BUFS(L), which begins its body. Built with
// POLYCL_ADDR, on a device where kernels may reach a buffer through its
// address as an integer (runtime/addresses.rs), a buffer is a `ulong
// name_addr` argument instead, which PK_BEGIN_BUFS casts back to the
// pointer: NVIDIA's enqueue costs ~0.4 us more per buffer argument and ~0.05
// us per ulong (docs/perf.md steps 46-47), and a decode kernel takes 3-16
// buffers. With POLYCL_ADDR_READS, only the buffers a kernel reads come as
// addresses and the ones it writes stay buffer arguments. The arguments
// keep their order and count in every mode. Step mode (below) ignores
// POLYCL_ADDR: its bodies are functions of their buffers.
// (OpenCL C 1.2 has no variadic macros, hence the list as a macro.)
#define PTENSOR(t)  __global char *t
#define PCTENSOR(t) __global const char *t
#define PK_ARG_BUF(T, n) __global T *n,
#define PK_BIND_BUF(T, n)
#define PK_ARG_ADDR(T, n) ulong n##_addr,
#define PK_BIND_ADDR(T, n) __global T *n = (__global T *)n##_addr;
#if !defined(POLYCL_ADDR) || defined(POLYCL_STEP)
#define PK_ARG_R PK_ARG_BUF
#define PK_BIND_R PK_BIND_BUF
#define PK_ARG_W PK_ARG_BUF
#define PK_BIND_W PK_BIND_BUF
#elif defined(POLYCL_ADDR_READS)
#define PK_ARG_R PK_ARG_ADDR
#define PK_BIND_R PK_BIND_ADDR
#define PK_ARG_W PK_ARG_BUF
#define PK_BIND_W PK_BIND_BUF
#else
#define PK_ARG_R PK_ARG_ADDR
#define PK_BIND_R PK_BIND_ADDR
#define PK_ARG_W PK_ARG_ADDR
#define PK_BIND_W PK_BIND_ADDR
#endif
#define PK_SIG(L) L(PK_ARG_R, PK_ARG_W) PK_PARAMS
#define PK_BEGIN_BUFS(L) PK_BEGIN L(PK_BIND_R, PK_BIND_W)
#ifndef POLYCL_STEP
#define PK_PARAMS __global const ulong *restrict pk
#define PK_BEGIN int pk_i = 0;
// Local arrays of a packed kernel (a phase of the step kernel takes them
// from the step kernel's local memory instead).
#define LOCAL_ARRAY(T, name, n) __local T name[n]
#else
// The step program (step.cl, runtime/step.rs): every packed kernel in it
// becomes a function the persistent step kernel calls once per virtual work-
// group. OpenCL C allows __local variables only at kernel scope, so a phase
// carves its local arrays out of `step_lmem`; its group ids are `step_vg`
// (the step kernel runs 1-D, so get_local_size(1) == 1 and get_local_id(1)
// == 0 and get_global_id(d) follows from the group id); its scalars come
// from global memory, since a whole step's do not fit in a constant buffer.
#define PK_PARAMS __global const ulong *pk, const uint4 step_vg, __local char *step_lmem
#define PK_BEGIN int pk_i = 0; uint step_lm = 0;
#define LOCAL_ARRAY(T, name, n)                                                       \
    __local T *name = (__local T *)(step_lmem + step_lm);                             \
    step_lm += ((uint)((n) * sizeof(T)) + 15u) & ~15u;
#define kernel inline
#define get_group_id(d) ((d) == 0 ? step_vg.x : ((d) == 1 ? step_vg.y : step_vg.z))
#define get_global_id(d) (get_group_id(d) * get_local_size(d) + get_local_id(d))
#endif
// Slots that only an epilogue reads: PK_SKIP(n) passes over n slots at the
// top, and the epilogue comes back to them (pk_i = the saved index) after
// the main loop; scalars unpacked at the top stay in registers through it
// (group_rope.cl says what that cost).
#define PK_SKIP(n) pk_i += (n);
#define PK_TENSOR(t)                                                                  \
    const ulong t##_off = pk[pk_i];                                                   \
    const long4 t##_ne = as_long4((ulong4)(pk[pk_i + 1], pk[pk_i + 2], pk[pk_i + 3], pk[pk_i + 4])); \
    const ulong4 t##_nb = (ulong4)(pk[pk_i + 5], pk[pk_i + 6], pk[pk_i + 7], pk[pk_i + 8]); \
    pk_i += 9;
#define PK_ULONG(x) const ulong x = pk[pk_i]; pk_i += 1;
#define PK_LONG(x) const long x = as_long(pk[pk_i]); pk_i += 1;
#define PK_INT(x) const int x = as_int((uint)pk[pk_i]); pk_i += 1;
#define PK_UINT(x) const uint x = (uint)pk[pk_i]; pk_i += 1;
#define PK_FLOAT(x) const float x = as_float((uint)pk[pk_i]); pk_i += 1;
#define PK_LONG4(x) const long4 x = as_long4((ulong4)(pk[pk_i], pk[pk_i + 1], pk[pk_i + 2], pk[pk_i + 3])); pk_i += 4;
#define PK_ULONG4(x) const ulong4 x = (ulong4)(pk[pk_i], pk[pk_i + 1], pk[pk_i + 2], pk[pk_i + 3]); pk_i += 4;

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

// ALiBi slope of head h (ggml's soft_max / flash_attn_ext: m0^(h+1) for the
// first n_head_log2 heads, m1^(2(h - n_head_log2) + 1) after), 1 without.
inline float alibi_slope(uint h, float max_bias, float m0, float m1, uint n_head_log2) {
    if (max_bias <= 0.0f) return 1.0f;
    return h < n_head_log2 ? pow(m0, (float)(h + 1)) : pow(m1, (float)(2 * (h - n_head_log2) + 1));
}

// Four packed bytes (a weight block's codes, which ggml's 18- and 34-byte
// blocks leave 2-byte aligned) from a 2-byte aligned address.
inline int load_i32_a2(const __global char *p) {
    const ushort2 u = vload2(0, (const __global ushort *)p);
    return (int)u.x | ((int)u.y << 16);
}

// N words of packed bytes from a 2-byte aligned address `qs`, as 4-byte
// loads: where qs sits 2 bytes into a word, the words around it are loaded
// and shifted together, and the last half-word comes from a 2-byte load at
// qs + 4N - 2, so nothing past qs + 4N is read. N + 1 loads instead of
// load_i32_a2's 2N: a warp's 2-byte loads at an 18-byte stride cost the
// decode matvecs 13% of a GLU-shaped launch (docs/perf.md step 25).
#ifndef POLYCL_STEP
#define LOAD_WORDS_A2(qs, w, N)                                                       \
    do {                                                                              \
        const int mis_ = ((ulong)(qs) & 2) != 0;                                      \
        const __global uint *p_ = (const __global uint *)((qs) - (mis_ ? 2 : 0));     \
        uint x_[(N) + 1];                                                             \
        _Pragma("unroll") for (int i_ = 0; i_ < (N); ++i_) x_[i_] = p_[i_];            \
        x_[N] = *(const __global ushort *)((qs) + 4 * (N) - 2);                        \
        _Pragma("unroll") for (int i_ = 0; i_ < (N); ++i_)                             \
            (w)[i_] = (int)(mis_ ? ((x_[i_] >> 16) | (x_[i_ + 1] << 16)) : x_[i_]);   \
    } while (0)
#else
// The step program keeps load_i32_a2: with the word loads, PoCL's compile of
// its one large kernel went from ~4 minutes to more than 7 (stopped there;
// CI's POLYCL_STEP=1 greedy run gives it 10), and the step kernel is opt-in
// and no faster (docs/perf.md step 10).
#define LOAD_WORDS_A2(qs, w, N)                                                       \
    do {                                                                              \
        for (int i_ = 0; i_ < (N); ++i_) (w)[i_] = load_i32_a2((qs) + 4 * i_);          \
    } while (0)
#endif

// The value v takes after a round trip through IEEE half (round to nearest even),
// which is what ggml's CPU backend does wherever it converts activations to F16.
inline float round_f16(float v) {
    ushort h;
    vstore_half_rte(v, 0, (__private half *)&h);
    return vload_half(0, (__private const half *)&h);
}

// ---------------------------------------------------------------------------
// Correctly rounded float division. ggml divides with IEEE '/', OpenCL only
// promises 2.5 ulp unless -cl-fp32-correctly-rounded-divide-sqrt is given.
// The residual a - q*b is exact (fma) for q within a few ulp of a/b; step to
// the neighbour while it shrinks |a - q*b|. (An exact tie is impossible.)
// Here rather than in quant.cl so programs without the quant decoders (the
// fast attention's Q8_1 copy) make the same bytes as kernel_quantize_q8_1.
// ---------------------------------------------------------------------------
inline float qk_div(float a, float b) {
    float q = a / b;
    if (!isfinite(q) || q == 0.0f || !isfinite(b)) return q;
    for (int it = 0; it < 4; ++it) {
        const float r = fma(-q, b, a);
        if (r == 0.0f) break;
        const float dir = ((r > 0.0f) == (b > 0.0f)) ? INFINITY : -INFINITY;
        const float q2 = nextafter(q, dir);
        const float r2 = fma(-q2, b, a);
        if (fabs(r2) < fabs(r)) q = q2; else break;
    }
    return q;
}

// Scale and min (6 bits each) of sub-block j of the Q4_K super-block at wb:
// ggml's get_scale_min_k4. Here because both the matvec and tile kernels of
// mul_mv.cl and the tensor-core tile of mul_mm_mma.cl decode Q4_K.
inline void q4_k_scale_min(const __global char *wb, int j, int *sc, int *m) {
    const __global uchar *sb = (const __global uchar *)(wb + 4);
    if (j < 4) {
        *sc = sb[j] & 63;
        *m = sb[j + 4] & 63;
    } else {
        *sc = (sb[j + 4] & 0xF) | ((sb[j - 4] >> 6) << 4);
        *m = (sb[j + 4] >> 4) | ((sb[j] >> 6) << 4);
    }
}

// Four Q8_1 codes q = rint(y * id) packed in an int (element 0 in the low
// byte), their sum added to *qsum.
inline int q8_1_pack4(float4 y, float id, int *qsum) {
    const int q0 = (int)rint(y.x * id), q1 = (int)rint(y.y * id);
    const int q2 = (int)rint(y.z * id), q3 = (int)rint(y.w * id);
    *qsum += q0 + q1 + q2 + q3;
    return (q0 & 0xff) | ((q1 & 0xff) << 8) | ((q2 & 0xff) << 16) | ((q3 & 0xff) << 24);
}

// One Q8_1 block (half d, half d * sum(q), int8 q[32]) of 32 floats in local
// memory, for fast kernels that quantize their own output for the next
// matmul: d = amax / 127, q = rint(y / d). `blk` is 4-byte aligned (36-byte
// blocks from a 128-aligned scratch offset).
inline void store_q8_1_block(__local const float *y, __global char *blk) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = fmax(amax, fabs(y[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int qsum = 0;
    for (int j = 0; j < 32; j += 4) {
        const float4 v = (float4)(y[j], y[j + 1], y[j + 2], y[j + 3]);
        *(__global int *)(blk + 4 + j) = q8_1_pack4(v, id, &qsum);
    }
    store_f16(blk, d);
    store_f16(blk + 2, d * (float)qsum);
}

// Device-wide ordering of this work-item's global stores before its later
// ones, for kernels where the last work-group to finish reads what the others
// wrote (fa_split.cl has the argument): mem_fence, plus membar.gl on NVIDIA,
// where mem_fence is not known to order against other SMs.
inline void device_fence(void) {
    mem_fence(CLK_GLOBAL_MEM_FENCE);
#ifdef POLYCL_NVIDIA
    asm volatile("membar.gl;" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------
// Sum and max over a warp: the 32 work-items 32w..32w+31 of a work-group.
// Every work-item gets the result. NVIDIA: shuffles in inline PTX. Elsewhere:
// `scratch` (this warp's 32 floats, indexed by lane) and group barriers, so
// every work-item of the group must make the call together.
// ---------------------------------------------------------------------------
#ifdef POLYCL_NVIDIA
inline float warp_sum(float v, __local float *scratch) {
    (void)scratch;
    for (int m = 16; m >= 1; m >>= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
        v += o;
    }
    return v;
}
inline float warp_max(float v, __local float *scratch) {
    (void)scratch;
    for (int m = 16; m >= 1; m >>= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
        v = fmax(v, o);
    }
    return v;
}
// n sums at once (n a constant at every call), each round's shuffles back to
// back: volatile asm keeps its order, so n warp_sum calls in a row wait out
// each other's five dependent shuffles. Each sum is over an aligned run of
// `width` lanes (a power of two up to 32; a butterfly with offsets below
// `width` stays inside its run).
inline void lanes_sum_n(float *v, const int n, __local float *scratch, const int width) {
    (void)scratch;
    for (int m = width / 2; m >= 1; m >>= 1) {
#pragma unroll
        for (int j = 0; j < n; ++j) {
            float o;
            asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v[j]), "r"(m));
            v[j] += o;
        }
    }
}
inline void warp_sum8(float *v, __local float *scratch) {
    lanes_sum_n(v, 8, scratch, 32);
}
// The sums over each aligned run of `width` lanes of n values (n a constant
// multiple of `width`), spread over the run: afterwards lane t's v[r], for
// r < n / width, holds the sum of value t * (n / width) + r. Each level keeps
// half the values a lane and trades the other half with its partner, so a
// run of 8 lanes sums 8 values in 7 shuffles where lanes_sum_n takes 24.
inline void lanes_sum_spread(float *v, const int n, __local float *scratch, const int width) {
    (void)scratch;
    const int lane = get_local_id(0) % width;
    int len = n;
#pragma unroll
    for (int m = width / 2; m >= 1; m >>= 1) {
        const int kept = len / 2, upper = (lane & m) != 0;
#pragma unroll
        for (int j = 0; j < kept; ++j) {
            const float give = upper ? v[j] : v[j + kept];
            const float keep = upper ? v[j + kept] : v[j];
            float o;
            asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(give), "r"(m));
            v[j] = keep + o;
        }
        len = kept;
    }
}
// out[i] = v of lane i of this work-item's aligned run of `width` lanes, for
// i < n (n a constant at every call, at most `width`).
inline void lanes_share(float v, float *out, const int n, __local float *scratch,
                        const int width) {
    (void)scratch;
    const int clamp = ((32 - width) << 8) | 0x1f;
#pragma unroll
    for (int i = 0; i < n; ++i)
        asm volatile("shfl.sync.idx.b32 %0, %1, %2, %3, 0xffffffff;"
                     : "=f"(out[i])
                     : "f"(v), "r"(i), "r"(clamp));
}
#else
// The sum over each aligned run of `width` lanes of the group, `scratch`
// holding `width` floats for the caller's run.
inline float lanes_sum(float v, __local float *scratch, const int width) {
    const int lane = get_local_id(0) % width;
    scratch[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = width / 2; s > 0; s >>= 1) {
        if (lane < s) scratch[lane] += scratch[lane + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
inline float warp_sum(float v, __local float *scratch) {
    return lanes_sum(v, scratch, 32);
}
inline float warp_max(float v, __local float *scratch) {
    const int lane = get_local_id(0) % 32;
    scratch[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 16; s > 0; s >>= 1) {
        if (lane < s) scratch[lane] = fmax(scratch[lane], scratch[lane + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
inline void lanes_sum_n(float *v, const int n, __local float *scratch, const int width) {
    for (int j = 0; j < n; ++j) v[j] = lanes_sum(v[j], scratch, width);
}
inline void warp_sum8(float *v, __local float *scratch) {
    lanes_sum_n(v, 8, scratch, 32);
}
// Value j = t * (n / width) + r lands in v[r] of lane t at step j >= r, so
// v[r] is written only once the loop has read it.
inline void lanes_sum_spread(float *v, const int n, __local float *scratch, const int width) {
    const int lane = get_local_id(0) % width, per = n / width;
    for (int j = 0; j < n; ++j) {
        const float s = lanes_sum(v[j], scratch, width);
        if (j / per == lane) v[j % per] = s;
    }
}
inline void lanes_share(float v, float *out, const int n, __local float *scratch,
                        const int width) {
    scratch[get_local_id(0) % width] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < n; ++i) out[i] = scratch[i];
    barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

// One Q8_1 block (kernel_quantize_q8_1_fast's bytes) from a warp, an element
// a lane: d = amax / 127, q = rint(x / d), written to `blk` where `live`
// (uniform over the warp). Every work-item of the group calls it: off NVIDIA
// the reductions are group barriers.
inline void warp_store_q8_1(float x, int live, __global char *blk, __local float *scratch) {
    const int lane = get_local_id(0) % 32;
    const float amax = warp_max(fabs(x), scratch);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int qi = (int)rint(x * id);
    const float qsum = warp_sum((float)qi, scratch);
    if (live) {
        blk[4 + lane] = (char)qi;
        if (lane == 0) {
            store_f16(blk, d);
            store_f16(blk + 2, d * qsum);
        }
    }
}

// The butterflies of the transform over each run of `width` elements of
// h[0, n) (already scaled), by a work-group of `wg`: butterfly b of a stage
// pairs i and i + len, i = b with a 0 bit inserted at len's place (len a
// power of two: no divisions), which holds across runs (len < width).
// hadamard.cl's, rope_rot_store.cl's and the attention's merge (fa_split.cl).
inline void fwht_runs(__local float *h, int n, int width, int wg) {
    for (int len = 1; len < width; len <<= 1) {
        for (int b = get_local_id(0); b < n / 2; b += wg) {
            const int i = ((b & ~(len - 1)) << 1) | (b & (len - 1));
            const float u = h[i], v = h[i + len];
            h[i] = u + v;
            h[i + len] = u - v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
