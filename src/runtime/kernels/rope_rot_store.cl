// ROPE of Q and K, llama's Hadamard rotations of Q, K and V, and the K and V
// cache writes of one attention layer in one launch (IR op RopeRotStore: a
// quantized KV cache, passes/fuse/rope_rot_store.rs). Built after
// rope_store.cl (the rope, row indices), set_rows.cl (the quantized
// blocks, the bytes SET_ROWS writes) and hadamard.cl (the butterflies).
//
// A work-group of RR_WG a row of RR_MAX floats at most, in local memory:
//   [0, nq)          a head row of Q: rope, rotate; writes rope(q), rot(q)
//   [nq, nq + nk)    a head row of K: rope, rotate; writes rope(k), rot(k)
//                    and the K cache rows
//   [nq + nk, ...)   v_chunk elements of V: rotate (v_width > 1); writes
//                    rot(v) and the V cache rows
// Every output the separate launches wrote is written (F32, contiguous:
// head row w of rope(q) starts at element w * ne0) but those the pass marks
// `dead`, which only the fused ops read (with llama's graphs: both ropes,
// rot(k) and rot(v)). The rotation is hadamard.cl's: every element times
// 1/sqrt(width) first, then butterflies at distances 1, 2, 4, ... in each
// run of `width` elements, so its sums are the CPU's. The rotated rows'
// element order is the cache rows' (the pass checks the shapes): flat
// element f goes to cache row f / (the cache's width).

#define RR_WG 64
#define RR_MAX 1024

// `dead` bits: outputs left unwritten (passes/fuse/rope_rot_store.rs DEAD_*).
#define RR_DEAD_ROPE_Q 1
#define RR_DEAD_ROPE_K 2
#define RR_DEAD_ROT_K 4
#define RR_DEAD_ROT_V 8

// Cache types (rr_store).
#define RR_F32 0
#define RR_F16 1
#define RR_Q8_0 2
#define RR_Q4_0 3

// h[0, n) into the cache rows of flat source elements [base, base + n),
// the source seen as vals_ne (rows of the cache's width): set_rows.cl's
// row mapping, a quantized block of 32 a run of 32 work-items.
inline void rr_store(__local const float *h, int n, long base, int type, __global char *c,
                     ulong c_off, long4 c_ne, ulong4 c_nb, const __global char *idx,
                     ulong idx_off, long4 idx_ne, ulong4 idx_nb, int i64, long4 vals_ne) {
    for (int e = get_local_id(0); e < n; e += RR_WG) {
        if (type >= RR_Q8_0) {
            const int blk = e / 32;
            const long4 s = unravel4(base + blk * 32, vals_ne);
            const long r = rs_row(idx, idx_off, idx_ne, idx_nb, i64, s.s1, s.s2, s.s3);
            __global char *y = AT(c, s.s0 / 32, r, s.s2, s.s3);
            if (type == RR_Q8_0)
                sr_block_q8_0(h + blk * 32, e % 32, y);
            else
                sr_block_q4_0(h + blk * 32, e % 32, y);
        } else {
            const long4 s = unravel4(base + e, vals_ne);
            const long r = rs_row(idx, idx_off, idx_ne, idx_nb, i64, s.s1, s.s2, s.s3);
            rs_store(AT(c, s.s0, r, s.s2, s.s3), h[e], type == RR_F16);
        }
    }
}

#define ROPE_ROT_STORE_BUFS(R, W)                                                           \
    R(const char, q) W(char, rq) W(char, hq) R(const char, k) W(char, rk) W(char, hk)       \
    R(const char, pos) R(const char, ff) W(char, kc) R(const char, kr) R(const char, v)     \
    W(char, hv) W(char, vc) R(const char, vr)
