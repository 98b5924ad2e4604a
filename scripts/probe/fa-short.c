// Decode attention at a short cache (llama pads the KV view to 256
// positions), 7B shape (32 heads of 128, F16 K/V, F32 q, an F16 mask row):
// can one attention work-group be as wide as MulMatAddNorm's (512) at its
// registers (64 on the H200), so that the attention could run as the first
// phase of the O projection's launch (docs/perf.md Next 1)? Each group takes
// one (head, chunk): WARPS warps of KPW keys each, one step (no second set
// of rows in flight), the warps merged in local memory, the chunk's state
// written, and the last chunk of a head merges the head's chunks (the
// fa_split.cl "last block done" pattern). Variants: today's shape (4 warps
// of 8 keys, 32 keys a chunk, 256 groups) and 512-wide ones. Prints each
// kernel's registers from NVIDIA's build log (-cl-nv-verbose), its time
// (profiling events; and in a chain of launches without events) and its
// largest error against a host reference. K and V are cycled through
// copies, so that they come from memory as in decode.
// Build: cc -O2 fa-short.c -lOpenCL -lm. Usage: fa-short [valid positions, 1..256]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "q4_0-case.h"

#define HEADS 32
#define D 128
#define NKV 256

static const char *SRC =
    "#ifdef NV\n"
    "inline float shx(float v, int m, local float *x) { float o; asm volatile(\"shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\" : \"=f\"(o) : \"f\"(v), \"r\"(m)); return o; }\n"
    "inline void fence_gpu(void) { asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\"); }\n"
    "#else\n"
    // Off NVIDIA (PoCL, for checking): a warp's exchange through local memory.
    "inline float shx(float v, int m, local float *x) { const int l = get_local_id(0);"
    " barrier(CLK_LOCAL_MEM_FENCE); x[l] = v; barrier(CLK_LOCAL_MEM_FENCE); const float o = x[(l & ~31) | ((l & 31) ^ m)];"
    " barrier(CLK_LOCAL_MEM_FENCE); return o; }\n"
    "inline void fence_gpu(void) { mem_fence(CLK_GLOBAL_MEM_FENCE); }\n"
    "#endif\n"
    "kernel void fa(const global float *q, const global half *k, const global half *v, const global half *mask,\n"
    "               global float *part, global float *out, volatile global int *cnt, float scale) {\n"
    "  local float wm[WARPS], ws[WARPS], xs[WARPS * 32]; local float4 wacc[WARPS * 32]; local int last;\n"
    "  const int lid = get_local_id(0), lane = lid % 32, warp = lid / 32;\n"
    "  const int nch = NKV / (WARPS * KPW), h = get_group_id(0) / nch, c = get_group_id(0) % nch;\n"
    "  const float4 qv = vload4(lane, q + h * D);\n"
    "  const int t0 = c * WARPS * KPW + warp * KPW;\n"
    "  float4 kr[KPW], vr[KPW]; float mv[KPW];\n"
    "  for (int j = 0; j < KPW; ++j) {\n"
    "    const long row = (long)(t0 + j) * HEADS + h;\n"
    "    kr[j] = vload_half4(lane, k + row * D); vr[j] = vload_half4(lane, v + row * D); mv[j] = vload_half(t0 + j, mask); }\n"
    "  float s[KPW];\n"
    "  for (int j = 0; j < KPW; ++j) s[j] = dot(qv, kr[j]);\n"
    "  for (int m = 16; m >= 1; m >>= 1) for (int j = 0; j < KPW; ++j) s[j] += shx(s[j], m, xs);\n"
    "  float M = -INFINITY;\n"
    "  for (int j = 0; j < KPW; ++j) { s[j] = mv[j] == -INFINITY ? -INFINITY : s[j] * scale + mv[j]; M = fmax(M, s[j]); }\n"
    "  float S = 0.0f; float4 acc = (float4)(0.0f);\n"
    "  if (M != -INFINITY) for (int j = 0; j < KPW; ++j) { const float p = exp(s[j] - M); S += p; if (p != 0.0f) acc += p * vr[j]; }\n"
    "  if (lane == 0) { wm[warp] = M; ws[warp] = S; }\n"
    "  wacc[warp * 32 + lane] = acc;\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    // The chunk's state: warp 0 merges the warps and writes M, S, acc.
    "  global float *st = part + (long)(h * nch + c) * (4 + D);\n"
    "  if (warp == 0) {\n"
    "    float Mc = -INFINITY; for (int w = 0; w < WARPS; ++w) Mc = fmax(Mc, wm[w]);\n"
    "    float Sc = 0.0f; float4 a = (float4)(0.0f);\n"
    "    for (int w = 0; w < WARPS; ++w) { const float f = wm[w] == -INFINITY ? 0.0f : exp(wm[w] - Mc); Sc += ws[w] * f; a += wacc[w * 32 + lane] * f; }\n"
    "    if (lane == 0) { st[0] = Mc; st[1] = Sc; }\n"
    "    vstore4(a, lane, st + 4);\n"
    "    fence_gpu();\n"
    "  }\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);\n"
    "  if (lid == 0) { last = atomic_inc(&cnt[h]) == nch - 1; if (last) { cnt[h] = 0; fence_gpu(); } }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (!last || warp != 0) return;\n"
    // The head's last chunk merges the head's chunks (volatile: L1 is not
    // coherent across SMs on NVIDIA).
    "  const volatile global float *hp = part + (long)h * nch * (4 + D);\n"
    "  float Mx = -INFINITY, Sx = 0.0f; float4 ax = (float4)(0.0f);\n"
    "  for (int cc = 0; cc < nch; ++cc) {\n"
    "    const volatile global float *p = hp + cc * (4 + D); const float m = p[0], sm = p[1];\n"
    "    const float4 x = (float4)(p[4 + 4 * lane], p[5 + 4 * lane], p[6 + 4 * lane], p[7 + 4 * lane]);\n"
    "    if (m == -INFINITY) continue;\n"
    "    if (m > Mx) { const float f = exp(Mx - m); Sx = Sx * f + sm; ax = ax * f + x; Mx = m; }\n"
    "    else { const float f = exp(m - Mx); Sx += sm * f; ax += x * f; } }\n"
    "  vstore4(Sx == 0.0f ? (float4)(0.0f) : ax / Sx, lane, out + h * D);\n"
    "}\n";

