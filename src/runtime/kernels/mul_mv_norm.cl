// MulMatAddNorm (common.cl + mul_mv.cl + this file): a decode matvec o = W x,
// the residual add after it (sum = o + res) and the RMS norm of the sum with
// its weight (normed = sum / rms(sum), dst = normed * nw, and dst's Q8_1 copy
// for the matmuls that read it), in one launch: llama's O and down
// projections with the norm of the sublayer that follows. A separate norm
// kernel cost ~9 us on the H200 (docs/perf.md step 7), mostly its own ramp
// and drain, for 50 KB of traffic. The pass is off by default: on the H200
// this kernel's tail measured ~12 us, more than the launch it saves
// (docs/perf.md step 13).
//
// The matvec part is MV2_KERNEL's: two rows a row group, MV_ROWS row groups a
// work-group; lane 0 writes o and sum for its two rows. The norm needs the
// whole sum, so the work-group that finishes last does it ("last block done",
// as kernel_fa_vec; fa_split.cl has the memory-ordering argument): it reads
// the sum back through volatile pointers, one 32-element Q8_1 block per
// work-item held in registers, and puts the counter back to 0 for the next
// launch. The counter lives in the plan's scratch, zeroed when the plan is
// built.
//
// The host (passes/fuse/matmul_norm.rs, plan/matmul_norm.rs) checked: 2-D
// weights, one activation row, res/o/sum/normed/nw/dst contiguous F32 rows of
// w's row count, a multiple of 32, their offsets 16-byte aligned. normed and
// dst may share memory with res or o (they are written after every group has
// read them); sum may be res or o itself (each element is read before it is
// written, by the one work-item that writes it).
//
// global {ceil(rows / (2 * MV_ROWS)) * MV_ROWS * MV_LANES}, local {MV_ROWS * MV_LANES}.

#define MVN_WG (MV_ROWS * MV_LANES)
#define MVN_QK 32

// Loads block b of the sum into x (registers, once inlined); returns its
// sum of squares.
inline float mvn_load_block(const volatile __global float *sum, long b, float *x) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < MVN_QK; j += 4) {
        const float4 v = *(const volatile __global float4 *)(sum + b * MVN_QK + j);
        x[j] = v.x;
        x[j + 1] = v.y;
        x[j + 2] = v.z;
        x[j + 3] = v.w;
        acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    return acc;
}

// The norm of the whole row, by the last work-group (`last`; the others only
// join the barriers, which PoCL needs outside conditional code): work-item i
// takes Q8_1 blocks i, i + MVN_WG, ..., keeping its first block in registers
// between the sum of squares and the outputs (one block each for rows up to
// 4096 elements).
inline void mvn_norm_row(int last, const volatile __global float *sum, const __global float *nw,
                         __global float *normed, __global float *dst, __global char *q8,
                         int has_q8, long n, float eps, __local float *red) {
    const int lid = get_local_id(0);
    const int lane = lid % MV_LANES, warp = lid / MV_LANES;
    const long nblk = last ? n / MVN_QK : 0;
    float x[MVN_QK];
    float acc = 0.0f;
    if (lid < nblk) acc = mvn_load_block(sum, lid, x);
    for (long b = lid + MVN_WG; b < nblk; b += MVN_WG) {
        for (int j = 0; j < MVN_QK; j += 4) {
            const float4 v = *(const volatile __global float4 *)(sum + b * MVN_QK + j);
            acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    }
    const float ws = warp_sum(acc, red + MV_ROWS + warp * MV_LANES);
    if (lane == 0) red[warp] = ws;
    barrier(CLK_LOCAL_MEM_FENCE);
    float total = 0.0f;
    for (int i = 0; i < MV_ROWS; ++i) total += red[i];
    const float scale = 1.0f / sqrt(total / (float)n + eps);

    for (long b = lid; b < nblk; b += MVN_WG) {
        if (b != lid) mvn_load_block(sum, b, x);
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < MVN_QK; j += 4) {
            const long e = b * MVN_QK + j;
            const float4 w4 = vload4(0, nw + e);
            const float4 nv = (float4)(x[j], x[j + 1], x[j + 2], x[j + 3]) * scale;
            const float4 y = nv * w4;
            vstore4(nv, 0, normed + e);
            vstore4(y, 0, dst + e);
            x[j] = y.x;
            x[j + 1] = y.y;
            x[j + 2] = y.z;
            x[j + 3] = y.w;
            amax = fmax(amax, fmax(fmax(fabs(y.x), fabs(y.y)), fmax(fabs(y.z), fabs(y.w))));
        }
        // The bytes of store_q8_1_block: d = amax / 127, q = rint(y / d).
        if (has_q8) {
            __global char *blk = q8 + b * 36;
            const float d = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            int qsum = 0;
#pragma unroll
            for (int j = 0; j < MVN_QK; j += 4) {
                const float4 v = (float4)(x[j], x[j + 1], x[j + 2], x[j + 3]);
                *(__global int *)(blk + 4 + j) = q8_1_pack4(v, id, &qsum);
            }
            store_f16(blk, d);
            store_f16(blk + 2, d * (float)qsum);
        }
    }
}

