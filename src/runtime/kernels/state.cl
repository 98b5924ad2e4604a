// Kernels of the ops the state passes and the C decoder path add: the beam
// reorder (Gather), Concat of 2-byte types (F16 KV caches) and TopK.
// Reading and committing state variables are device copies, not kernels.

// GATHER along one dim: dst[c] = src[c with c[axis] = idx[c[axis]]]. Elements
// are moved as raw bits (B2: 2-byte types, B4: 4-byte types); an index outside
// [0, src_ne[axis]) yields zero bits (the host checks graph-input indices first).
// global {nelements(dst)}.
#define GATHER_KERNEL(NAME, ELEM, ITYPE)                                            \
kernel void NAME(CTENSOR(src), CTENSOR(idx), TENSOR(dst), int axis) {              \
    const long i = get_global_id(0);                                               \
    if (i >= nelements4(dst_ne)) return;                                           \
    const long4 d = unravel4(i, dst_ne);                                           \
    long4 c = d;                                                                   \
    const long j = axis == 0 ? c.s0 : axis == 1 ? c.s1 : axis == 2 ? c.s2 : c.s3; \
    const long r = (long) *(const __global ITYPE *) AT(idx, j, 0, 0, 0);           \
    const long n = axis == 0 ? src_ne.s0 : axis == 1 ? src_ne.s1 : axis == 2 ? src_ne.s2 : src_ne.s3; \
    ELEM v = 0;                                                                    \
    if (r >= 0 && r < n) {                                                         \
        if (axis == 0) c.s0 = r; else if (axis == 1) c.s1 = r;                     \
        else if (axis == 2) c.s2 = r; else c.s3 = r;                               \
        v = *(const __global ELEM *) AT(src, c.s0, c.s1, c.s2, c.s3);              \
    }                                                                              \
    *(__global ELEM *) AT(dst, d.s0, d.s1, d.s2, d.s3) = v;                        \
}

GATHER_KERNEL(kernel_gather_b2_i32, ushort, int)
GATHER_KERNEL(kernel_gather_b4_i32, uint, int)
GATHER_KERNEL(kernel_gather_b2_i64, ushort, long)
GATHER_KERNEL(kernel_gather_b4_i64, uint, long)

// CONCAT of 2-byte types (the stateful KV append: past rows, then new rows,
// along dim). Raw bits, so F16 caches are bit-exact. global {nelements(dst)}.
kernel void kernel_concat_b2(CTENSOR(a), CTENSOR(b), TENSOR(dst), int dim) {
    const long i = get_global_id(0);
    if (i >= nelements4(dst_ne)) return;
    const long4 c = unravel4(i, dst_ne);
    const long ca = dim == 0 ? c.s0 : dim == 1 ? c.s1 : dim == 2 ? c.s2 : c.s3;
    const long na = dim == 0 ? a_ne.s0 : dim == 1 ? a_ne.s1 : dim == 2 ? a_ne.s2 : a_ne.s3;
    ushort v;
    if (ca < na) {
        v = *(const __global ushort *) AT(a, c.s0, c.s1, c.s2, c.s3);
    } else {
        long4 cb = c;
        if (dim == 0) cb.s0 -= na;
        else if (dim == 1) cb.s1 -= na;
        else if (dim == 2) cb.s2 -= na;
        else cb.s3 -= na;
        v = *(const __global ushort *) AT(b, cb.s0, cb.s1, cb.s2, cb.s3);
    }
    *(__global ushort *) AT(dst, c.s0, c.s1, c.s2, c.s3) = v;
}

// TOP_K of F32 rows: values and I32 indices of the k largest elements, in
// descending order, ties by lower index; NaNs are never selected before
// numbers. One work-item per row (selection, O(k * ne0)): rows are short where
// TOP_K appears (expert routing, sampling candidates).
// global {ne1*ne2*ne3 of src}.
inline bool topk_before(float a, long ia, float b, long ib) {
    // Whether (a, ia) comes before (b, ib) in the output order.
    if (isnan(b)) return !isnan(a) || ia < ib;
    if (isnan(a)) return false;
    return a > b || (a == b && ia < ib);
}

kernel void kernel_top_k_f32(CTENSOR(src), TENSOR(values), TENSOR(indices), int k) {
    const long row = get_global_id(0);
    const long nrows = src_ne.s1 * src_ne.s2 * src_ne.s3;
    if (row >= nrows) return;
    const long i1 = row % src_ne.s1;
    const long i2 = (row / src_ne.s1) % src_ne.s2;
    const long i3 = row / (src_ne.s1 * src_ne.s2);
    const long n = src_ne.s0;
    float pv = 0.0f;
    long pi = -1;
    for (int j = 0; j < k; j++) {
        long bi = -1;
        float bv = 0.0f;
        for (long i = 0; i < n; i++) {
            const float v = load_f32(AT(src, i, i1, i2, i3));
            // Only elements after the previous pick in the output order qualify.
            if (pi >= 0 && !topk_before(pv, pi, v, i)) continue;
            if (bi < 0 || topk_before(v, i, bv, bi)) {
                bi = i;
                bv = v;
            }
        }
        if (bi < 0) break;
        store_f32(AT(values, j, i1, i2, i3), bv);
        *(__global int *) AT(indices, j, i1, i2, i3) = (int) bi;
        pv = bv;
        pi = bi;
    }
}
