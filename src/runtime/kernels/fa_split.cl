// Flash attention for the decode shape on GPUs (common.cl + this file): the KV
// length is split into chunks, one work-group per (query row, chunk, head),
// so a single token fills the GPU. Float accumulation throughout (the
// portable kernel in flash_attn.cl reproduces the CPU backend instead and
// stays on PoCL).
//
// One launch, not a partial kernel and a merge kernel: a launch costs the
// host ~4.5 us on the target GPU. Every group writes its chunk's partial
// softmax state, then counts itself done on a per-(head*ne3 + z, query)
// counter; the group that arrives last merges the chunks ("last block done")
// and puts the counter back to 0 for the next run. The counters live in the
// plan's scratch, zeroed once when the plan is built.
//
// Memory ordering across work-groups (OpenCL 1.2 promises none, so this leans
// on what NVIDIA's OpenCL and PoCL do): a writer's partial stores must be
// visible device-wide before its group's atomic is, so every work-item fences
// (mem_fence, plus membar.gl on NVIDIA, where mem_fence is not known to order
// against other SMs) before the group barrier that precedes the atomic. The
// merging group fences again after it saw the final count, and reads the
// partials through volatile pointers: NVIDIA's L1 is not coherent across SMs,
// and a volatile load bypasses it. Partial state per (head*ne3 + z, query,
// chunk): M, S, then DV floats.

#define FA_WG 64
#define FA_TILE 64
#define FA_MAX_D 256
#define FA_PER (FA_MAX_D / FA_WG)
#define FA_QK8_1 32
#define FA_Q8_1_BYTES 36
// Chunks whose partial state the merge loads at once: one accumulator
// element a chunk (the single-row kernels), or four (the GQA kernel's
// merge, whose groups hold up to 16 rows). The merge is inlined into its
// kernel, so its loads in flight count in the kernel's registers: the wide
// batch in the vector kernels took kernel_fa_vec_d128 from 167 to 222
// registers, two groups a compute unit instead of three (docs/perf.md
// step 41).
#define FA_MERGE_BATCH 8
#define FA_MERGE_BATCH_WIDE 16
// 1: a group publishes its chunk with one device fence instead of one a
// work-item (fa_publish_merge_rows; POLYCL_FA_ONE_FENCE=0 builds with 0).
#ifndef FA_ONE_FENCE
#define FA_ONE_FENCE 1
#endif
// A chunk's partial state: M, S, two unused floats, then the accumulator
// (FA_ACC floats in, so that it is 16-byte aligned and the merge takes four
// elements a load), padded to a multiple of 4 floats; the host's
// plan/flash_attn.rs `state_floats` is the same.
#define FA_ACC 4
inline long fa_state_floats(long DV) { return FA_ACC + ((DV + 3) & ~3L); }

// Chunk c's partial state of row `row` ((head + n_head * z) * n_q + query).
inline __global float *fa_state_at(__global float *part, ulong part_off, long row, int n_chunks,
                                   int c, long DV) {
    return part + part_off / 4 + (row * n_chunks + c) * fa_state_floats(DV);
}

// Accumulator element d of the state at `st`, and its M and S with element 0
// (the kernels whose groups hold several rows write a row's state so).
inline void fa_state_store(__global float *st, int d, float M, float S, float a) {
    if (d == 0) {
        st[0] = M;
        st[1] = S;
    }
    st[FA_ACC + d] = a;
}

