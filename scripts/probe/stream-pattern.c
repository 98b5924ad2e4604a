// How fast one launch streams a decode matvec's weights by access pattern and
// by how many work-groups a compute unit holds, timed inside the kernel
// (%globaltimer at each work-group's first and last instruction; span = last
// end - first start), so the launch's gap and the events' overhead are out of
// it. The Q/K/V launch's shape: work-groups of 4 warps, a warp a row pair of
// 4096 Q4_0 columns (2 x 2304 bytes), 1536 groups (12288 rows); and the GLU's
// byte count (22016 rows, 2752 groups). Weights cycle through 16 copies so L2
// holds none of a launch's. Patterns:
//   plain     - a warp reads its 4608 bytes as 16-byte loads, 9 a lane, coalesced
//   words     - polycl's Q4_0 pairs: a lane 9 words of each row at a 36-byte
//               stride, 2 iterations (mul_mv.cl mv_row2_q4_0's loads, no math)
//   words_act - and the Q8_1 activation's 9 8-byte loads a lane an iteration
//   full      - and the dp4a math (mv_row2_q4_0 itself)
//   full_u2   - full with both iterations' loads issued before any math
//   full_lact - full with the activation staged in local memory by the group
//   full_4row - full, a warp two row pairs sharing each activation load
//               (half the groups)
//   async     - full with the row pair copied by cp.async into local memory
//               (no registers carry it in flight) and the activation too, once
//               a group (23 KB a group); also with 22 KB more, which leaves ~4
//               groups a compute unit, as the real Q/K/V kernel's 128
//               registers do: does cp.async keep the stream at that occupancy?
//   async_gact - async with the activation from global memory (L1), 27 KB more
// `full` also runs with dynamic local memory of 13, 27 and 40 KB a group,
// `plain` and `words` with 27, to cap the groups a compute unit holds;
// `peak` is the most groups seen running at once on one compute unit
// (%smid). On the H200 any of it made `full` 2.5x slower at every cap alike
// (docs/perf.md step 66), most likely by the L1 the carve-out takes from
// the loads all warps share, so it does not stand in for a register cap.
// Medians of 30 launches, us, and GB/s.
// Build: cc -O2 stream-pattern.c -lOpenCL
#include "gpu-frame.h"