kernel void kernel_rope_rot_store_f32(PK_SIG(ROPE_ROT_STORE_BUFS)) {
    PK_BEGIN_BUFS(ROPE_ROT_STORE_BUFS)
    PK_TENSOR(q) PK_ULONG(rq_off) PK_ULONG(hq_off) PK_TENSOR(k) PK_ULONG(rk_off)
    PK_ULONG(hk_off) PK_ULONG(pos_off) PK_ULONG(ff_off) PK_INT(has_ff) PK_TENSOR(kc)
    PK_TENSOR(kr) PK_LONG4(kv_ne) PK_TENSOR(v) PK_ULONG(hv_off) PK_TENSOR(vc) PK_TENSOR(vr)
    PK_LONG4(vv_ne) PK_INT(kc_type) PK_INT(vc_type) PK_INT(qk_width) PK_FLOAT(qk_scale)
    PK_INT(v_width) PK_FLOAT(v_scale) PK_INT(v_chunk) PK_INT(dead) PK_INT(flags) PK_INT(n_dims)
    PK_FLOAT(theta_scale) PK_FLOAT(freq_scale) PK_FLOAT(ext_factor) PK_FLOAT(attn_factor)
    PK_FLOAT(corr0) PK_FLOAT(corr1)
    __local float h[RR_MAX];
    const int lid = get_local_id(0);
    const long g = get_group_id(0);
    const long nq = q_ne.s1 * q_ne.s2 * q_ne.s3;
    const long nk = k_ne.s1 * k_ne.s2 * k_ne.s3;
    // One flow for every group, no return before a barrier (PoCL's kernel
    // compiler asserts on barriers in branches that return).
    const int is_v = g >= nq + nk, is_k = !is_v && g >= nq;
    const long w = is_v ? g - nq - nk : is_k ? g - nq : g;
    const long4 ne = is_k ? k_ne : q_ne;
    const int n = is_v ? v_chunk : (int)ne.s0;
    // rope's output and V are contiguous: row (chunk) w starts at flat w * n
    const long base = w * n;
    if (is_v) {
        for (int e = lid; e < n; e += RR_WG)
            h[e] = load_f32(v + v_off + (ulong)(base + e) * 4) * v_scale;
    } else {
        const long i1 = w % ne.s1, i2 = (w / ne.s1) % ne.s2, i3 = w / (ne.s1 * ne.s2);
        const __global char *src = is_k ? AT(k, 0, i1, i2, i3) : AT(q, 0, i1, i2, i3);
        const ulong snb0 = is_k ? k_nb.s0 : q_nb.s0;
        __global char *rope_out = is_k ? rk + rk_off : rq + rq_off;
        const int rope_live = !(dead & (is_k ? RR_DEAD_ROPE_K : RR_DEAD_ROPE_Q));
        const float p = (float)*(const __global int *)(pos + pos_off + (ulong)i2 * 4);
        for (int j = lid; j < n / 2; j += RR_WG) {
            long e0, e1;
            const int rot = rs_pair(j, n_dims, flags & RS_NEOX, &e0, &e1);
            if (rot < 0) continue;
            const float x0 = load_f32(src + (ulong)e0 * snb0);
            const float x1 = load_f32(src + (ulong)e1 * snb0);
            float y0 = x0, y1 = x1;
            if (rot) {
                const float2 cs = rs_cos_sin(j, p, theta_scale, ff, ff_off, has_ff, freq_scale,
                                             ext_factor, attn_factor, corr0, corr1);
                y0 = x0 * cs.x - x1 * cs.y;
                y1 = x0 * cs.y + x1 * cs.x;
            }
            h[e0] = y0 * qk_scale;
            h[e1] = y1 * qk_scale;
            if (rope_live) {
                // a rope in place (the pass allows it) stores where this work-item loaded
                store_f32(rope_out + (ulong)(base + e0) * 4, y0);
                store_f32(rope_out + (ulong)(base + e1) * 4, y1);
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fwht_runs(h, n, is_v ? v_width : qk_width, RR_WG);
    __global char *rot_out = is_v ? hv + hv_off : is_k ? hk + hk_off : hq + hq_off;
    const int rot_live = is_v ? v_width > 1 && !(dead & RR_DEAD_ROT_V)
                              : !is_k || !(dead & RR_DEAD_ROT_K);
    if (rot_live) {
        for (int e = lid; e < n; e += RR_WG) store_f32(rot_out + (ulong)(base + e) * 4, h[e]);
    }
    if (is_v)
        rr_store(h, n, base, vc_type, vc, vc_off, vc_ne, vc_nb, vr, vr_off, vr_ne, vr_nb,
                 flags & RS_VR_I64, vv_ne);
    else if (is_k)
        rr_store(h, n, base, kc_type, kc, kc_off, kc_ne, kc_nb, kr, kr_off, kr_ne, kr_nb,
                 flags & RS_KR_I64, kv_ne);
    PK_END
}
