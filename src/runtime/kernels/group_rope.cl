// MulMatGroupRope (common.cl + rope_store.cl + mul_mv.cl + this file): the
// group kernel of llama's Q, K and V projections of one token, whose
// epilogue does the RopeStore work from registers. A row group computes rows
// r and r + 1, which in NORMAL rope mode are one rotated pair (dims 2j and
// 2j + 1 of head r / head_dim). Q and K rows are rotated into rope(q) and
// rope(k), K rows also go to the K cache row, V rows to the V cache row; the
// unrotated projections are written too (the node's first outputs).
//
// passes/fuse/group_rope.rs checked what this relies on: one token, three
// matrices with even row counts, contiguous projections and rope outputs,
// cache rows as wide as the projections, one row index each.
// Same grid as MV_GROUP_KERNEL.
//
// The epilogue's scalars (pos_off .. corr1, between wtypes and the norm's in
// the slots) are unpacked where the kernel says: EARLY with the others
// (Q8_0), or LATE, after the dot products (Q4_0, the K-quant and mixed
// kernels). Unpacked at the top they stay in registers through the dot
// products: 167 registers for Q4_K (3 work-groups an SM) and 128 for Q4_0,
// against 128 and 64 late. On the H200 late unpacking made the 7B Q4_K_M's
// decode 4% faster (docs/perf.md step 35). For Q4_0 it did nothing alone
// (step 65); with the Q4_0 words' unroll at 1 (config.rs mv_unrolls) the
// two made the 7B Q4_0 1.8% faster and left the 1B's as it was (step 67).
// Q8_0 late: no change (step 65).
#define GROUP_ROPE_EPILOGUE_SLOTS (3 + 4 * 9 + 2 + 5 + 6)
#define GROUP_ROPE_EPILOGUE                                                                 \
    pk_i = pk_epilogue;                                                                     \
    PK_ULONG(pos_off) PK_ULONG(ff_off) PK_INT(has_ff) PK_TENSOR(qo) PK_TENSOR(ko)           \
    PK_TENSOR(kc) PK_ULONG(kr_off) PK_TENSOR(vc) PK_ULONG(vr_off) PK_INT(role_q)            \
    PK_INT(role_k) PK_INT(role_v) PK_INT(flags) PK_INT(n_dims) PK_FLOAT(theta_scale)        \
    PK_FLOAT(freq_scale) PK_FLOAT(ext_factor) PK_FLOAT(attn_factor) PK_FLOAT(corr0)         \
    PK_FLOAT(corr1)
#define MV_GROUP_ROPE_BUFS(R, W)                                                            \
    R(const char, w0) R(const char, w1) R(const char, w2) R(const char, act) W(char, d0)    \
    W(char, d1) W(char, d2) R(const char, pos) R(const char, ff) W(char, qo) W(char, ko)    \
    W(char, kc) R(const char, kr) W(char, vc) R(const char, vr) MV_NORM_BUF(R)
#define MV_GROUP_ROPE_KERNEL(NAME, ROWDOT2, EARLY, LATE)                                     \
kernel void NAME(PK_SIG(MV_GROUP_ROPE_BUFS)) {                                              \
    PK_BEGIN_BUFS(MV_GROUP_ROPE_BUFS)                                                       \
    PK_TENSOR(w0) PK_TENSOR(w1) PK_TENSOR(w2) PK_ULONG(act_off) PK_TENSOR(d0)               \
    PK_TENSOR(d1) PK_TENSOR(d2) PK_LONG(g0) PK_LONG(g1) PK_INT(wtypes)                      \
    const int pk_epilogue = pk_i;                                                           \
    PK_SKIP(GROUP_ROPE_EPILOGUE_SLOTS) PK_MV_NORM                                           \
    EARLY                                                                                   \
    MV_GROUP_ROWS(ROWDOT2)                                                                  \
    LATE                                                                                    \
    if (lane == 0 && live1) { /* even row counts: live1 implies live0 */                     \
        store_f32(d + r * 4, t0);                                                           \
        store_f32(d + (r + 1) * 4, t1);                                                     \
        if (m == role_v) {                                                                  \
            const long row = rs_index(vr + vr_off, flags & RS_VR_I64);                      \
            rs_store(AT(vc, r, row, 0, 0), t0, flags & RS_VC_F16);                          \
            rs_store(AT(vc, r + 1, row, 0, 0), t1, flags & RS_VC_F16);                      \
        } else {                                                                            \
            const int is_k = m == role_k;                                                   \
            const long hd = is_k ? ko_ne.s0 : qo_ne.s0;                                     \
            const long j = (r % hd) / 2, head = r / hd;                                     \
            float y0 = t0, y1 = t1;                                                         \
            if (2 * j < n_dims) {                                                           \
                const float p = (float)*(const __global int *)(pos + pos_off);              \
                const float2 cs = rs_cos_sin((int)j, p, theta_scale, ff, ff_off, has_ff,    \
                                             freq_scale, ext_factor, attn_factor, corr0,    \
                                             corr1);                                        \
                y0 = t0 * cs.x - t1 * cs.y;                                                 \
                y1 = t0 * cs.y + t1 * cs.x;                                                 \
            }                                                                               \
            if (is_k) {                                                                     \
                store_f32(AT(ko, 2 * j, head, 0, 0), y0);                                   \
                store_f32(AT(ko, 2 * j + 1, head, 0, 0), y1);                               \
                const long row = rs_index(kr + kr_off, flags & RS_KR_I64);                  \
                rs_store(AT(kc, r, row, 0, 0), y0, flags & RS_KC_F16);                      \
                rs_store(AT(kc, r + 1, row, 0, 0), y1, flags & RS_KC_F16);                  \
            } else {                                                                        \
                store_f32(AT(qo, 2 * j, head, 0, 0), y0);                                   \
                store_f32(AT(qo, 2 * j + 1, head, 0, 0), y1);                               \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    PK_END                                                                                  \
}

MV_GROUP_ROPE_KERNEL(kernel_mul_mv_group_rope_q4_0, mv_row2_q4_0, , GROUP_ROPE_EPILOGUE)
MV_GROUP_ROPE_KERNEL(kernel_mul_mv_group_rope_q8_0, mv_row2_q8_0, GROUP_ROPE_EPILOGUE, )
MV_GROUP_ROPE_KERNEL(kernel_mul_mv_group_rope_q4_k, mv_row2_q4_K, , GROUP_ROPE_EPILOGUE)
MV_GROUP_ROPE_KERNEL(kernel_mul_mv_group_rope_q6_k, mv_row2_q6_K, , GROUP_ROPE_EPILOGUE)
MV_GROUP_ROPE_KERNEL(kernel_mul_mv_group_rope_mixed, mv_row2_by_type, , GROUP_ROPE_EPILOGUE)
