// ROPE of Q and K plus the K and V cache writes (SET_ROWS) of one attention
// layer in one launch (IR op RopeStore). Fast math: OpenCL's pow/cos/sin, not
// the CPU-bit-exact ports of rope.cl, so results differ from the CPU in the
// last bits.
//
// Flat 1-D grid of three segments:
//   [0, nq)            one rope pair of Q (rope.cl's work-item j, i1, i2, i3)
//   [nq, nq + nk)      one rope pair of K; the rotated values go to rope(k) and,
//                      from registers, into the K cache
//   [nq + nk, + nv)    one element of V into the V cache
// The K cache rows are rope(k) seen through a RESHAPE (kv_ne, same element
// order; the pass checks rope(k) is contiguous). The row mapping is set_rows.cl's:
// source row (i01, i02, i03) goes to destination row idx[i01, i02 % ne1(idx),
// i03 % ne2(idx)] of destination plane (i02, i03).

// Flag bits.
#define RS_KC_F16 1   // K cache is F16 (else F32)
#define RS_VC_F16 2   // V cache is F16 (else F32)
#define RS_KR_I64 4   // K row indices are I64 (else I32)
#define RS_VR_I64 8   // V row indices are I64 (else I32)
#define RS_NEOX   16  // NEOX mode (halves) instead of NORMAL (adjacent pairs)

// A row index (I64 or I32) at p.
inline long rs_index(const __global char *p, int i64) {
    return i64 ? *(const __global long *) p : (long) *(const __global int *) p;
}

inline long rs_row(const __global char *idx, ulong idx_off, long4 idx_ne, ulong4 idx_nb,
                   int i64, long i01, long i02, long i03) {
    return rs_index(AT(idx, i01, i02 % idx_ne.s1, i03 % idx_ne.s2, 0), i64);
}

inline void rs_store(__global char *p, float v, int f16) {
    if (f16) store_f16(p, v); else store_f32(p, v);
}

// ggml_rope_cache_init + rope_yarn for pair k at position p, in float.
inline float2 rs_cos_sin(int k, float p, float theta_scale, __global const char *ff, ulong ff_off,
                         int has_ff, float freq_scale, float ext_factor, float attn_factor,
                         float corr0, float corr1) {
    const float theta = p * pow(theta_scale, (float) k);
    const float ffk = has_ff ? *(__global const float *)(ff + ff_off + (ulong) k * 4) : 1.0f;
    const float theta_extrap = theta / ffk;
    const float theta_interp = freq_scale * theta_extrap;
    float th = theta_interp;
    float mscale = attn_factor;
    if (ext_factor != 0.0f) {
        const float y = ((float) k - corr0) / fmax(0.001f, corr1 - corr0);
        const float ramp_mix = (1.0f - fmin(1.0f, fmax(0.0f, y))) * ext_factor;
        th = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0f + 0.1f * log(1.0f / freq_scale);
    }
    float c;
    const float s = sincos(th, &c);
    return (float2)(c * mscale, s * mscale);
}

// Element indices (first, second) of rope pair j in dim 0, and whether it rotates.
// NEOX work-items nh <= j < n_dims/2 own no element (their partner j - nh did both).
inline int rs_pair(long j, int n_dims, int neox, long *e0, long *e1) {
    if (2 * j >= n_dims) { *e0 = 2 * j; *e1 = 2 * j + 1; return 0; }
    if (neox) {
        const long nh = n_dims / 2;
        if (j >= nh) return -1;
        *e0 = j; *e1 = j + nh;
    } else {
        *e0 = 2 * j; *e1 = 2 * j + 1;
    }
    return 1;
}

#define ROPE_STORE_BUFS(R, W)                                                               \
    R(const char, q) W(char, qo) R(const char, k) W(char, ko) R(const char, pos)            \
    R(const char, ff) W(char, kc) R(const char, kr) R(const char, v) W(char, vc)            \
    R(const char, vr)