#define MV_NORM_KERNEL(NAME, ROWDOT2)                                                       \
kernel void NAME(PCTENSOR(w), __global const char *act, PCTENSOR(res), PTENSOR(o),          \
                 PTENSOR(sum), PTENSOR(normed), PCTENSOR(nw), PTENSOR(dst),                 \
                 __global char *q8, __global uint *cnt, PK_PARAMS) {                        \
    PK_BEGIN PK_TENSOR(w) PK_ULONG(act_off) PK_ULONG(res_off) PK_ULONG(o_off)               \
    PK_ULONG(sum_off) PK_ULONG(normed_off) PK_ULONG(nw_off) PK_ULONG(dst_off)               \
    PK_ULONG(q8_off) PK_INT(has_q8) PK_FLOAT(eps) PK_ULONG(cnt_off) PK_UINT(n_groups)       \
    LOCAL_ARRAY(float, scratch_all, MVN_WG);                                                \
    LOCAL_ARRAY(float, red, MV_ROWS + MVN_WG);                                              \
    LOCAL_ARRAY(int, last, 1);                                                              \
    const int lane = get_local_id(0) % MV_LANES;                                            \
    const int group = get_local_id(0) / MV_LANES;                                           \
    __local float *scratch = scratch_all + group * MV_LANES;                                \
    const long n = w_ne.s1;                                                                 \
    const long i01 = (get_group_id(0) * MV_ROWS + group) * 2;                               \
    const bool live0 = i01 < n, live1 = i01 + 1 < n;                                        \
    const __global char *w0 = AT(w, 0, live0 ? i01 : 0, 0, 0);                              \
    const __global char *w1 = AT(w, 0, live1 ? i01 + 1 : 0, 0, 0);                          \
    const float2 s = ROWDOT2(w0, w1, act + act_off, w_ne.s0 / QK, lane);                    \
    const float t0 = warp_sum(s.x, scratch);                                                \
    const float t1 = warp_sum(s.y, scratch);                                                \
    if (lane == 0) {                                                                        \
        const __global float *r = (const __global float *)(res + res_off);                  \
        __global float *po = (__global float *)(o + o_off);                                 \
        __global float *ps = (__global float *)(sum + sum_off);                             \
        if (live0) {                                                                        \
            const float x0 = t0 + r[i01];                                                   \
            po[i01] = t0;                                                                   \
            ps[i01] = x0;                                                                   \
        }                                                                                   \
        if (live1) {                                                                        \
            const float x1 = t1 + r[i01 + 1];                                               \
            po[i01 + 1] = t1;                                                               \
            ps[i01 + 1] = x1;                                                               \
        }                                                                                   \
    }                                                                                       \
    /* Publish, count, and let the last group norm the row. No return before */            \
    /* the barriers; `last` is uniform over the group. */                                   \
    device_fence();                                                                         \
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);                                    \
    volatile __global uint *ctr = (volatile __global uint *)(cnt + cnt_off / 4);            \
    if (get_local_id(0) == 0) *last = atomic_inc(ctr) == n_groups - 1;                      \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    const int is_last = *last;                                                              \
    if (is_last) device_fence();                                                            \
    mvn_norm_row(is_last, (const volatile __global float *)(sum + sum_off),                 \
                 (const __global float *)(nw + nw_off), (__global float *)(normed + normed_off), \
                 (__global float *)(dst + dst_off), q8 + q8_off, has_q8, n, eps, red);      \
    /* Every group has counted: nobody else touches the counter in this */                 \
    /* launch, and the next one sees 0. */                                                  \
    if (is_last && get_local_id(0) == 0) atomic_xchg(ctr, 0u);                              \
}

MV_NORM_KERNEL(kernel_mul_mv_norm_q4_0, mv_row2_q4_0)
MV_NORM_KERNEL(kernel_mul_mv_norm_q8_0, mv_row2_q8_0)
MV_NORM_KERNEL(kernel_mul_mv_norm_q4_k, mv_row2_q4_K)
MV_NORM_KERNEL(kernel_mul_mv_norm_q6_k, mv_row2_q6_K)