int main(int argc, char **argv) {
    const int valid = argc > 1 ? atoi(argv[1]) : 64;
    const int iters = getenv("ITERS") ? atoi(getenv("ITERS")) : 400;
    cl_device_id d;
    cl_context ctx;
    cl_command_queue q;
    cl_int e;
    const int nv = mv_open(&d, &ctx, &q);
    // Random q, K, V (F16, within +-1) and a mask row that keeps `valid` positions.
    const long kvn = (long)NKV * HEADS * D;
    float *qh = malloc(sizeof(float) * HEADS * D), *ref = malloc(sizeof(float) * HEADS * D),
          *out = malloc(sizeof(float) * HEADS * D);
    uint16_t *kh = malloc(2 * kvn), *vh = malloc(2 * kvn), mh[NKV];
    srand(7);
    for (int i = 0; i < HEADS * D; ++i) qh[i] = (rand() % 2001 - 1000) / 1000.0f;
    for (long i = 0; i < kvn; ++i) {
        kh[i] = f2h((rand() % 2001 - 1000) / 1000.0f);
        vh[i] = f2h((rand() % 2001 - 1000) / 1000.0f);
    }
    for (int t = 0; t < NKV; ++t) mh[t] = t < valid ? 0 : 0xFC00; // -inf
    const float scale = 1.0f / sqrtf((float)D);
    for (int h = 0; h < HEADS; ++h) {
        double sc[NKV], mx = -1e300, sum = 0;
        for (int t = 0; t < valid; ++t) {
            double s = 0;
            for (int i = 0; i < D; ++i) s += qh[h * D + i] * h2f(kh[((long)t * HEADS + h) * D + i]);
            sc[t] = s * scale;
            mx = fmax(mx, sc[t]);
        }
        for (int t = 0; t < valid; ++t) sum += sc[t] = exp(sc[t] - mx);
        for (int i = 0; i < D; ++i) {
            double a = 0;
            for (int t = 0; t < valid; ++t) a += sc[t] * h2f(vh[((long)t * HEADS + h) * D + i]);
            ref[h * D + i] = (float)(a / sum);
        }
    }
    cl_mem bq = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(float) * HEADS * D, qh, &e);
    // COPIES copies of K and V (4 MB each pair), cycled through, so that L2
    // holds none of a launch's rows, as in decode, where a token's weights
    // stream through L2 between one layer's attention and the next token's.
    enum { COPIES = 32 };
    cl_mem kall = clCreateBuffer(ctx, CL_MEM_READ_ONLY, 2 * kvn * COPIES, NULL, &e);
    cl_mem vall = clCreateBuffer(ctx, CL_MEM_READ_ONLY, 2 * kvn * COPIES, NULL, &e);
    cl_mem bk[COPIES], bv[COPIES];
    for (int c = 0; c < COPIES; ++c) {
        clEnqueueWriteBuffer(q, kall, CL_TRUE, 2 * kvn * c, 2 * kvn, kh, 0, NULL, NULL);
        clEnqueueWriteBuffer(q, vall, CL_TRUE, 2 * kvn * c, 2 * kvn, vh, 0, NULL, NULL);
        cl_buffer_region reg = {2 * kvn * c, 2 * kvn};
        bk[c] = clCreateSubBuffer(kall, 0, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
        bv[c] = clCreateSubBuffer(vall, 0, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
    }
    cl_mem bm = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof mh, mh, &e);
    cl_mem bp = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * HEADS * NKV * (4 + D), NULL, &e);
    cl_mem bo = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * HEADS * D, NULL, &e);
    int zeros[HEADS] = {0};
    cl_mem bc = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zeros, zeros, &e);
    printf("== %d heads of %d, %d cached positions, %d of them valid\n", HEADS, D, NKV, valid);
    // warps a group, keys a warp: today's shape first (4 x 8: 32 keys a
    // chunk, 8 chunks a head), then 512-wide groups.
    const int vs[][2] = {{4, 8}, {4, 4}, {16, 4}, {16, 2}, {16, 8}, {8, 4}};
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; ++vi) {
        const int warps = vs[vi][0], kpw = vs[vi][1];
        if (NKV % (warps * kpw)) continue;
        char opts[256];
        snprintf(opts, sizeof opts, "-DWARPS=%d -DKPW=%d -DHEADS=%d -DD=%d -DNKV=%d %s", warps, kpw, HEADS, D, NKV,
                 nv ? "-DNV -cl-nv-verbose" : "");
        cl_program pr = mv_build(ctx, d, SRC, opts);
        if (!pr) continue;
        char regs[64] = "?";
        if (nv) {
            char log[16384] = "";
            clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
            const char *u = strstr(log, "Used ");
            if (u) snprintf(regs, sizeof regs, "%d", atoi(u + 5));
        }
        cl_kernel k = clCreateKernel(pr, "fa", &e);
        cl_mem args[] = {bq, bk[0], bv[0], bm, bp, bo, bc};
        for (int a = 0; a < 7; ++a) clSetKernelArg(k, a, sizeof(cl_mem), &args[a]);
        clSetKernelArg(k, 7, sizeof(float), &scale);
        const size_t local = 32 * warps, global = (size_t)HEADS * (NKV / (warps * kpw)) * local;
        const cl_uint kv_args[] = {1, 2};
        cl_mem *const kv_cycle[] = {bk, bv};
        double gpu, chain;
        mv_time(q, k, global, local, iters, 2, kv_args, kv_cycle, COPIES, &gpu, &chain);
        clEnqueueReadBuffer(q, bo, CL_TRUE, 0, sizeof(float) * HEADS * D, out, 0, NULL, NULL);
        double err = 0;
        for (int i = 0; i < HEADS * D; ++i) err = fmax(err, fabs(out[i] - ref[i]));
        printf("warps %2d x %d keys (%3zu groups of %3zu)  registers %-4s event %6.2f us  chain %6.2f us  max err %.1e%s\n",
               warps, kpw, global / local, local, regs, gpu, chain, err, err > 1e-3 ? "  WRONG" : "");
        clReleaseKernel(k);
        clReleaseProgram(pr);
    }
    return 0;
}
