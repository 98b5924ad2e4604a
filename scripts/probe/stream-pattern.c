// How fast one launch streams a decode matvec's weights by access pattern,
// timed inside the kernel (%globaltimer at each work-group's first and last
// instruction; span = last end - first start), so the launch's gap and the
// events' overhead are out of it. The Q/K/V launch's shape: work-groups of 4
// warps, a warp a row pair of 4096 Q4_0 columns (2 x 2304 bytes), 1536 groups
// (12288 rows); and the GLU's byte count (22016 rows, 2752 groups). Weights
// cycle through 16 copies so L2 holds none of a launch's. Patterns:
//   plain  - a warp reads its 4608 bytes as 16-byte loads, 9 a lane, coalesced
//   words  - polycl's Q4_0 pairs: a lane 9 words of each row at a 36-byte
//            stride, 2 iterations (mul_mv.cl mv_row2_q4_0's loads, no math)
//   words+act - and the Q8_1 activation's 9 8-byte loads a lane an iteration
//   full   - and the dp4a math (mv_row2_q4_0 itself)
// Medians of 30 launches, us, and GB/s.
// Build: cc -O2 stream-pattern.c -lOpenCL
#include "gpu-frame.h"

static const char *SRC =
    "inline ulong CLK(void) { ulong t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n"
    "inline int dot4(int a, int b, int c) { int r; asm volatile(\"dp4a.s32.s32 %0, %1, %2, %3;\" : \"=r\"(r) : \"r\"(a), \"r\"(b), \"r\"(c)); return r; }\n"
    "inline float hb(uint h) { float r; const ushort u = (ushort)h; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(r) : \"h\"(u)); return r; }\n"
    "#define FUN(lo, hi) ((int)(((lo) >> 16) | ((hi) << 16)))\n"
    "#define BEGIN const ulong t0 = CLK(); const int lane = get_local_id(0) % 32;\\\n"
    "  const long pair = get_group_id(0) * 4 + get_local_id(0) / 32;\\\n"
    "  const global char *w0 = w + pair * 4608, *w1 = w0 + 2304;\n"
    "#define END(x) if ((x) == 0x12345678) out[0] = 1;\\\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\\\n"
    "  if (get_local_id(0) == 0) { times[2 * get_group_id(0)] = t0; times[2 * get_group_id(0) + 1] = CLK(); }\n"
    "kernel void plain(const global char *w, const global char *act, global uint *out, global ulong *times) {\n"
    "  BEGIN uint x = 0; const global uint4 *p = (const global uint4 *)w0;\n"
    "  uint4 v[9];\n"
    "  for (int i = 0; i < 9; ++i) v[i] = p[lane + 32 * i];\n"
    "  for (int i = 0; i < 9; ++i) x ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;\n"
    "  END(x) }\n"
    "kernel void words(const global char *w, const global char *act, global uint *out, global ulong *times) {\n"
    "  BEGIN uint x = 0;\n"
    "  for (long ip = lane; ip < 64; ip += 32) {\n"
    "    const global uint *p0 = (const global uint *)(w0 + ip * 36), *p1 = (const global uint *)(w1 + ip * 36);\n"
    "    for (int i = 0; i < 9; ++i) x ^= p0[i] + p1[i]; }\n"
    "  END(x) }\n"
    "kernel void words_act(const global char *w, const global char *act, global uint *out, global ulong *times) {\n"
    "  BEGIN uint x = 0;\n"
    "  for (long ip = lane; ip < 64; ip += 32) {\n"
    "    const global uint2 *a = (const global uint2 *)(act + ip * 72);\n"
    "    const global uint *p0 = (const global uint *)(w0 + ip * 36), *p1 = (const global uint *)(w1 + ip * 36);\n"
    "    for (int i = 0; i < 9; ++i) { const uint2 av = a[i]; x ^= (p0[i] + av.x) ^ (p1[i] + av.y); } }\n"
    "  END(x) }\n"
    "kernel void full(const global char *w, const global char *act, global uint *out, global ulong *times) {\n"
    "  BEGIN float2 sum = (float2)(0.0f);\n"
    "  for (long ip = lane; ip < 64; ip += 32) {\n"
    "    uint a[18]; const global uint2 *pa = (const global uint2 *)(act + ip * 72);\n"
    "    for (int i = 0; i < 9; ++i) { const uint2 v = pa[i]; a[2 * i] = v.x; a[2 * i + 1] = v.y; }\n"
    "    const float da0 = hb(a[0]), sa0 = hb(a[0] >> 16), da1 = hb(a[9]), sa1 = hb(a[9] >> 16);\n"
    "    for (int m = 0; m < 2; ++m) {\n"
    "      const global uint *wp = (const global uint *)((m == 0 ? w0 : w1) + ip * 36);\n"
    "      uint x[9]; for (int i = 0; i < 9; ++i) x[i] = wp[i];\n"
    "      int i0 = 0, i1 = 0;\n"
    "      for (int i = 0; i < 4; ++i) { const int q = FUN(x[i], x[i + 1]);\n"
    "        i0 = dot4(q & 0x0F0F0F0F, (int)a[1 + i], i0); i0 = dot4((q >> 4) & 0x0F0F0F0F, (int)a[5 + i], i0);\n"
    "        i1 = dot4((int)x[5 + i] & 0x0F0F0F0F, (int)a[10 + i], i1); i1 = dot4(((int)x[5 + i] >> 4) & 0x0F0F0F0F, (int)a[14 + i], i1); }\n"
    "      const float r = hb(x[0]) * (da0 * (float)i0 - 8.0f * sa0) + hb(x[4] >> 16) * (da1 * (float)i1 - 8.0f * sa1);\n"
    "      if (m == 0) sum.x += r; else sum.y += r; } }\n"
    "  END(as_uint(sum.x + sum.y)) }\n";