static const char *SRC =
    "inline ulong CLK(void) { ulong t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n"
    "inline uint SMID(void) { uint s; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(s)); return s; }\n"
    "inline int dot4(int a, int b, int c) { int r; asm volatile(\"dp4a.s32.s32 %0, %1, %2, %3;\" : \"=r\"(r) : \"r\"(a), \"r\"(b), \"r\"(c)); return r; }\n"
    "inline float hb(uint h) { float r; const ushort u = (ushort)h; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(r) : \"h\"(u)); return r; }\n"
    "#define FUN(lo, hi) ((int)(((lo) >> 16) | ((hi) << 16)))\n"
    "#define ARGS const global char *w, const global char *act, global uint *out, global ulong *times, local char *pad\n"
    "#define BEGIN_ROWS(PAIRS) const ulong t0 = CLK(); const int lane = get_local_id(0) % 32;\\\n"
    "  if (get_local_id(0) == 0) pad[0] = 0;\\\n"
    "  const long pair = (get_group_id(0) * 4 + get_local_id(0) / 32) * (PAIRS);\\\n"
    "  const global char *w0 = w + pair * 4608, *w1 = w0 + 2304;\n"
    "#define BEGIN BEGIN_ROWS(1)\n"
    "#define END(x) if ((x) == 0x12345678) out[0] = 1;\\\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\\\n"
    "  if (get_local_id(0) == 0) { times[3 * get_group_id(0)] = t0; times[3 * get_group_id(0) + 1] = CLK();\\\n"
    "    times[3 * get_group_id(0) + 2] = SMID(); }\n"
    // One pair iteration's math: a[18] the two Q8_1 blocks, x the row's 9 words.
    "inline float pair_dot(const uint *a, const uint *x) {\n"
    "  const float da0 = hb(a[0]), sa0 = hb(a[0] >> 16), da1 = hb(a[9]), sa1 = hb(a[9] >> 16);\n"
    "  int i0 = 0, i1 = 0;\n"
    "  for (int i = 0; i < 4; ++i) { const int q = FUN(x[i], x[i + 1]);\n"
    "    i0 = dot4(q & 0x0F0F0F0F, (int)a[1 + i], i0); i0 = dot4((q >> 4) & 0x0F0F0F0F, (int)a[5 + i], i0);\n"
    "    i1 = dot4((int)x[5 + i] & 0x0F0F0F0F, (int)a[10 + i], i1); i1 = dot4(((int)x[5 + i] >> 4) & 0x0F0F0F0F, (int)a[14 + i], i1); }\n"
    "  return hb(x[0]) * (da0 * (float)i0 - 8.0f * sa0) + hb(x[4] >> 16) * (da1 * (float)i1 - 8.0f * sa1); }\n"
    "inline void load_act(const global char *act, long ip, uint *a) {\n"
    "  const global uint2 *pa = (const global uint2 *)(act + ip * 72);\n"
    "  for (int i = 0; i < 9; ++i) { const uint2 v = pa[i]; a[2 * i] = v.x; a[2 * i + 1] = v.y; } }\n"
    "inline void load_words(const global char *row, long ip, uint *x) {\n"
    "  const global uint *p = (const global uint *)(row + ip * 36); for (int i = 0; i < 9; ++i) x[i] = p[i]; }\n"
    "kernel void plain(ARGS) {\n"
    "  BEGIN uint x = 0; const global uint4 *p = (const global uint4 *)w0;\n"
    "  uint4 v[9];\n"
    "  for (int i = 0; i < 9; ++i) v[i] = p[lane + 32 * i];\n"
    "  for (int i = 0; i < 9; ++i) x ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;\n"
    "  END(x) }\n"
    "kernel void words(ARGS) {\n"
    "  BEGIN uint x = 0;\n"
    "  for (long ip = lane; ip < 64; ip += 32) {\n"
    "    const global uint *p0 = (const global uint *)(w0 + ip * 36), *p1 = (const global uint *)(w1 + ip * 36);\n"
    "    for (int i = 0; i < 9; ++i) x ^= p0[i] + p1[i]; }\n"
    "  END(x) }\n"
    "kernel void words_act(ARGS) {\n"
    "  BEGIN uint x = 0;\n"
    "  for (long ip = lane; ip < 64; ip += 32) {\n"
    "    const global uint2 *a = (const global uint2 *)(act + ip * 72);\n"
    "    const global uint *p0 = (const global uint *)(w0 + ip * 36), *p1 = (const global uint *)(w1 + ip * 36);\n"
    "    for (int i = 0; i < 9; ++i) { const uint2 av = a[i]; x ^= (p0[i] + av.x) ^ (p1[i] + av.y); } }\n"
    "  END(x) }\n"
    "kernel void full(ARGS) {\n"
    "  BEGIN float2 sum = (float2)(0.0f);\n"
    "  for (long ip = lane; ip < 64; ip += 32) {\n"
    "    uint a[18], x0[9], x1[9]; load_act(act, ip, a); load_words(w0, ip, x0); load_words(w1, ip, x1);\n"
    "    sum.x += pair_dot(a, x0); sum.y += pair_dot(a, x1); }\n"
    "  END(as_uint(sum.x + sum.y)) }\n"
    "kernel void full_u2(ARGS) {\n"
    "  BEGIN float2 sum = (float2)(0.0f);\n"
    "  uint a[2][18], x0[2][9], x1[2][9];\n"
    "  for (int k = 0; k < 2; ++k) { const long ip = lane + 32 * k;\n"
    "    load_act(act, ip, a[k]); load_words(w0, ip, x0[k]); load_words(w1, ip, x1[k]); }\n"
    "  for (int k = 0; k < 2; ++k) { sum.x += pair_dot(a[k], x0[k]); sum.y += pair_dot(a[k], x1[k]); }\n"
    "  END(as_uint(sum.x + sum.y)) }\n"
    "kernel void full_lact(ARGS) {\n"
    "  BEGIN float2 sum = (float2)(0.0f);\n"
    "  local uint2 la[576];\n"
    "  for (int i = get_local_id(0); i < 576; i += 128) la[i] = ((const global uint2 *)act)[i];\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (long ip = lane; ip < 64; ip += 32) {\n"
    "    uint a[18], x0[9], x1[9]; load_words(w0, ip, x0); load_words(w1, ip, x1);\n"
    "    for (int i = 0; i < 9; ++i) { const uint2 v = la[ip * 9 + i]; a[2 * i] = v.x; a[2 * i + 1] = v.y; }\n"
    "    sum.x += pair_dot(a, x0); sum.y += pair_dot(a, x1); }\n"
    "  END(as_uint(sum.x + sum.y)) }\n"
    "kernel void full_4row(ARGS) {\n"
    "  BEGIN_ROWS(2) float4 sum = (float4)(0.0f);\n"
    "  const global char *w2 = w1 + 2304, *w3 = w2 + 2304;\n"
    "  for (long ip = lane; ip < 64; ip += 32) {\n"
    "    uint a[18], x0[9], x1[9], x2[9], x3[9]; load_act(act, ip, a);\n"
    "    load_words(w0, ip, x0); load_words(w1, ip, x1); load_words(w2, ip, x2); load_words(w3, ip, x3);\n"
    "    sum.x += pair_dot(a, x0); sum.y += pair_dot(a, x1); sum.z += pair_dot(a, x2); sum.w += pair_dot(a, x3); }\n"
    "  END(as_uint(sum.x + sum.y + sum.z + sum.w)) }\n"
    // cp.async: the row pair (and the activation, once a group) copied into
    // local memory with no registers carrying it in flight, then the math
    // from there. `.cg`: through L2 only, so L1's size does not matter.
    "inline void cp16(local uint *dst, const global uint *src) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"((uint)(ulong)dst), \"l\"(src) : \"memory\"); }\n"
    "inline void cp_wait(void) { asm volatile(\"cp.async.commit_group;\\n\\tcp.async.wait_group 0;\" ::: \"memory\"); }\n"
    "#define ASYNC_BODY(ACT)\\\n"
    "  const int warp = get_local_id(0) / 32; float2 sum = (float2)(0.0f);\\\n"
    "  for (int i = 0; i < 9; ++i) cp16(&ws[warp][4 * (lane + 32 * i)], (const global uint *)w0 + 4 * (lane + 32 * i));\\\n"
    "  cp_wait(); barrier(CLK_LOCAL_MEM_FENCE);\\\n"
    "  for (int ip = lane; ip < 64; ip += 32) {\\\n"
    "    uint a[18], x0[9], x1[9]; ACT\\\n"
    "    for (int i = 0; i < 9; ++i) { x0[i] = ws[warp][ip * 9 + i]; x1[i] = ws[warp][576 + ip * 9 + i]; }\\\n"
    "    sum.x += pair_dot(a, x0); sum.y += pair_dot(a, x1); }\\\n"
    "  END(as_uint(sum.x + sum.y))\n"
    "kernel void async(ARGS) {\n"
    "  BEGIN local uint ws[4][1152]; local uint la[1152];\n"
    "  for (int c = get_local_id(0); c < 288; c += 128) cp16(&la[4 * c], (const global uint *)act + 4 * c);\n"
    "  ASYNC_BODY(for (int i = 0; i < 18; ++i) a[i] = la[ip * 18 + i];) }\n"
    "kernel void async_gact(ARGS) {\n"
    "  BEGIN local uint ws[4][1152];\n"
    "  ASYNC_BODY(load_act(act, ip, a);) }\n";

