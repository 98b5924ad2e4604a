// The hand-off's frame for packed kernels (runtime/handoff.rs), after
// common.cl in every program whose kernels end in PK_END (program.rs), which
// is empty unless the program is built with POLYCL_HANDOFF. Then a packed
// kernel's first HANDOFF_SLOTS slots say which counter its work-groups wait
// on before anything else (0: none) and for how many arrivals, and which
// counter each of them increments after its last store (PK_END), so that a
// launch on a second queue may start while the one before drains. The last
// work-group to arrive rewinds the counter that its launch waited on: every
// group of the launch has passed that wait, and the launch that counts there
// next runs in the next graph compute. A wait that outlasts HANDOFF_POLLS
// polls counts itself at the failure word and goes on (the host reports it),
// so that a launch never hangs on one that could not start; the word after it
// takes the low half of the counter's address, which names the launch.
// Slots: [wait counter address, arrivals | rewind own counter << 32,
// arrive counter address, failure word address].
#if defined(POLYCL_HANDOFF) && !defined(POLYCL_STEP)
#define HANDOFF_SLOTS 4
#define HANDOFF_POLLS (1u << 24)
#ifdef POLYCL_NVIDIA
// gpu scope: orders against other SMs and drops what L1 holds of their writes.
#define HANDOFF_FENCE() asm volatile("fence.acq_rel.gpu;" ::: "memory")
#else
#define HANDOFF_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#endif
#if defined(POLYCL_NVIDIA) && defined(HANDOFF_SLEEP) && HANDOFF_SLEEP > 0
#define HANDOFF_STR2(x) #x
#define HANDOFF_STR(x) HANDOFF_STR2(x)
#define HANDOFF_PAUSE() asm volatile("nanosleep.u32 " HANDOFF_STR(HANDOFF_SLEEP) ";")
#else
#define HANDOFF_PAUSE()
#endif
inline bool handoff_leader(void) {
    return get_local_id(0) == 0 && get_local_id(1) == 0 && get_local_id(2) == 0;
}
// A launch without a wait or an arrival skips its barrier on NVIDIA (the
// two barriers cost the H200's 7B decode ~6%, docs/perf.md step 63); PoCL
// hung on such a barrier under a uniform branch, so elsewhere it is taken.
#ifdef POLYCL_NVIDIA
#define HANDOFF_BARRIER_IF(c) if (c) barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE)
#else
#define HANDOFF_BARRIER_IF(c) barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE)
#endif
inline void handoff_wait(__global const ulong *pk) {
    const ulong at = pk[0];
    if (at != 0 && handoff_leader()) {
        volatile __global uint *c = (volatile __global uint *)at;
        const uint want = (uint)pk[1];
        uint polls = 0;
        while (*c < want) {
            if (++polls == HANDOFF_POLLS) {
                volatile __global uint *failure = (volatile __global uint *)pk[3];
                atomic_inc(failure);
                atomic_xchg(failure + 1, (uint)at);
                break;
            }
            HANDOFF_PAUSE();
        }
        HANDOFF_FENCE();
    }
    HANDOFF_BARRIER_IF(at != 0);
}
inline void handoff_arrive(__global const ulong *pk) {
    const ulong at = pk[2];
    HANDOFF_BARRIER_IF(at != 0);
    if (at != 0 && handoff_leader()) {
        HANDOFF_FENCE();
        const uint groups = get_num_groups(0) * get_num_groups(1) * get_num_groups(2);
        volatile __global uint *mine = (volatile __global uint *)at;
        if (atomic_inc(mine) == groups - 1) {
            if (pk[0] != 0) atomic_xchg((volatile __global uint *)pk[0], 0u);
            if (pk[1] >> 32) atomic_xchg(mine, 0u);
        }
    }
}
// The frame's two halves, which trace.cl wraps in its clock reads.
#define HANDOFF_BEGIN int pk_i = HANDOFF_SLOTS; handoff_wait(pk);
#define HANDOFF_END handoff_arrive(pk);
#undef PK_BEGIN
#define PK_BEGIN HANDOFF_BEGIN
#define PK_END HANDOFF_END
#else
#define PK_END
#endif