kernel void kernel_rope_store_f32(PK_SIG(ROPE_STORE_BUFS)) {
    PK_BEGIN_BUFS(ROPE_STORE_BUFS)
    PK_TENSOR(q) PK_TENSOR(qo) PK_TENSOR(k) PK_TENSOR(ko) PK_ULONG(pos_off)
    PK_ULONG(ff_off) PK_INT(has_ff) PK_TENSOR(kc) PK_TENSOR(kr) PK_LONG4(kv_ne) PK_TENSOR(v)
    PK_TENSOR(vc) PK_TENSOR(vr) PK_INT(flags) PK_INT(n_dims) PK_FLOAT(theta_scale)
    PK_FLOAT(freq_scale) PK_FLOAT(ext_factor) PK_FLOAT(attn_factor) PK_FLOAT(corr0)
    PK_FLOAT(corr1)
    const long gid = get_global_id(0);
    const long nq = (q_ne.s0 / 2) * q_ne.s1 * q_ne.s2 * q_ne.s3;
    const long nk = (k_ne.s0 / 2) * k_ne.s1 * k_ne.s2 * k_ne.s3;
    const long nv = nelements4(v_ne);

    if (gid >= nq + nk) {
        const long e = gid - nq - nk;
        if (e >= nv) return;
        const long4 c = unravel4(e, v_ne);
        const long r = rs_row(vr, vr_off, vr_ne, vr_nb, flags & RS_VR_I64, c.s1, c.s2, c.s3);
        rs_store(AT(vc, c.s0, r, c.s2, c.s3), load_f32(AT(v, c.s0, c.s1, c.s2, c.s3)),
                 flags & RS_VC_F16);
        return;
    }

    const int is_k = gid >= nq;
    const long w = is_k ? gid - nq : gid;
    const long4 ne = is_k ? k_ne : q_ne;
    const long half0 = ne.s0 / 2;
    const long j  = w % half0;
    const long i1 = (w / half0) % ne.s1;
    const long i2 = (w / half0 / ne.s1) % ne.s2;
    const long i3 = w / half0 / ne.s1 / ne.s2;

    long e0, e1;
    const int rot = rs_pair(j, n_dims, flags & RS_NEOX, &e0, &e1);
    if (rot < 0) return;

    const __global char *src;
    ulong4 snb;
    __global char *dst;
    ulong4 dnb;
    if (is_k) {
        src = AT(k, 0, i1, i2, i3);  snb = k_nb;
        dst = AT(ko, 0, i1, i2, i3); dnb = ko_nb;
    } else {
        src = AT(q, 0, i1, i2, i3);  snb = q_nb;
        dst = AT(qo, 0, i1, i2, i3); dnb = qo_nb;
    }
    const float x0 = load_f32(src + (ulong) e0 * snb.s0);
    const float x1 = load_f32(src + (ulong) e1 * snb.s0);
    float y0 = x0, y1 = x1;
    if (rot) {
        const float p = (float) *(const __global int *)(pos + pos_off + (ulong) i2 * 4);
        const float2 cs = rs_cos_sin((int) j, p, theta_scale, ff, ff_off, has_ff, freq_scale,
                                     ext_factor, attn_factor, corr0, corr1);
        y0 = x0 * cs.x - x1 * cs.y;
        y1 = x0 * cs.y + x1 * cs.x;
    }
    store_f32(dst + (ulong) e0 * dnb.s0, y0);
    store_f32(dst + (ulong) e1 * dnb.s0, y1);
    if (!is_k) return;

    // rope(k) is contiguous: its flat index is the K cache source's flat index
    const long base = ne.s0 * (i1 + ne.s1 * (i2 + ne.s2 * i3));
    const int kf16 = flags & RS_KC_F16;
    const int ki64 = flags & RS_KR_I64;
    long4 c = unravel4(base + e0, kv_ne);
    long r = rs_row(kr, kr_off, kr_ne, kr_nb, ki64, c.s1, c.s2, c.s3);
    rs_store(AT(kc, c.s0, r, c.s2, c.s3), y0, kf16);
    c = unravel4(base + e1, kv_ne);
    r = rs_row(kr, kr_off, kr_ne, kr_nb, ki64, c.s1, c.s2, c.s3);
    rs_store(AT(kc, c.s0, r, c.s2, c.s3), y1, kf16);
}
