// Decode attention and the O projection after it in one launch, by ticket
// (plan/attn_o.rs says when): the bodies of kernel_fa_short_* (fa_split.cl)
// and kernel_mul_mv_norm_* (mul_mv_norm.cl), both 512 wide. This program is
// built in step mode (POLYCL_STEP, common.cl), so each body is a function of
// its packed scalars, its virtual group id and local memory carved from
// `lmem`, as in the step kernel; but no group ever waits for one that may not
// have started, so nothing needs every group resident.
//
// Each group takes a ticket when it starts. The first fa_groups tickets run
// the attention's (query row, chunk, head) groups, whose last chunk of a head
// merges the head and writes its Q8_1 blocks (fa_publish_merge); each then
// counts itself done. The other tickets run the O projection's groups: one
// work-item polls until every attention group is done, then the group runs
// MulMatAddNorm, reading the attention's Q8_1 copy. A group that polls holds
// a ticket above every attention group's, and those started before it and
// wait for nothing, so the poll ends on any device (step 34's argument).
// That saves the host one launch a layer and the GPU one launch's drain and
// ramp.
//
// tk[0]: tickets taken, tk[1]: attention groups done, tk[2]: projection
// groups done. They are 0 between launches: the last projection group to
// finish has seen every ticket taken and puts them back (zeroed once when
// the plan is built).
//
// Memory ordering as fa_split.cl argues it: every work-item of an attention
// group fences device-wide before the group barrier that precedes its count,
// and the polling work-item fences after it saw the last count, before the
// barrier that releases its group to read the Q8_1 copy.

#undef kernel

#define AO_WG 512
// Local memory of either body: kernel_fa_short_* carves ~10.3 KB (FS_WG
// floats, the warps' states, 16 or 32 warps' accumulators of 128 or 64
// floats), MulMatAddNorm ~2.3 KB.
#define AO_LMEM 12288

// The two bodies' buffers, in their kernels' order (FA_SPLIT_BUFS, then
// MV_NORM_BUFS with its q8 as q8n), read (R) or written (W). Step mode keeps
// the bodies' own buffers as pointers (common.cl), but the pair's signature
// takes them by address where the program is built with POLYCL_ADDR, as the
// two launches it replaces do (runtime/addresses.rs).
#define AO_BUFS(R, W)                                                                       \
    R(const char, q) R(const char, k) R(const char, v) R(const char, mask) W(float, part)   \
    W(uint, cnt) W(char, dst) W(char, q8) R(const char, w) R(const char, act)               \
    R(const char, res) W(char, o) W(char, sum) R(const char, nw) W(char, q8n) W(char, ss)
#if defined(POLYCL_ADDR) && !defined(POLYCL_ADDR_READS)
#define AO_ARG_R PK_ARG_ADDR
#define AO_BIND_R PK_BIND_ADDR
#define AO_ARG_W PK_ARG_ADDR
#define AO_BIND_W PK_BIND_ADDR
#elif defined(POLYCL_ADDR)
#define AO_ARG_R PK_ARG_ADDR
#define AO_BIND_R PK_BIND_ADDR
#define AO_ARG_W PK_ARG_BUF
#define AO_BIND_W PK_BIND_BUF
#else
#define AO_ARG_R PK_ARG_BUF
#define AO_BIND_R PK_BIND_BUF
#define AO_ARG_W PK_ARG_BUF
#define AO_BIND_W PK_BIND_BUF
#endif

#define AO_KERNEL(NAME, FA, MVN)                                                            \
__kernel __attribute__((reqd_work_group_size(AO_WG, 1, 1))) void NAME(                     \
    AO_BUFS(AO_ARG_R, AO_ARG_W) __global const ulong *pk_fa, __global const ulong *pk_mvn,  \
    volatile __global int *tk, const int fa_gy, const int fa_groups, const int o_groups) {  \
    AO_BUFS(AO_BIND_R, AO_BIND_W)                                                           \
    __local char lmem[AO_LMEM] __attribute__((aligned(16)));                                \
    __local int ticket;                                                                     \
    const int lid = get_local_id(0);                                                        \
    if (lid == 0) ticket = atomic_inc(&tk[0]);                                              \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    const int t = ticket;                                                                   \
    if (t < fa_groups) {                                                                    \
        FA(q, k, v, mask, part, cnt, dst, q8, pk_fa,                                        \
           (uint4)(0u, (uint)(t % fa_gy), (uint)(t / fa_gy), 0u), lmem);                    \
        device_fence();                                                                     \
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);                                \
        if (lid == 0) atomic_inc(&tk[1]);                                                   \
    } else {                                                                                \
        if (lid == 0) {                                                                     \
            while (atomic_add(&tk[1], 0) < fa_groups) {                                     \
            }                                                                               \
            device_fence();                                                                 \
        }                                                                                   \
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);                                \
        MVN(w, act, res, o, sum, nw, q8n, ss, pk_mvn,                                       \
            (uint4)((uint)(t - fa_groups), 0u, 0u, 0u), lmem);                              \
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);                                \
        if (lid == 0 && atomic_inc(&tk[2]) == o_groups - 1) {                               \
            atomic_xchg(&tk[0], 0);                                                         \
            atomic_xchg(&tk[1], 0);                                                         \
            atomic_xchg(&tk[2], 0);                                                         \
        }                                                                                   \
    }                                                                                       \
}

AO_KERNEL(kernel_attn_o_q4_0_d128, kernel_fa_short_d128, kernel_mul_mv_norm_q4_0)
AO_KERNEL(kernel_attn_o_q8_0_d128, kernel_fa_short_d128, kernel_mul_mv_norm_q8_0)
AO_KERNEL(kernel_attn_o_q4_k_d128, kernel_fa_short_d128, kernel_mul_mv_norm_q4_k)
AO_KERNEL(kernel_attn_o_q6_k_d128, kernel_fa_short_d128, kernel_mul_mv_norm_q6_k)
AO_KERNEL(kernel_attn_o_q4_0_d64, kernel_fa_short_d64, kernel_mul_mv_norm_q4_0)
AO_KERNEL(kernel_attn_o_q8_0_d64, kernel_fa_short_d64, kernel_mul_mv_norm_q8_0)
AO_KERNEL(kernel_attn_o_q4_k_d64, kernel_fa_short_d64, kernel_mul_mv_norm_q4_k)
AO_KERNEL(kernel_attn_o_q6_k_d64, kernel_fa_short_d64, kernel_mul_mv_norm_q6_k)
