// MulMatAddNorm (common.cl + mul_mv.cl + this file): a decode matvec o = W x,
// the residual add after it (sum = o + res) and the RMS norm of the sum with
// its weight (normed = sum / rms(sum), dst = normed * nw, and dst's Q8_1 copy
// for the matmuls that read it), in one launch: llama's O and down
// projections with the norm of the sublayer that follows. The pass is off
// by default: on the H200 the separate norm kernel costs ~5 us inside the
// launch chain, and this kernel costs ~3 us more than the matvec and the
// norm apart, its arrival counter and the tail's round trips (fence,
// atomic, loads of the sum and the weights) being the longer chain
// (docs/perf.md steps 13 and 15).
//
// The matvec part is MV2_KERNEL's: two rows a row group, MV_ROWS row groups a
// work-group; lane 0 writes o and sum for its two rows. The norm needs the
// whole sum, so the work-group that finishes last does it ("last block done",
// as kernel_fa_vec; fa_split.cl has the memory-ordering argument): it reads
// the sum back through volatile pointers, one element of a Q8_1 block a lane
// (mvn_norm_row), and puts the counter back to 0 for the next launch. The
// counter lives in the plan's scratch, zeroed when the plan is built.
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

#define MVN_WARPS (MVN_WG / 32)
// Blocks a warp keeps in registers: rows up to MVN_WARPS * MVN_KEEP * 32
// elements (4096) take one read; longer rows read the rest again.
#define MVN_KEEP 32
// Blocks whose Q8_1 reductions run interleaved (warp_max8 / warp_sum8).
#define MVN_CHUNK 8

// Element `lane` of block b: a warp's loads and stores are whole 128-byte
// lines. The tail first held one block per work-item (32 floats at a
// 128-byte stride across a warp) and took ~12 us on the H200; the probe
// (scripts/probe/tail-latency.c) measured that layout at ~9 us of stores for
// one work-group, and 0.6 us for this one with the weights loaded before any
// store (a load after a store the compiler cannot prove apart waits for the
// store's round trip).
inline long mvn_at(int warp, int k, int lane) {
    return (long)(warp + k * MVN_WARPS) * MVN_QK + lane;
}

// The Q8_1 blocks of MVN_CHUNK normed values y[j] (block warp + (k0 + j) *
// MVN_WARPS, this lane's element), the bytes of store_q8_1_block: d =
// amax / 127, q = rint(y / d), the sum of q exact in float.
inline void mvn_store_q8(const float *y, int k0, int nk, int warp, int lane, __global char *q8,
                         __local float *scratch) {
    float amax[MVN_CHUNK], qsum[MVN_CHUNK];
    int q[MVN_CHUNK];
#pragma unroll
    for (int j = 0; j < MVN_CHUNK; ++j) amax[j] = fabs(y[j]);
    warp_max8(amax, scratch);
#pragma unroll
    for (int j = 0; j < MVN_CHUNK; ++j) {
        const float d = amax[j] / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        q[j] = (int)rint(y[j] * id);
        qsum[j] = (float)q[j];
        amax[j] = d;
    }
    warp_sum8(qsum, scratch);
#pragma unroll
    for (int j = 0; j < MVN_CHUNK; ++j) {
        if (k0 + j < nk) {
            __global char *blk = q8 + (long)(warp + (k0 + j) * MVN_WARPS) * 36;
            blk[4 + lane] = (char)q[j];
            if (lane == 0) {
                store_f16(blk, amax[j]);
                store_f16(blk + 2, amax[j] * qsum[j]);
            }
        }
    }
}

// Chunk k0 of this warp's blocks, normed values nv: normed = nv, dst = nv *
// nw, and their Q8_1 blocks. The weights are loaded before any store
// (normed and dst may share memory with the sum's inputs, so the compiler
// keeps loads after stores in order).
inline void mvn_write_chunk(const float *nv, int k0, int nk, int warp, int lane,
                            const __global float *nw, __global float *normed,
                            __global float *dst, int has_q8, __global char *q8,
                            __local float *scratch) {
    float y[MVN_CHUNK];
#pragma unroll
    for (int j = 0; j < MVN_CHUNK; ++j) y[j] = k0 + j < nk ? nw[mvn_at(warp, k0 + j, lane)] : 0.0f;
#pragma unroll
    for (int j = 0; j < MVN_CHUNK; ++j) {
        y[j] *= nv[j];
        if (k0 + j < nk) {
            normed[mvn_at(warp, k0 + j, lane)] = nv[j];
            dst[mvn_at(warp, k0 + j, lane)] = y[j];
        }
    }
    if (has_q8) mvn_store_q8(y, k0, nk, warp, lane, q8, scratch);
}

// The norm of the whole row, by the last work-group (`last`; the others run
// the same loops with no blocks, since PoCL's barriers in warp_sum need every
// work-item): warp w takes blocks w, w + MVN_WARPS, ..., one element a lane.
inline void mvn_norm_row(int last, const volatile __global float *sum, const __global float *nw,
                         __global float *normed, __global float *dst, __global char *q8,
                         int has_q8, long n, float eps, __local float *red) {
    const int lid = get_local_id(0);
    const int lane = lid % 32, warp = lid / 32;
    __local float *scratch = red + MV_ROWS + warp * 32;
    const int nblk = last ? (int)(n / MVN_QK) : 0;
    // Blocks of this warp, and of the busiest warp (the trip count every
    // work-item runs where the reductions hold barriers).
    const int nk = (nblk - warp + MVN_WARPS - 1) / MVN_WARPS;
    const int nk_max = (nblk + MVN_WARPS - 1) / MVN_WARPS;
    float x[MVN_KEEP];
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < MVN_KEEP; ++k) {
        x[k] = k < nk ? sum[mvn_at(warp, k, lane)] : 0.0f;
        acc += x[k] * x[k];
    }
    for (int k = MVN_KEEP; k < nk; ++k) {
        const float v = sum[mvn_at(warp, k, lane)];
        acc += v * v;
    }
    const float ws = warp_sum(acc, scratch);
    if (lane == 0) red[warp] = ws;
    barrier(CLK_LOCAL_MEM_FENCE);
    float total = 0.0f;
    for (int i = 0; i < MVN_WARPS; ++i) total += red[i];
    const float scale = 1.0f / sqrt(total / (float)n + eps);

    // Rows longer than MVN_KEEP blocks a warp read the rest again, a chunk
    // at a time (each element is read before the one lane that owns it
    // writes it).
#pragma unroll
    for (int k0 = 0; k0 < MVN_KEEP; k0 += MVN_CHUNK) {
        float nv[MVN_CHUNK];
#pragma unroll
        for (int j = 0; j < MVN_CHUNK; ++j) nv[j] = x[k0 + j] * scale;
        mvn_write_chunk(nv, k0, nk, warp, lane, nw, normed, dst, has_q8, q8, scratch);
    }
    for (int k0 = MVN_KEEP; k0 < nk_max; k0 += MVN_CHUNK) {
        float nv[MVN_CHUNK];
#pragma unroll
        for (int j = 0; j < MVN_CHUNK; ++j)
            nv[j] = k0 + j < nk ? sum[mvn_at(warp, k0 + j, lane)] * scale : 0.0f;
        mvn_write_chunk(nv, k0, nk, warp, lane, nw, normed, dst, has_q8, q8, scratch);
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
