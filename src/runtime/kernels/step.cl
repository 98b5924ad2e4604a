// The step kernel (runtime/step.rs says when it runs): one launch runs a
// whole run of a plan's decode launches ("phases"), each phase the body of
// its packed kernel (built with POLYCL_STEP, common.cl), with a barrier over
// every work-group of the launch between phases. On the H200 a launch costs
// the host 2-6 us and the GPU a ramp and a drain, where this barrier measured
// 1.8 us (scripts/probe/kernel-floor.c); a 7B decode step is ~230 launches.
//
// The barrier needs every work-group resident at once: the host launches at
// most as many as it saw resident together (a check once per device), and a
// wait that spins past its limit gives up and counts itself in bar[2]
// rather than hang the device. The limit is bar[3], set by the host: short
// for the residency check, long for real steps.
//
// Each phase is a row of `desc` (STEP_DESC uints: kind, virtual groups in x,
// y and z, its first slot in `pk_all`, then which of m0..m7 each buffer
// argument is) and runs its virtual work-groups over the launch's groups.
// The generated prelude (runtime/step.rs) defines STEP_CASES, the switch arm
// of each kind.

#undef kernel
#undef get_group_id
#undef get_global_id

#define STEP_WG 128
#define STEP_MAX_ARGS 16
#define STEP_DESC (5 + STEP_MAX_ARGS)
// Local memory for a phase's LOCAL_ARRAYs: the largest, kernel_fa_vec, takes
// 5.7 KB (FA_MAX_D 256).
#define STEP_LMEM 8192

#ifdef POLYCL_NVIDIA
// A gpu-scope fence: orders this work-item's accesses against other SMs and
// invalidates what its L1 holds of other SMs' writes (mem_fence is only
// known to order within the work-group).
#define STEP_FENCE() asm volatile("fence.acq_rel.gpu;" ::: "memory")
#else
#define STEP_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#endif

// bar[0]: arrivals, bar[1]: generation, bar[2]: waits that timed out,
// bar[3]: polls before a wait gives up.
inline void step_sync(volatile __global int *bar, int *gen) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        STEP_FENCE();
        const int g = *gen;
        if (atomic_inc(&bar[0]) == (int)get_num_groups(0) - 1) {
            atomic_xchg(&bar[0], 0);
            STEP_FENCE();
            atomic_xchg(&bar[1], g + 1);
        } else {
            const uint limit = (uint)bar[3];
            uint spins = 0;
            while (atomic_add(&bar[1], 0) == g) {
                if (++spins == limit) {
                    atomic_inc(&bar[2]);
                    break;
                }
            }
        }
        STEP_FENCE();
    }
    *gen += 1;
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
}

inline __global void *step_mem(uint slot, __global char *m0, __global char *m1,
                               __global char *m2, __global char *m3, __global char *m4,
                               __global char *m5, __global char *m6, __global char *m7) {
    switch (slot) {
    case 0: return m0;
    case 1: return m1;
    case 2: return m2;
    case 3: return m3;
    case 4: return m4;
    case 5: return m5;
    case 6: return m6;
    default: return m7;
    }
}
#define STEP_ARG(i) step_mem(dp[5 + (i)], m0, m1, m2, m3, m4, m5, m6, m7)


// global {groups * STEP_WG}, local {STEP_WG}.
__kernel void kernel_step(__global char *m0, __global char *m1, __global char *m2,
                          __global char *m3, __global char *m4, __global char *m5,
                          __global char *m6, __global char *m7, __global const ulong *pk_all,
                          __global const uint *desc, int nphases, volatile __global int *bar) {
    __local float4 lmem4[STEP_LMEM / 16];
    __local char *lmem = (__local char *)lmem4;
    // No group can pass the first barrier before every group has read this
    // (only work-item 0 of a group waits on it).
    int gen = get_local_id(0) == 0 ? atomic_add(&bar[1], 0) : 0;
    for (int p = 0; p < nphases; ++p) {
        const __global uint *dp = desc + p * STEP_DESC;
        const uint kind = dp[0], gx = dp[1], gy = dp[2], gz = dp[3];
        const __global ulong *pk = pk_all + dp[4];
        const uint total = gx * gy * gz;
        for (uint v = get_group_id(0); v < total; v += get_num_groups(0)) {
            const uint4 vg = (uint4)(v % gx, (v / gx) % gy, v / (gx * gy), 0);
            switch (kind) {
                STEP_CASES
            default:
                break;
            }
            // The next virtual group reuses the local memory.
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (p + 1 < nphases) step_sync(bar, &gen);
    }
}