#define COPY (64ul << 20)
#define COPIES 16

int main(void) {
    gpu_frame f;
    cl_int e;
    if (gpu_frame_open(&f, SRC)) return 1;
    cl_mem w = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, COPY * COPIES, NULL, &e); CK(e);
    cl_mem act = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, 8192, NULL, &e); CK(e);
    cl_mem out = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, 64, NULL, &e); CK(e);
    cl_mem times = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, 2 * 8 * 4096, NULL, &e); CK(e);
    unsigned char *fill = malloc(COPY);
    for (size_t i = 0; i < COPY; ++i) fill[i] = (unsigned char)(i * 2654435761u >> 13);
    for (int c = 0; c < COPIES; ++c) CK(clEnqueueWriteBuffer(f.q, w, CL_TRUE, COPY * c, COPY, fill, 0, NULL, NULL));
    CK(clEnqueueWriteBuffer(f.q, act, CL_TRUE, 0, 8192, fill, 0, NULL, NULL));
    const char *names[] = {"plain", "words", "words_act", "full"};
    const long shapes[] = {12288, 22016};
    cl_ulong *t = malloc(2 * 8 * 4096);
    for (int s = 0; s < 2; ++s) {
        const size_t groups = shapes[s] / 8, local = 128, global = groups * local;
        const double mb = shapes[s] * 2304.0 / 1e6;
        for (int k = 0; k < 4; ++k) {
            cl_kernel kern = clCreateKernel(f.prog, names[k], &e); CK(e);
            double span[30];
            for (int it = 0; it < 31; ++it) {
                cl_buffer_region r = {COPY * (it % COPIES), COPY};
                cl_mem sub = clCreateSubBuffer(w, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &e); CK(e);
                CK(clSetKernelArg(kern, 0, sizeof sub, &sub));
                CK(clSetKernelArg(kern, 1, sizeof act, &act));
                CK(clSetKernelArg(kern, 2, sizeof out, &out));
                CK(clSetKernelArg(kern, 3, sizeof times, &times));
                CK(clEnqueueNDRangeKernel(f.q, kern, 1, NULL, &global, &local, 0, NULL, NULL));
                CK(clEnqueueReadBuffer(f.q, times, CL_TRUE, 0, 2 * 8 * groups, t, 0, NULL, NULL));
                clReleaseMemObject(sub);
                cl_ulong lo = ~0ul, hi = 0;
                for (size_t g = 0; g < groups; ++g) {
                    if (t[2 * g] < lo) lo = t[2 * g];
                    if (t[2 * g + 1] > hi) hi = t[2 * g + 1];
                }
                if (it > 0) span[it - 1] = (hi - lo) / 1e3;
            }
            const double mid = median(span, 30);
            printf("%5ld rows (%5.1f MB) %-10s span %6.2f us  %6.0f GB/s\n", shapes[s], mb, names[k], mid,
                   mb * 1e3 / mid);
            clReleaseKernel(kern);
        }
    }
    return 0;
}
