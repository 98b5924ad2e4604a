// The group trace's frame (runtime/trace.rs, `POLYCL_PROFILE=groups`), after
// handoff.cl in the same programs. Built only with POLYCL_TRACE_AT, the
// device address of the trace buffer, on NVIDIA, where %globaltimer (one
// clock for every SM, in ns) and %smid exist. Each work-group of a packed
// kernel that reaches PK_END appends one record: when it began, when its
// hand-off wait (if any) returned, when its last work-item reached the end,
// on which SM, and the kernel's slots address (`pk`), which names the launch.
// Buffer: [records written (uint), pad to 32 bytes], then records of four
// ulongs: start, end, pk, group id | SM << 24 | wait ns << 32. Records past
// POLYCL_TRACE_CAP are counted, not written.
#if defined(POLYCL_TRACE_AT) && defined(POLYCL_NVIDIA) && !defined(POLYCL_STEP)
inline ulong trace_clock(void) {
    ulong t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
inline uint trace_smid(void) {
    uint s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
inline void trace_group(__global const ulong *pk, ulong t0, ulong t1) {
    // The group's end is its last work-item's, so the leader waits for all.
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0 && get_local_id(1) == 0 && get_local_id(2) == 0) {
        const ulong t2 = trace_clock();
        __global uint *head = (__global uint *)(POLYCL_TRACE_AT);
        const uint i = atomic_inc(head);
        if (i < POLYCL_TRACE_CAP) {
            __global ulong *r = (__global ulong *)(POLYCL_TRACE_AT) + 4 * (ulong)(i + 1);
            const ulong group = get_group_id(0) +
                                get_num_groups(0) * (get_group_id(1) + get_num_groups(1) * get_group_id(2));
            const ulong wait = min(t1 - t0, (ulong)0xFFFFFFFFu);
            r[0] = t0;
            r[1] = t2;
            r[2] = (ulong)pk;
            r[3] = (group & 0xFFFFFF) | ((ulong)(trace_smid() & 0xFF) << 24) | (wait << 32);
        }
    }
}
#undef PK_BEGIN
#undef PK_END
#ifdef HANDOFF_SLOTS
#define PK_BEGIN                                                                            \
    const ulong trace_t0 = trace_clock();                                                   \
    HANDOFF_BEGIN                                                                           \
    const ulong trace_t1 = trace_clock();
#define PK_END HANDOFF_END trace_group(pk, trace_t0, trace_t1);
#else
#define PK_BEGIN                                                                            \
    const ulong trace_t0 = trace_clock();                                                   \
    int pk_i = 0;                                                                           \
    const ulong trace_t1 = trace_t0;
#define PK_END trace_group(pk, trace_t0, trace_t1);
#endif
#endif
