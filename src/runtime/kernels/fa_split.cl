// Flash attention for the decode shape on GPUs (common.cl + this file): the KV
// length is split into chunks, one work-group per (query row, chunk, head),
// so a single token fills the GPU; a second kernel merges the chunks' partial
// softmax states. Float accumulation throughout (the portable kernel in
// flash_attn.cl reproduces the CPU backend instead and stays on PoCL).
//
// Partial state per (head*ne3 + z, query, chunk): M, S, then DV floats.

#define FA_WG 64
#define FA_TILE 64
#define FA_MAX_D 256
#define FA_PER (FA_MAX_D / FA_WG)

inline float fa_slope(uint h, float max_bias, float m0, float m1, uint n_head_log2) {
    if (max_bias <= 0.0f) return 1.0f;
    return h < n_head_log2 ? pow(m0, (float)(h + 1)) : pow(m1, (float)(2 * (h - n_head_log2) + 1));
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

// global {64, n_q * n_chunks, n_head * ne3}, local {64, 1, 1}.
kernel void kernel_fa_split_partial(CTENSOR(q), CTENSOR(k), CTENSOR(v), CTENSOR(mask), int has_mask,
                                    __global float *part, ulong part_off, int chunk, int n_chunks,
                                    float scale, float max_bias, float m0, float m1, uint n_head_log2,
                                    float softcap) {
    __local float qs[FA_MAX_D];
    __local float ps[FA_TILE];
    __local float red[FA_WG];
    const int l = get_local_id(0);
    const long iq = get_group_id(1) / n_chunks;
    const int c = get_group_id(1) % n_chunks;
    const long hz = get_group_id(2);
    const long h = hz % q_ne.s2, z = hz / q_ne.s2;
    const long hk = h / (q_ne.s2 / k_ne.s2);
    const long DK = q_ne.s0, DV = v_ne.s0, n_kv = k_ne.s1;
    for (long d = l; d < DK; d += FA_WG) qs[d] = load_f32(AT(q, d, iq, h, z));
    barrier(CLK_LOCAL_MEM_FENCE);
    const float slope = fa_slope((uint)h, max_bias, m0, m1, n_head_log2);
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
    __global float *o = part + part_off / 4 + ((hz * q_ne.s1 + iq) * n_chunks + c) * (DV + 2);
    if (l == 0) {
        o[0] = M;
        o[1] = S;
    }
    for (int i = 0; i < FA_PER; ++i) {
        const long d = l + i * FA_WG;
        if (d < DV) o[2 + d] = acc[i];
    }
}

// global {64, n_q, n_head * ne3}, local {64, 1, 1}: merges the chunks.
kernel void kernel_fa_split_merge(__global const float *part, ulong part_off, int n_chunks, long n_q,
                                  long n_head, TENSOR(dst)) {
    const int l = get_local_id(0);
    const long iq = get_group_id(1), hz = get_group_id(2);
    const long h = hz % n_head, z = hz / n_head;
    const long DV = dst_ne.s0;
    const __global float *p = part + part_off / 4 + (hz * n_q + iq) * n_chunks * (DV + 2);
    float M = -INFINITY;
    for (int c = 0; c < n_chunks; ++c) M = fmax(M, p[c * (DV + 2)]);
    float S = 0.0f;
    for (int c = 0; c < n_chunks; ++c) {
        const float mc = p[c * (DV + 2)];
        if (mc != -INFINITY) S += p[c * (DV + 2) + 1] * exp(mc - M);
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (long d = l; d < DV; d += FA_WG) {
        float a = 0.0f;
        for (int c = 0; c < n_chunks; ++c) {
            const float mc = p[c * (DV + 2)];
            if (mc != -INFINITY) a += p[c * (DV + 2) + 2 + d] * exp(mc - M);
        }
        store_f32(AT(dst, d, h, iq, z), a * inv);
    }
}