#define COPY (64ul << 20)
#define COPIES 16

// The most groups whose [start, end] overlap on one compute unit.
static int peak_groups(const cl_ulong *t, size_t groups) {
    int best = 0;
    for (size_t g = 0; g < groups; ++g) {
        int n = 0;
        for (size_t h = 0; h < groups; ++h)
            n += t[3 * h + 2] == t[3 * g + 2] && t[3 * h] <= t[3 * g] && t[3 * h + 1] > t[3 * g];
        if (n > best) best = n;
    }
    return best;
}

int main(void) {
    gpu_frame f;
    cl_int e;
    if (gpu_frame_open(&f, SRC)) return 1;
    cl_mem w = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, COPY * COPIES, NULL, &e); CK(e);
    cl_mem act = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, 8192, NULL, &e); CK(e);
    cl_mem out = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, 64, NULL, &e); CK(e);
    cl_mem times = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, 3 * 8 * 4096, NULL, &e); CK(e);
    unsigned char *fill = malloc(COPY);
    for (size_t i = 0; i < COPY; ++i) fill[i] = (unsigned char)(i * 2654435761u >> 13);
    for (int c = 0; c < COPIES; ++c) CK(clEnqueueWriteBuffer(f.q, w, CL_TRUE, COPY * c, COPY, fill, 0, NULL, NULL));
    CK(clEnqueueWriteBuffer(f.q, act, CL_TRUE, 0, 8192, fill, 0, NULL, NULL));
    // name, pairs a warp, local memory bytes a group beyond the kernel's own
    const struct { const char *name; int pairs; size_t pad; } cases[] = {
        {"plain", 1, 1},       {"words", 1, 1},       {"words_act", 1, 1},   {"full", 1, 1},
        {"plain", 1, 27 << 10}, {"words", 1, 27 << 10}, {"full", 1, 13 << 10}, {"full", 1, 27 << 10},
        {"full", 1, 40 << 10}, {"full_u2", 1, 1},      {"full_lact", 1, 1},   {"full_4row", 2, 1},
        {"async", 1, 1},       {"async", 1, 22 << 10}, {"async_gact", 1, 1},  {"async_gact", 1, 27 << 10},
    };
    const long shapes[] = {12288, 22016};
    cl_ulong *t = malloc(3 * 8 * 4096);
    for (int s = 0; s < 2; ++s) {
        const double mb = shapes[s] * 2304.0 / 1e6;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
            const size_t groups = shapes[s] / 8 / cases[c].pairs, local = 128, global = groups * local;
            cl_kernel kern = clCreateKernel(f.prog, cases[c].name, &e); CK(e);
            double span[30];
            int peak = 0;
            for (int it = 0; it < 31; ++it) {
                cl_buffer_region r = {COPY * (it % COPIES), COPY};
                cl_mem sub = clCreateSubBuffer(w, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &e); CK(e);
                CK(clSetKernelArg(kern, 0, sizeof sub, &sub));
                CK(clSetKernelArg(kern, 1, sizeof act, &act));
                CK(clSetKernelArg(kern, 2, sizeof out, &out));
                CK(clSetKernelArg(kern, 3, sizeof times, &times));
                CK(clSetKernelArg(kern, 4, cases[c].pad, NULL));
                CK(clEnqueueNDRangeKernel(f.q, kern, 1, NULL, &global, &local, 0, NULL, NULL));
                CK(clEnqueueReadBuffer(f.q, times, CL_TRUE, 0, 3 * 8 * groups, t, 0, NULL, NULL));
                clReleaseMemObject(sub);
                cl_ulong lo = ~0ul, hi = 0;
                for (size_t g = 0; g < groups; ++g) {
                    if (t[3 * g] < lo) lo = t[3 * g];
                    if (t[3 * g + 1] > hi) hi = t[3 * g + 1];
                }
                if (it > 0) span[it - 1] = (hi - lo) / 1e3;
                if (it == 30) peak = peak_groups(t, groups);
            }
            const double mid = median(span, 30);
            printf("%5ld rows (%5.1f MB) %-10s local +%2zu KB  span %6.2f us  %6.0f GB/s  peak %2d groups a CU\n",
                   shapes[s], mb, cases[c].name, cases[c].pad >> 10, mid, mb * 1e3 / mid, peak);
            clReleaseKernel(kern);
        }
    }
    return 0;
}