inline float fa_group_max(float v, __local float *red) {
    const int l = get_local_id(0);
    red[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = FA_WG / 2; s > 0; s >>= 1) {
        if (l < s) red[l] = fmax(red[l], red[l + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline float fa_group_sum(float v, __local float *red) {
    const int l = get_local_id(0);
    red[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = FA_WG / 2; s > 0; s >>= 1) {
        if (l < s) red[l] += red[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

// The merge's loads for chunks c0 .. c0 + B - 1 (past the last chunk: the
// last one again, which the caller drops), all issued before any is used:
// each chunk's M and S, and its W floats from element `at` of the
// accumulator (W is 4 or 1). `p` is the row's first chunk state, `st`
// floats apart.
inline void fa_merge_load(const volatile __global float *p, int c0, int n_chunks, long st,
                          long at, const int W, const int B, float *m, float *s, float4 *x) {
#pragma unroll
    for (int j = 0; j < B; ++j) {
        const volatile __global float *q = p + min(c0 + j, n_chunks - 1) * st;
        m[j] = q[0];
        s[j] = q[1];
        if (W == 4)
            x[j] = *(const volatile __global float4 *)(q + FA_ACC + at);
        else
            x[j] = (float4)(q[FA_ACC + at], 0.0f, 0.0f, 0.0f);
    }
}

// Every chunk's state of one row folded into the softmax-weighted sum of W
// accumulator elements from `at`: M, S and the elements kept online, one
// batch of B chunks' loads at a time. Loops that used each volatile load
// before issuing the next waited a round trip per chunk (docs/perf.md step
// 22); a pass for (M, S) before the one for the elements was one more
// round trip (step 36).
inline float4 fa_merge_elems(const volatile __global float *p, int n_chunks, long st, long at,
                             const int W, const int B) {
    float Mx = -INFINITY, Sx = 0.0f;
    float4 a = (float4)(0.0f);
    for (int c0 = 0; c0 < n_chunks; c0 += B) {
        float mc[FA_MERGE_BATCH_WIDE], sc[FA_MERGE_BATCH_WIDE];
        float4 vc[FA_MERGE_BATCH_WIDE];
        fa_merge_load(p, c0, n_chunks, st, at, W, B, mc, sc, vc);
#pragma unroll
        for (int j = 0; j < B; ++j) {
            if (c0 + j >= n_chunks || mc[j] == -INFINITY) continue;
            if (mc[j] > Mx) {
                const float f = exp(Mx - mc[j]);
                Sx = Sx * f + sc[j];
                a = a * f + vc[j];
                Mx = mc[j];
            } else {
                const float f = exp(mc[j] - Mx);
                Sx += sc[j] * f;
                a += vc[j] * f;
            }
        }
    }
    return Sx == 0.0f ? (float4)(0.0f) : a / Sx;
}

// dst's Q8_1 blocks (36 bytes) from `outs` (nrows * DV floats, row r is
// query iq0 + r / G of head h0 + r % G), the bytes of kernel_quantize_q8_1 for
// finite values: a warp a block, a work-item an element. One work-item
// walking a block's 32 floats was a serial tail on every merging group.
// Called by every work-item of the group (warp_max and warp_sum hold group
// barriers off NVIDIA); `red` holds wg floats.
inline void fa_store_q8_rows(__local const float *outs, __local float *red, int nrows, int DV,
                             long h0, int G, long iq0, long z, long4 dst_ne, __global char *q8,
                             ulong q8_off, int wg) {
    const int l = get_local_id(0);
    const int lane = l % 32, warp = l / 32, blocks = DV / FA_QK8_1;
    for (int b0 = 0; b0 < nrows * blocks; b0 += wg / 32) {
        const int b = b0 + warp, r = b / blocks;
        const float x = b < nrows * blocks ? outs[b * FA_QK8_1 + lane] : 0.0f;
        const float amax = warp_max(fabs(x), red + warp * 32);
        const float d = qk_div(amax, 127.0f);
        const float id = (amax != 0.0f) ? qk_div(127.0f, amax) : 0.0f;
        const float vq = rint(x * id);
        const int qi = (isnan(vq) || fabs(vq) >= 2147483648.0f) ? INT_MIN : (int)vq;
        // |qi| <= 127 for finite values, so the float sum is exact.
        const float qsum = warp_sum((float)qi, red + warp * 32);
        if (b < nrows * blocks) {
            // dst is contiguous: (0, h, iq, z) is element DV * (h + n_head * (iq + n_q * z)).
            const long h = h0 + r % G, iq = iq0 + r / G;
            const long blk = blocks * (h + dst_ne.s1 * (iq + dst_ne.s2 * z)) + b - r * blocks;
            __global char *y = q8 + q8_off + (ulong)blk * FA_Q8_1_BYTES;
            y[4 + lane] = (char)clamp(qi, -128, 127);
            if (lane == 0) {
                store_f16(y, d);
                store_f16(y + 2, d * qsum);
            }
        }
    }
}

// 1/sqrt(rot) for the rotation's widths (powers of 4, passes/fuse/
// fa_rotation.rs): a power of two, so the product is the one
// kernel_hadamard_f32 makes with the host's scale, bit for bit.
inline float fa_rotation_scale(int rot) { return ldexp(1.0f, -((31 - clz(rot)) / 2)); }

// llama's rotation of the attention's output (quantized V caches): the rows
// of `outs` (nrows of DV floats, already times fa_rotation_scale) by the
// rot x rot Hadamard matrix in runs of rot, as kernel_hadamard_f32 does it
// (fwht_runs), then into dst at row r's (head h0 + r % G, query iq0 + r / G).
// Every work-item of the group calls it.
inline void fa_rotate_rows(__local float *outs, int nrows, int DV, long h0, int G, long iq0,
                           long z, TENSOR(dst), int rot, int wg) {
    fwht_runs(outs, nrows * DV, rot, wg);
    for (int e = get_local_id(0); e < nrows * DV; e += wg) {
        const int r = e / DV, d = e - r * DV;
        store_f32(AT(dst, d, h0 + r % G, iq0 + r / G, z), outs[e]);
    }
}

// Publishes this group's chunks, counts them on one counter, and lets the
// last group to arrive merge every chunk into dst (and its Q8_1 copy).
// The group holds `nrows` rows: row r is query iq0 + r / G of head
// h0 + r % G (G query heads that share a KV head, fa_gqa.cl; 1 elsewhere),
// whose state sits at part row (h + n_head * z) * n_q + iq, and `row0` (row
// 0's) is the counter. Called by every work-item of the group; `outs` is
// local memory of at least nrows * DV floats that is no longer read, `red`
// of wg floats. `W` and `B` (constants): accumulator elements a work-item,
// 1 or 4 (DV % 4 == 0), and chunks a batch of the merge's loads, at most
// FA_MERGE_BATCH_WIDE. `rot` (0: none): dst and the Q8_1 copy take the
// rows rotated by the rot x rot Hadamard matrix (fa_rotate_rows).
inline void fa_publish_merge_rows(__global float *part, ulong part_off, __global uint *cnt,
                                  ulong cnt_off, long row0, int n_chunks, int DV, long h0,
                                  int G, int nrows, long iq0, long n_head, long n_q, long z,
                                  TENSOR(dst), int has_q8, __global char *q8, ulong q8_off,
                                  int rot,
                                  __local float *outs, __local float *red, __local int *last,
                                  int wg, const int W, const int B) {
    const int l = get_local_id(0);
    // Publish, count, and let the last group of these rows merge. No
    // return before the barriers (PoCL 3.1 miscompiles that); `last` is
    // uniform over the group. A lone chunk is its own last group: it needs
    // its partial state visible to itself only, not the device-wide fence and
    // the counter's round trip.
    // With FA_ONE_FENCE (POLYCL_FA_ONE_FENCE) the group's first work-item
    // alone fences, after the barrier that orders the others' stores before
    // it (PTX's fences are cumulative): CUDA's grid sync, and the hand-off's
    // arrival, take that form. Without it every work-item fences.
    volatile __global uint *ctr = (volatile __global uint *)(cnt + cnt_off / 4 + row0);
    if (!FA_ONE_FENCE && n_chunks > 1) device_fence();
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (l == 0) {
        int is_last = 1;
        if (n_chunks > 1) {
            if (FA_ONE_FENCE) device_fence();
            is_last = atomic_inc(ctr) == (uint)(n_chunks - 1);
            if (FA_ONE_FENCE && is_last) device_fence();
        }
        *last = is_last;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int merge = *last;
    if (merge) {
        if (!FA_ONE_FENCE && n_chunks > 1) device_fence();
        // Every row's elements at once, W a work-item (fa_merge_elems), so
        // rows add no round trips; a merging group of the GQA kernel holds
        // up to 16 rows.
        const int per_row = DV / W;
        const long st = fa_state_floats(DV);
        for (int e = l; e < nrows * per_row; e += wg) {
            const int r = e / per_row, d = W * (e - r * per_row);
            const long h = h0 + r % G, iq = iq0 + r / G;
            const volatile __global float *p =
                fa_state_at(part, part_off, (h + n_head * z) * n_q + iq, n_chunks, 0, DV);
            const float4 res = fa_merge_elems(p, n_chunks, st, d, W, B);
            const float rv[4] = {res.x, res.y, res.z, res.w};
            for (int i = 0; i < W; ++i) {
                if (rot) {
                    outs[r * DV + d + i] = rv[i] * fa_rotation_scale(rot);
                } else {
                    store_f32(AT(dst, d + i, h, iq, z), rv[i]);
                    if (has_q8) outs[r * DV + d + i] = rv[i];
                }
            }
        }
        // Every group of these rows has counted, so nobody else touches the
        // counter in this launch; the next launch sees 0.
        if (l == 0 && n_chunks > 1) atomic_xchg(ctr, 0u);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (merge && rot)
        fa_rotate_rows(outs, nrows, DV, h0, G, iq0, z, dst, dst_off, dst_ne, dst_nb, rot, wg);
    if (merge && has_q8)
        fa_store_q8_rows(outs, red, nrows, DV, h0, G, iq0, z, dst_ne, q8, q8_off, wg);
}

// fa_publish_merge_rows for the one row (query iq of head h) of a group.
inline void fa_publish_merge(__global float *part, ulong part_off, __global uint *cnt,
                             ulong cnt_off, long row, int n_chunks, long DV, long h, long iq,
                             long z, long n_head, long n_q, TENSOR(dst), int has_q8,
                             __global char *q8, ulong q8_off, int rot, __local float *outs,
                             __local float *red, __local int *last, int wg) {
    fa_publish_merge_rows(part, part_off, cnt, cnt_off, row, n_chunks, (int)DV, h, 1, 1, iq,
                          n_head, n_q, z, dst, dst_off, dst_ne, dst_nb, has_q8, q8, q8_off, rot,
                          outs, red, last, wg, 1, FA_MERGE_BATCH);
}

// The split kernels' signature, and their scalars and frame (which query
// row, chunk, head and KV head this group computes), the same for both.
#define FA_SPLIT_BUFS(R, W)                                                                 \
    R(const char, q) R(const char, k) R(const char, v) R(const char, mask) W(float, part)   \
    W(uint, cnt) W(char, dst) W(char, q8)
#define FA_SPLIT_ARGS PK_SIG(FA_SPLIT_BUFS)
#define FA_SPLIT_UNPACK PK_BEGIN_BUFS(FA_SPLIT_BUFS) FA_SPLIT_SCALARS
// The scalars alone, for a kernel that binds the buffers itself (attn_oh.cl).
#define FA_SPLIT_SCALARS                                                                    \
    PK_TENSOR(q) PK_TENSOR(k) PK_TENSOR(v) PK_TENSOR(mask) PK_INT(has_mask)                 \
    PK_ULONG(part_off) PK_ULONG(cnt_off) PK_INT(chunk) PK_INT(n_chunks) PK_FLOAT(scale)     \
    PK_FLOAT(max_bias) PK_FLOAT(m0) PK_FLOAT(m1) PK_UINT(n_head_log2) PK_FLOAT(softcap)     \
    PK_TENSOR(dst) PK_INT(has_q8) PK_ULONG(q8_off) PK_INT(rot)
#define FA_SPLIT_PARAMS                                                                     \
    FA_SPLIT_UNPACK                                                                         \
    const int l = get_local_id(0);                                                          \
    const long iq = get_group_id(1) / n_chunks;                                             \
    const int c = get_group_id(1) % n_chunks;                                               \
    const long hz = get_group_id(2);                                                        \
    const long h = hz % q_ne.s2, z = hz / q_ne.s2;                                          \
    const long hk = h / (q_ne.s2 / k_ne.s2);                                                \
    const long DK = q_ne.s0, DV = v_ne.s0, n_kv = k_ne.s1;                                  \
    const long row = hz * q_ne.s1 + iq;                                                     \
    const float slope = alibi_slope((uint)h, max_bias, m0, m1, n_head_log2);

// This group's partial softmax state: M and S written (by work-item 0), the
// returned DV floats of the accumulator for the caller to fill.
inline __global float *fa_chunk_state(__global float *part, ulong part_off, long row,
                                      int n_chunks, int c, long DV, float M, float S) {
    __global float *o = fa_state_at(part, part_off, row, n_chunks, c, DV);
    if (get_local_id(0) == 0) {
        o[0] = M;
        o[1] = S;
    }
    return o + FA_ACC;
}

// global {64, n_q * n_chunks, n_head * ne3}, local {64, 1, 1}. `part` and
// `cnt` are the plan's scratch; `q8` (when has_q8) receives dst as Q8_1
// blocks in dst's element order, which the caller checked is contiguous F32
// with DV % 32 == 0.
#if !defined(POLYCL_STEP) && !defined(FA_HELPERS_ONLY)
kernel void kernel_fa_split(FA_SPLIT_ARGS) {
    FA_SPLIT_PARAMS
    __local float qs[FA_MAX_D];
    __local float ps[FA_TILE];
    __local float red[FA_WG];
    __local int last;
    for (long d = l; d < DK; d += FA_WG) qs[d] = load_f32(AT(q, d, iq, h, z));
    barrier(CLK_LOCAL_MEM_FENCE);
    float M = -INFINITY, S = 0.0f;
    float acc[FA_PER];
    for (int i = 0; i < FA_PER; ++i) acc[i] = 0.0f;
    const long kv0 = (long)c * chunk, kv1 = min(kv0 + chunk, n_kv);
    for (long t0 = kv0; t0 < kv1; t0 += FA_TILE) {
        const long ic = t0 + l;
        float s = -INFINITY;
        if (ic < kv1) {
            float mv = 0.0f;
            if (has_mask) mv = load_f16(AT(mask, ic, iq, h % mask_ne.s2, z % mask_ne.s3));
            if (mv != -INFINITY) {
                const __global char *kr = AT(k, 0, ic, hk, z);
                float dot = 0.0f;
                if (k_nb.s0 == 2) {
                    for (long d = 0; d + 1 < DK; d += 2) {
                        const float2 kk = vload_half2(0, (const __global half *)(kr + d * 2));
                        dot += qs[d] * kk.x + qs[d + 1] * kk.y;
                    }
                    if (DK & 1) dot += qs[DK - 1] * load_f16(kr + (DK - 1) * 2);
                } else {
                    for (long d = 0; d < DK; ++d) dot += qs[d] * load_f16(kr + d * k_nb.s0);
                }
                s = dot * scale;
                if (softcap != 0.0f) s = softcap * tanh(s);
                s += slope * mv;
            }
        }
        const float mt = fa_group_max(s, red);
        const float Mn = fmax(M, mt);
        const float p = (s == -INFINITY) ? 0.0f : exp(s - Mn);
        ps[l] = p;
        const float ms = (M == -INFINITY) ? 0.0f : exp(M - Mn);
        S = S * ms + fa_group_sum(p, red);
        M = Mn;
        const long nt = min((long)FA_TILE, kv1 - t0);
        for (int i = 0; i < FA_PER; ++i) {
            const long d = l + i * FA_WG;
            if (d >= DV) break;
            float a = acc[i] * ms;
            for (long j = 0; j < nt; ++j) {
                const float pj = ps[j];
                if (pj != 0.0f) a += pj * load_f16(AT(v, d, t0 + j, hk, z));
            }
            acc[i] = a;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global float *o = fa_chunk_state(part, part_off, row, n_chunks, c, DV, M, S);
    for (int i = 0; i < FA_PER; ++i) {
        const long d = l + i * FA_WG;
        if (d < DV) o[d] = acc[i];
    }

    fa_publish_merge(part, part_off, cnt, cnt_off, row, n_chunks, DV, h, iq, z, q_ne.s2, q_ne.s1,
                     dst, dst_off, dst_ne, dst_nb, has_q8, q8, q8_off, rot, qs, red, &last, FA_WG);
}
#endif // POLYCL_STEP

// The warp-cooperative decode kernel: same arguments, grid {FV_WG, n_q *
// n_chunks, n_head * ne3}, local {FV_WG, 1, 1}. A warp (or, for head sizes
// up to 64, each half of it) owns whole keys and values: lane i holds dims
// 4i..4i+3 (+128 per slot) of q and of the accumulator, so a key or value
// row is one 8-byte load per lane, coalesced across the warp, and a score is
// a warp (half-warp) sum. Each of them takes FV_KB keys a
// step and loads their K and V rows together (independent loads, no
// dependent chains), with its own online softmax state; the warps' states
// are merged in local memory at the end. So a step is one round trip, where
// scores for the whole chunk, a group softmax and then the values took two
// (docs/perf.md step 36). The host picks it for F16 K/V with 8-byte aligned
// rows, D <= 256 and D % 4 == 0; a chunk may be any length.
#define FV_WARPS 4
#define FV_WG (FV_WARPS * 32)
#define FV_KB 8 // the most keys a warp a step (lanes_sum_n reduces their scores)
#define FV_SLOTS (FA_MAX_D / 128)

// Four halves as floats, from the 8 bytes that hold them.
inline float4 fv_half4(uint2 u) {
    return vload_half4(0, (const __private half *)&u);
}

// A step's loads for warp `warp`: keys t0 + warp * kpw .. + kpw - 1 of
// the chunk (past its end: its last row again, in bounds, dropped later),
// their mask values and their K and V rows as raw halves, `slots` 8-byte
// words a lane. `kr0`, `vr0` and `mr0` are the chunk's first K row, V row and
// mask value, `ks`, `vs` and `ms` the byte strides between keys: a key's
// address is one 32 x 32 -> 64-bit multiply-add from them, where the
// tensors' full 64-bit strides and shapes held registers (docs/perf.md step 40).
inline void fv_load_step(const __global char *kr0, const __global char *vr0,
                         const __global char *mr0, uint ks, uint vs, uint ms, int has_mask, int nk,
                         int t0, int warp, int lane, int DK, int DV, const int slots,
                         const int lpk, const int kpw, float *mvs, uint2 kraw[FV_KB][FV_SLOTS],
                         uint2 vraw[FV_KB][FV_SLOTS]) {
#pragma unroll
    for (int kb = 0; kb < kpw; ++kb) {
        const uint j = (uint)min(t0 + warp * kpw + kb, nk - 1);
        mvs[kb] = has_mask ? load_f16(mr0 + (ulong)j * ms) : 0.0f;
        const __global char *kr = kr0 + (ulong)j * ks;
        const __global char *vr = vr0 + (ulong)j * vs;
#pragma unroll
        for (int i = 0; i < slots; ++i) {
            const int d = 4 * lane + 4 * lpk * i;
            kraw[kb][i] = d < DK ? *(const __global uint2 *)(kr + d * 2) : (uint2)(0u);
            vraw[kb][i] = d < DV ? *(const __global uint2 *)(vr + d * 2) : (uint2)(0u);
        }
    }
}

// The end of a chunk for the vector bodies, after the barrier that follows
// their stores: `nvw` runs of lanes (a run owns a set of keys) have put their
// softmax state in `wstate` (M, then S scaled to the group's largest M, `M`)
// and their accumulators, scaled alike, in `accs`, `dmax` floats a run. Sums
// the runs and either writes dst (the whole cache in this group) or
// publishes the chunk and lets the last group merge (fa_publish_merge).
// Always inlined: as a plain inline function clang called it from the
// single-row kernels and took kernel_fa_vec from 117 to 184 registers.
inline __attribute__((always_inline)) void
fv_chunk_end(__global float *part, ulong part_off, __global uint *cnt, ulong cnt_off, int n_chunks,
             int c, float M, long iq, long h, long z, long DV, long row, long n_head, long n_q,
             TENSOR(dst), int has_q8, __global char *q8, ulong q8_off, int rot, const int wg,
             const int nvw, const int dmax, __local float *red, __local float *wstate,
             __local float *accs, __local int *last) {
    const int l = get_local_id(0), dv = (int)DV;
    float S = 0.0f;
    for (int w = 0; w < nvw; ++w) S += wstate[2 * w + 1];
    // With `parts` > 1 work-items an element, each sums every parts-th warp
    // into `red` first (red is free: the loop's last use of it came before
    // the barriers above).
    const int parts = min(nvw, wg / dv);
    if (parts > 1 && l < parts * dv) {
        const int d = l % dv;
        float a = 0.0f;
        for (int w = l / dv; w < nvw; w += parts) a += accs[w * dmax + d];
        red[l] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Element d of the chunk's accumulator (the warps' sum).
#define FV_ACC_SUM(d, a)                                                                    \
    float a = 0.0f;                                                                         \
    if (parts > 1)                                                                          \
        for (int p = 0; p < parts; ++p) a += red[p * dv + (d)];                             \
    else                                                                                    \
        for (int w = 0; w < nvw; ++w) a += accs[w * dmax + (d)];
    // The whole cache in this group (uniform over it): dst straight from
    // local memory, without the partial state's write and read back. No
    // return before the helpers' barriers (PoCL 3.1 miscompiles that).
    const int whole = n_chunks == 1;
    if (whole) {
        for (int d = l; d < dv; d += wg) {
            FV_ACC_SUM(d, a)
            const float y = S == 0.0f ? 0.0f : a / S;
            if (rot) {
                accs[d] = y * fa_rotation_scale(rot);
            } else {
                store_f32(AT(dst, d, h, iq, z), y);
                accs[d] = y; // column d of accs is this work-item's alone
            }
        }
    } else {
        __global float *o = fa_chunk_state(part, part_off, row, n_chunks, c, DV, M, S);
        for (int d = l; d < dv; d += wg) {
            FV_ACC_SUM(d, a)
            o[d] = a;
        }
    }
#undef FV_ACC_SUM
    barrier(CLK_LOCAL_MEM_FENCE);
    if (whole) {
        if (rot) fa_rotate_rows(accs, 1, dv, h, 1, iq, z, dst, dst_off, dst_ne, dst_nb, rot, wg);
        if (has_q8)
            fa_store_q8_rows(accs, red, 1, dv, h, 1, iq, z, dst_ne, q8, q8_off, wg);
    } else {
        // accs[0..DV) and red were read above by other work-items: the
        // barrier before this keeps the helper from overwriting them early.
        fa_publish_merge(part, part_off, cnt, cnt_off, row, n_chunks, DV, h, iq, z, n_head,
                         n_q, dst, dst_off, dst_ne, dst_nb, has_q8, q8, q8_off, rot, accs, red,
                         last, wg);
    }
}

// The body of both decode kernels. `slots` (at most FV_SLOTS) is how many
// 128-wide slices of a row a lane holds: 1 for head sizes up to 128, so a
// lane spends no registers on a second slice it never uses (two slices took
// the kernel to 168, docs/perf.md step 36). `prefetch`: a step's loads are
// issued one step ahead, before the previous step's scores and sums, so a
// chunk of n steps waits out about one round trip instead of n (long caches,
// docs/perf.md step 38; a short cache is one step a group, which this does
// not change). `wg` work-items a group, `kpw` keys a (virtual) warp a step
// (at most FV_KB) and `dmax` floats of `accs` a warp: FV_WG, FV_KB and
// FA_MAX_D, or the short-cache shape (FS_* below).
inline void fa_vec_body(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask,
                        __global float *part, ulong part_off, __global uint *cnt, ulong cnt_off,
                        int chunk, int n_chunks, int c, float scale, float softcap, float slope,
                        long iq, long h, long hk, long z, long DK, long DV, long n_kv, long row,
                        TENSOR(dst), int has_q8, __global char *q8, ulong q8_off, int rot,
                        const int slots, const int prefetch, const int lpk, const int wg,
                        const int kpw, const int dmax, __local float *red,
                        __local float *wstate, __local float *accs, __local int *last) {
    const int l = get_local_id(0);
    // A run of `lpk` lanes (a virtual warp: 32, or 16 for head sizes up to
    // 64, so no lane idles) owns a key; lane i of it holds dims 4i..4i+3
    // (+4 lpk per slot).
    const int lane = l % lpk, warp = l / lpk, nvw = wg / lpk;
    __local float *wred = red + warp * lpk;

    float4 qv[FV_SLOTS];
#pragma unroll
    for (int i = 0; i < slots; ++i) {
        const long d = 4 * lane + 4 * lpk * i;
        qv[i] = (float4)(0.0f);
        if (d < DK) {
            const __global char *qp = AT(q, d, iq, h, z);
            qv[i] = (float4)(load_f32(qp), load_f32(qp + q_nb.s0), load_f32(qp + 2 * q_nb.s0),
                             load_f32(qp + 3 * q_nb.s0));
        }
    }
    const long kv0 = (long)c * chunk;
    const int nk = (int)min((long)chunk, n_kv - kv0);
    const int dk = (int)DK, dv = (int)DV;
    const __global char *kr0 = AT(k, 0, kv0, hk, z);
    const __global char *vr0 = AT(v, 0, kv0, hk, z);
    const __global char *mr0 = has_mask ? AT(mask, kv0, iq, h % mask_ne.s2, z % mask_ne.s3) : kr0;
    const uint ks = (uint)k_nb.s1, vs = (uint)v_nb.s1, ms = (uint)mask_nb.s0;

    // Warp w takes keys t0 + w*kpw .. +kpw-1 of each step, loaded
    // together (fv_load_step), with its own online softmax state. Every
    // work-item runs the same steps (lanes_sum_n holds group barriers off
    // NVIDIA).
    float Mw = -INFINITY, Sw = 0.0f;
    float4 acc[FV_SLOTS];
#pragma unroll
    for (int i = 0; i < slots; ++i) acc[i] = (float4)(0.0f);
    float mvs[FV_KB];
    uint2 kraw[FV_KB][FV_SLOTS], vraw[FV_KB][FV_SLOTS];
    if (prefetch)
        fv_load_step(kr0, vr0, mr0, ks, vs, ms, has_mask, nk, 0, warp, lane, dk, dv, slots, lpk,
                     kpw, mvs, kraw, vraw);
    for (int t0 = 0; t0 < nk; t0 += nvw * kpw) {
        float mvn[FV_KB];
        uint2 kn[FV_KB][FV_SLOTS], vn[FV_KB][FV_SLOTS];
        if (!prefetch)
            fv_load_step(kr0, vr0, mr0, ks, vs, ms, has_mask, nk, t0, warp, lane, dk, dv, slots,
                         lpk, kpw, mvs, kraw, vraw);
        else if (t0 + nvw * kpw < nk) // uniform over the group
            fv_load_step(kr0, vr0, mr0, ks, vs, ms, has_mask, nk, t0 + nvw * kpw, warp, lane,
                         dk, dv, slots, lpk, kpw, mvn, kn, vn);
        float dots[FV_KB];
#pragma unroll
        for (int kb = 0; kb < kpw; ++kb) {
            float a = 0.0f;
#pragma unroll
            for (int i = 0; i < slots; ++i) a += dot(qv[i], fv_half4(kraw[kb][i]));
            dots[kb] = a;
        }
        lanes_sum_n(dots, kpw, wred, lpk);
        float sc[FV_KB];
        float mstep = -INFINITY;
#pragma unroll
        for (int kb = 0; kb < kpw; ++kb) {
            const int j = t0 + warp * kpw + kb;
            const float mv = mvs[kb];
            float s = dots[kb] * scale;
            if (softcap != 0.0f) s = softcap * tanh(s);
            s += slope * mv;
            sc[kb] = (j < nk && mv != -INFINITY) ? s : -INFINITY;
            mstep = fmax(mstep, sc[kb]);
        }
        const float Mn = fmax(Mw, mstep);
        if (Mn != -INFINITY) {
            const float f = exp(Mw - Mn);
            Sw *= f;
#pragma unroll
            for (int i = 0; i < slots; ++i) acc[i] *= f;
#pragma unroll
            for (int kb = 0; kb < kpw; ++kb) {
                const float p = sc[kb] == -INFINITY ? 0.0f : exp(sc[kb] - Mn);
                Sw += p;
#pragma unroll
                for (int i = 0; i < slots; ++i) {
                    // A masked row may hold anything (the CPU backend never
                    // reads it): p == 0 must not turn a NaN or inf into the sum.
                    if (4 * lane + 4 * lpk * i < dv && p != 0.0f)
                        acc[i] += p * fv_half4(vraw[kb][i]);
                }
            }
            Mw = Mn;
        }
        if (prefetch && t0 + nvw * kpw < nk) {
#pragma unroll
            for (int kb = 0; kb < kpw; ++kb) {
                mvs[kb] = mvn[kb];
#pragma unroll
                for (int i = 0; i < slots; ++i) {
                    kraw[kb][i] = kn[kb][i];
                    vraw[kb][i] = vn[kb][i];
                }
            }
        }
    }
    // The chunk's state: each warp's scaled to the group's largest M by its
    // own factor (one exp a warp), then the accumulators summed over the
    // warps by every work-item, `parts` of them an element. One work-item an
    // element walking every warp with an exp each was a serial tail of ~1 us
    // in the 512-wide kernels' 32 warps.
    if (lane == 0) wstate[2 * warp] = Mw;
    barrier(CLK_LOCAL_MEM_FENCE);
    float M = -INFINITY;
    for (int w = 0; w < nvw; ++w) M = fmax(M, wstate[2 * w]);
    const float f = Mw == -INFINITY ? 0.0f : exp(Mw - M);
    if (lane == 0) wstate[2 * warp + 1] = Sw * f;
#pragma unroll
    for (int i = 0; i < slots; ++i) {
        const long d = 4 * lane + 4 * lpk * i;
        if (d < DV) vstore4(acc[i] * f, 0, accs + warp * dmax + d);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fv_chunk_end(part, part_off, cnt, cnt_off, n_chunks, c, M, iq, h, z, DV, row, q_ne.s2, q_ne.s1,
                 dst, dst_off, dst_ne, dst_nb, has_q8, q8, q8_off, rot, wg, nvw, dmax, red, wstate,
                 accs, last);
}

#define FV_KERNEL_SHAPED(NAME, SLOTS, PREFETCH, LPK, WG, KPW, DMAX)                         \
kernel void NAME(FA_SPLIT_ARGS) {                                                           \
    FA_SPLIT_PARAMS                                                                         \
    LOCAL_ARRAY(float, red, WG);                                                            \
    LOCAL_ARRAY(float, wstate, 2 * ((WG) / (LPK)));                                         \
    LOCAL_ARRAY(float, accs, ((WG) / (LPK)) * (DMAX));                                      \
    LOCAL_ARRAY(int, last, 1);                                                              \
    (void)l;                                                                                \
    fa_vec_body(q, q_off, q_ne, q_nb, k, k_off, k_ne, k_nb, v, v_off, v_ne, v_nb, mask,     \
                mask_off, mask_ne, mask_nb, has_mask, part, part_off, cnt, cnt_off, chunk,  \
                n_chunks, c, scale, softcap, slope, iq, h, hk, z, DK, DV, n_kv, row, dst,   \
                dst_off, dst_ne, dst_nb, has_q8, q8, q8_off, rot, SLOTS, PREFETCH, LPK, WG, KPW, \
                DMAX, red, wstate, accs, last);                                             \
    PK_END                                                                                  \
}
#define FV_KERNEL(NAME, SLOTS, PREFETCH, LPK)                                               \
    FV_KERNEL_SHAPED(NAME, SLOTS, PREFETCH, LPK, FV_WG, FV_KB, FA_MAX_D)

// Head sizes up to 256, and up to 128 (the host picks this one there). The
// step program runs kernel_fa_vec for both (runtime/step.rs PHASE_ALIASES).
// FA_HELPERS_ONLY: another program (fa_gqa.cl) takes the helpers above.
#ifndef FA_HELPERS_ONLY
FV_KERNEL(kernel_fa_vec, FV_SLOTS, 0, 32)
#endif
#if !defined(POLYCL_STEP) && !defined(FA_HELPERS_ONLY)
FV_KERNEL(kernel_fa_vec_d128, 1, 1, 32)
// Head sizes up to 64: a key a 16-lane run, so a warp takes two keys at once
// and no lane idles (with 32 lanes a key, lanes 16-31 held nothing).
FV_KERNEL(kernel_fa_vec_d64, 1, 1, 16)
#endif

// Long caches (plan/flash_attn.rs `long_kernel`), in the shape of llama.cpp's
// CUDA vector kernel. fa_vec_body gives a key a whole warp and every lane
// the scores and exponentials of all its warp's keys: at 16384 cached
// positions it read the 7B's K and V at ~2 TB/s where CUDA's kernel reads
// them at ~4 (docs/perf.md steps 41 and 74). Here a run of FL_LK lanes takes
// a key with 16-byte loads (lane t holds dimensions 8t + 64p .. + 7 of
// piece p: one piece at head size 64, two at 128), so a key's sum is three
// shuffle levels and a warp sums four keys at once; after its run's FL_LK
// keys each lane keeps one key's score (work-item l: key t0 + l of a step),
// so a step's softmax is one exponential a lane. The run then takes the V
// rows of its own FL_LK keys with their weights shared from the lanes that
// hold them. Nothing is loaded a step ahead: a step's 16 K and V loads a
// lane are independent, and loading the next step's into the registers the
// step frees took the kernel from 168 to 217 registers on the H200 and made
// it slower (docs/perf.md step 74). DK = DV = 64 * pieces; rows 16-byte
// aligned.
//
// With `heads` > 1 a group takes that many query heads of one KV head (the
// `_gqa<heads>` kernels): each K and V row it loads serves all of them,
// where a group a head would read every row G times. (The tensor-core GQA
// kernel reads a row once, but read the 1B's cache, G = 8, at ~0.5 TB/s:
// docs/perf.md step 75.) A key's K and V halves become floats once for
// every head; heads * pieces <= FL_HEADS keeps the heads' q and
// accumulators to 64 registers. Their merge takes 8 chunks a batch: the GQA
// kernel's 16 took them from ~110 registers to ~200 (clang's build).
// Grid {FL_WG, n_q * n_chunks, n_head / heads * ne3}.
#define FL_WG 128
#define FL_LK 8
#define FL_RUNS (FL_WG / FL_LK)
#define FL_PIECES 2
#define FL_HEADS 4

inline float8 fl_half8(uint4 u) {
    return vload_half8(0, (const __private half *)&u);
}

// Quantized caches, read as they lie (plan/flash_attn.rs `blocks_read`):
// `kv` FL_Q8_0 or FL_Q4_0 (FL_F16: 16-byte rows of halves). A lane's 8
// elements of a row (64 p + 8 t) lie in block 2 p + t / 4, rows 2-byte
// aligned, so a lane loads the block's scale and its quants as halfwords.
// Raw: the scale bits, 8 bytes of quants, (Q4_0) the nibbles' shift.
#define FL_F16 0
#define FL_Q8_0 1
#define FL_Q4_0 2

// Q8_0, 34 bytes a block: quants 8 (t % 4) ..; float(q) * d as
// dequantize_row_q8_0.
inline uint4 fl_q8_raw(const __global char *blk, int t) {
    const __global ushort *qs = (const __global ushort *)(blk + 2 + 8 * (t % 4));
    return (uint4)(*(const __global ushort *)blk, qs[0] | ((uint)qs[1] << 16),
                   qs[2] | ((uint)qs[3] << 16), 0u);
}

inline float8 fl_q8_8(uint4 u) {
    const ushort d = (ushort)u.x;
    return convert_float8(as_char8((uint2)(u.y, u.z))) * vload_half(0, (const __private half *)&d);
}

// Q4_0, 18 bytes a block: elements 8 (t % 4) .. are the low nibbles (t % 4
// < 2) or high nibbles of bytes 8 (t % 2) ..; (q - 8) * d as
// dequantize_row_q4_0.
inline uint4 fl_q4_raw(const __global char *blk, int t) {
    const __global ushort *qs = (const __global ushort *)(blk + 2 + 8 * (t % 2));
    return (uint4)(*(const __global ushort *)blk, qs[0] | ((uint)qs[1] << 16),
                   qs[2] | ((uint)qs[3] << 16), t % 4 < 2 ? 0u : 4u);
}

inline float8 fl_q4_8(uint4 u) {
    const ushort d = (ushort)u.x;
    const uchar8 b = as_uchar8((uint2)(u.y, u.z));
    const uchar8 q = (b >> (uchar8)((uchar)u.w)) & (uchar8)((uchar)15);
    return (convert_float8(q) - 8.0f) * vload_half(0, (const __private half *)&d);
}

// Bytes of a quantized block (a row's 32 elements).
inline int fl_block_bytes(const int kv) { return kv == FL_Q8_0 ? 34 : 18; }

// A lane's 8 elements of piece p of the row at `row` (at its first block
// for a quantized cache, its byte 16 t for F16), raw.
inline uint4 fl_raw(const __global char *row, int p, int t, const int kv) {
    if (kv == FL_Q8_0) return fl_q8_raw(row + 68 * p, t);
    if (kv == FL_Q4_0) return fl_q4_raw(row + 36 * p, t);
    return *(const __global uint4 *)(row + 128 * p);
}

inline float8 fl_row8(uint4 u, const int kv) {
    if (kv == FL_Q8_0) return fl_q8_8(u);
    if (kv == FL_Q4_0) return fl_q4_8(u);
    return fl_half8(u);
}

// Query heads h .. h + heads - 1 (all of KV head hk), query iq, chunk c.
inline void fa_long_body(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask,
                         __global float *part, ulong part_off, __global uint *cnt, ulong cnt_off,
                         int chunk, int n_chunks, int c, float scale, float softcap,
                         float max_bias, float m0, float m1, uint n_head_log2, long iq, long h,
                         long hk, long z, TENSOR(dst), int has_q8, __global char *q8,
                         ulong q8_off, int rot, const int pieces, const int heads, const int kv,
                         __local float *red,
                         __local float *wstate, __local float *accs, __local int *last) {
    const int l = get_local_id(0), warp = l / 32, run = l / FL_LK, t = l % FL_LK;
    const long DV = v_ne.s0, n_kv = k_ne.s1, n_head = q_ne.s2, n_q = q_ne.s1;
    __local float *rred = red + run * FL_LK;
    __local float *wred = red + warp * 32;
    float8 qv[FL_HEADS][FL_PIECES];
    float slope[FL_HEADS];
#pragma unroll
    for (int g = 0; g < heads; ++g) {
        slope[g] = alibi_slope((uint)(h + g), max_bias, m0, m1, n_head_log2);
#pragma unroll
        for (int p = 0; p < pieces; ++p) {
            const __global char *qp = AT(q, 8 * t + 64 * p, iq, h + g, z);
            float r[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) r[e] = load_f32(qp + e * q_nb.s0);
            qv[g][p] = (float8)(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
        }
    }
    const long kv0 = (long)c * chunk;
    const int nk = (int)min((long)chunk, n_kv - kv0);
    const __global char *kr0 = AT(k, 0, kv0, hk, z);
    const __global char *vr0 = AT(v, 0, kv0, hk, z);
    const __global char *mr0 = has_mask ? AT(mask, kv0, iq, h % mask_ne.s2, z % mask_ne.s3) : kr0;
    const uint ks = (uint)k_nb.s1, vs = (uint)v_nb.s1, ms = (uint)mask_nb.s0;
    // Head h + g's mask row from head h's (a mask may differ by head).
    long mho[FL_HEADS];
#pragma unroll
    for (int g = 0; g < heads; ++g)
        mho[g] = g == 0 ? 0 : ((h + g) % mask_ne.s2 - h % mask_ne.s2) * (long)mask_nb.s2;

    float Mw[FL_HEADS], Sl[FL_HEADS];
    float8 acc[FL_HEADS][FL_PIECES];
#pragma unroll
    for (int g = 0; g < heads; ++g) {
        Mw[g] = -INFINITY;
        Sl[g] = 0.0f;
#pragma unroll
        for (int p = 0; p < pieces; ++p) acc[g][p] = (float8)(0.0f);
    }
    // Every work-item runs the same steps (the helpers hold group barriers
    // off NVIDIA).
    for (int t0 = 0; t0 < nk; t0 += FL_WG) {
        uint4 kraw[FL_LK][FL_PIECES], vraw[FL_LK][FL_PIECES];
#pragma unroll
        for (int i = 0; i < FL_LK; ++i) {
            // Past the chunk's end: its last row again, in bounds, dropped below.
            const uint j = (uint)min(t0 + run * FL_LK + i, nk - 1);
            const uint lane = kv == FL_F16 ? 16 * t : fl_block_bytes(kv) * (t / 4);
            const __global char *kr = kr0 + (ulong)j * ks + lane;
            const __global char *vr = vr0 + (ulong)j * vs + lane;
#pragma unroll
            for (int p = 0; p < pieces; ++p) {
                kraw[i][p] = fl_raw(kr, p, t, kv);
                vraw[i][p] = fl_raw(vr, p, t, kv);
            }
        }
        const int jm = t0 + l;
        float mv[FL_HEADS];
#pragma unroll
        for (int g = 0; g < heads; ++g) {
            mv[g] = has_mask ? load_f16(mr0 + mho[g] + (ulong)min(jm, nk - 1) * ms) : 0.0f;
        }
        // dots[i * heads + g]: key i of this run, head g; spread so that lane
        // t holds its key's (key t0 + l's) score of every head in dots[g].
        float dots[FL_LK * FL_HEADS];
#pragma unroll
        for (int i = 0; i < FL_LK; ++i) {
            float8 kk[FL_PIECES];
#pragma unroll
            for (int p = 0; p < pieces; ++p) kk[p] = fl_row8(kraw[i][p], kv);
#pragma unroll
            for (int g = 0; g < heads; ++g) {
                float a = 0.0f;
#pragma unroll
                for (int p = 0; p < pieces; ++p)
                    a += dot(qv[g][p].lo, kk[p].lo) + dot(qv[g][p].hi, kk[p].hi);
                dots[i * heads + g] = a;
            }
        }
        if (heads == 1) {
            // The sums every lane gets, then its own key's: the form
            // measured on the H200 (step 74); lanes_sum_spread, 17 shuffles
            // fewer, has not run on a GPU yet (docs/perf.md step 75).
            lanes_sum_n(dots, FL_LK, rred, FL_LK);
#pragma unroll
            for (int i = 1; i < FL_LK; ++i) dots[0] = t == i ? dots[i] : dots[0];
        } else {
            lanes_sum_spread(dots, FL_LK * heads, rred, FL_LK);
        }
        float pk[FL_HEADS][FL_LK];
#pragma unroll
        for (int g = 0; g < heads; ++g) {
            float s = dots[g] * scale;
            if (softcap != 0.0f) s = softcap * tanh(s);
            s += slope[g] * mv[g];
            s = (jm < nk && mv[g] != -INFINITY) ? s : -INFINITY;
            const float Mn = fmax(Mw[g], warp_max(s, wred));
            // A warp with every score so far masked keeps M = -inf and adds nothing.
            const float f = Mn == -INFINITY ? 1.0f : exp(Mw[g] - Mn);
            const float pr = s == -INFINITY ? 0.0f : exp(s - Mn);
            Sl[g] = Sl[g] * f + pr;
#pragma unroll
            for (int p = 0; p < pieces; ++p) acc[g][p] *= f;
            Mw[g] = Mn;
            lanes_share(pr, pk[g], FL_LK, rred, FL_LK);
        }
#pragma unroll
        for (int i = 0; i < FL_LK; ++i) {
#pragma unroll
            for (int g = 0; g < heads; ++g) {
                // A masked row may hold anything (the CPU backend never
                // reads it): p == 0 must not turn a NaN or inf into the sum.
                if (pk[g][i] != 0.0f) {
#pragma unroll
                    for (int p = 0; p < pieces; ++p)
                        acc[g][p] += pk[g][i] * fl_row8(vraw[i][p], kv);
                }
            }
        }
    }
    // A run's state of each head: its lanes' keys' S, its accumulator over its
    // keys, both scaled to the group's largest M of that head.
    lanes_sum_n(Sl, heads, rred, FL_LK);
    if (t == 0) {
#pragma unroll
        for (int g = 0; g < heads; ++g) wstate[2 * (g * FL_RUNS + run)] = Mw[g];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float Mg[FL_HEADS];
#pragma unroll
    for (int g = 0; g < heads; ++g) {
        float M = -INFINITY;
        for (int r = 0; r < FL_RUNS; ++r) M = fmax(M, wstate[2 * (g * FL_RUNS + r)]);
        Mg[g] = M;
        const float f = Mw[g] == -INFINITY ? 0.0f : exp(Mw[g] - M);
        if (t == 0) wstate[2 * (g * FL_RUNS + run) + 1] = Sl[g] * f;
#pragma unroll
        for (int p = 0; p < pieces; ++p)
            vstore8(acc[g][p] * f, 0, accs + (g * FL_RUNS + run) * DV + 8 * t + 64 * p);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (heads == 1) {
        fv_chunk_end(part, part_off, cnt, cnt_off, n_chunks, c, Mg[0], iq, h, z, DV,
                     (h + n_head * z) * n_q + iq, n_head, n_q, dst, dst_off, dst_ne, dst_nb,
                     has_q8, q8, q8_off, rot, FL_WG, FL_RUNS, (int)DV, red, wstate, accs, last);
    } else {
        // Each head's chunk state, the runs summed, then published and merged
        // for every head at once.
        for (int e = l; e < heads * DV; e += FL_WG) {
            const int g = e / DV, d = e - g * DV;
            float M = -INFINITY, S = 0.0f, a = 0.0f;
            for (int r = 0; r < FL_RUNS; ++r) M = fmax(M, wstate[2 * (g * FL_RUNS + r)]);
            for (int r = 0; r < FL_RUNS; ++r) {
                S += wstate[2 * (g * FL_RUNS + r) + 1];
                a += accs[(g * FL_RUNS + r) * DV + d];
            }
            fa_state_store(fa_state_at(part, part_off, (h + g + n_head * z) * n_q + iq, n_chunks,
                                       c, DV),
                           d, M, S, a);
        }
        // accs is read above by other work-items: the barrier inside the
        // helper comes before it writes `outs`.
        fa_publish_merge_rows(part, part_off, cnt, cnt_off, (h + n_head * z) * n_q + iq, n_chunks,
                              (int)DV, h, heads, heads, iq, n_head, n_q, z, dst, dst_off, dst_ne,
                              dst_nb, has_q8, q8, q8_off, rot, accs, red, last, FL_WG, 4,
                              FA_MERGE_BATCH);
    }
}

#if !defined(POLYCL_STEP) && !defined(FA_HELPERS_ONLY)
#define FL_KERNEL(NAME, PIECES, HEADS, KV)                                                  \
kernel void NAME(FA_SPLIT_ARGS) {                                                           \
    FA_SPLIT_UNPACK                                                                         \
    LOCAL_ARRAY(float, red, FL_WG);                                                         \
    LOCAL_ARRAY(float, wstate, 2 * FL_RUNS * (HEADS));                                      \
    LOCAL_ARRAY(float, accs, FL_RUNS * 64 * (PIECES) * (HEADS));                            \
    LOCAL_ARRAY(int, last, 1);                                                              \
    const long iq = get_group_id(1) / n_chunks;                                             \
    const int c = get_group_id(1) % n_chunks;                                               \
    const long sets = q_ne.s2 / (HEADS), hz = get_group_id(2);                              \
    const long h = (hz % sets) * (HEADS), z = hz / sets;                                    \
    fa_long_body(q, q_off, q_ne, q_nb, k, k_off, k_ne, k_nb, v, v_off, v_ne, v_nb, mask,    \
                 mask_off, mask_ne, mask_nb, has_mask, part, part_off, cnt, cnt_off, chunk, \
                 n_chunks, c, scale, softcap, max_bias, m0, m1, n_head_log2, iq, h,         \
                 h / (q_ne.s2 / k_ne.s2), z, dst, dst_off, dst_ne, dst_nb, has_q8, q8,      \
                 q8_off, rot, PIECES, HEADS, KV, red, wstate, accs, last);                  \
    PK_END                                                                                  \
}
FL_KERNEL(kernel_fa_long_d128, 2, 1, FL_F16)
FL_KERNEL(kernel_fa_long_d64, 1, 1, FL_F16)
// A KV head's query heads, 4 or 2 a group (POLYCL_FA_LONG_HEADS).
FL_KERNEL(kernel_fa_long_gqa2_d128, 2, 2, FL_F16)
FL_KERNEL(kernel_fa_long_gqa4_d64, 1, 4, FL_F16)
FL_KERNEL(kernel_fa_long_gqa2_d64, 1, 2, FL_F16)
// The same over Q8_0 and over Q4_0 K and V (POLYCL_FA_Q8_KV).
FL_KERNEL(kernel_fa_long_q8_d128, 2, 1, FL_Q8_0)
FL_KERNEL(kernel_fa_long_q8_d64, 1, 1, FL_Q8_0)
FL_KERNEL(kernel_fa_long_q8_gqa2_d128, 2, 2, FL_Q8_0)
FL_KERNEL(kernel_fa_long_q8_gqa4_d64, 1, 4, FL_Q8_0)
FL_KERNEL(kernel_fa_long_q8_gqa2_d64, 1, 2, FL_Q8_0)
FL_KERNEL(kernel_fa_long_q4_d128, 2, 1, FL_Q4_0)
FL_KERNEL(kernel_fa_long_q4_d64, 1, 1, FL_Q4_0)
FL_KERNEL(kernel_fa_long_q4_gqa2_d128, 2, 2, FL_Q4_0)
FL_KERNEL(kernel_fa_long_q4_gqa4_d64, 1, 4, FL_Q4_0)
FL_KERNEL(kernel_fa_long_q4_gqa2_d64, 1, 2, FL_Q4_0)
#endif

// Short caches (plan/flash_attn.rs `short_applies`): the same body 512 wide
// (16 warps) at 4 keys a warp a step and without the prefetch, so a chunk of
// 64 keys (128 at head sizes up to 64) is one step of the whole group and
// the kernel fits the registers and width of MulMatAddNorm, whose launch it
// can share (attn_o.cl). On the H200 such a body held 31-34 registers and
// ran as fast as today's shape at 256 cached positions (docs/perf.md step
// 45, scripts/probe/fa-short.c). Head sizes up to 128; grid {FS_WG, n_q *
// n_chunks, n_head * ne3}.
#define FS_WG 512
#define FS_KPW 4
#ifndef FA_HELPERS_ONLY
FV_KERNEL_SHAPED(kernel_fa_short_d128, 1, 0, 32, FS_WG, FS_KPW, 128)
FV_KERNEL_SHAPED(kernel_fa_short_d64, 1, 0, 16, FS_WG, FS_KPW, 64)
#endif

// A cache of at most FO_WG / lanes * FO_KPW positions (plan/flash_attn.rs
// `one_kernel`: 256 at head sizes up to 64, 128 up to 128): one group a
// (query row, head) takes all of it in one step of loads and writes dst
// itself, so there is no partial state, device-wide fence, counter or
// merge. The width is required so that the compiler keeps the registers to
// what 512 work-items may hold (98 on the H200). Grid {FO_WG, n_q,
// n_head * ne3}.
#define FO_WG 512
#define FO_KPW 8
#if !defined(POLYCL_STEP) && !defined(FA_HELPERS_ONLY)
#define FO_KERNEL(NAME, LPK, DMAX)                                                          \
    __attribute__((reqd_work_group_size(FO_WG, 1, 1)))                                      \
    FV_KERNEL_SHAPED(NAME, 1, 0, LPK, FO_WG, FO_KPW, DMAX)
FO_KERNEL(kernel_fa_one_d128, 32, 128)
FO_KERNEL(kernel_fa_one_d64, 16, 64)
#endif
