// Can a decode kernel start streaming its weights while the kernel before it
// drains? docs/perf.md step 10 and 15: a decode-sized read spends ~6 us
// beyond its bytes ramping up and draining, and a persistent kernel's
// barrier keeps that cost. Here a chain of N weight-streaming kernels runs
//   A  one in-order queue (today's chain),
//   B  one queue, each kernel also waiting on its predecessor's arrival
//      counter (the cost of the hand-off alone),
//   C  two in-order queues, kernels alternating, each kernel loading its
//      first weights, then waiting on its predecessor's counter (the hand-off
//      replaces the queue's ordering, so a kernel's ramp can overlap the last
//      one's drain),
//   D  two queues, no waiting (the bound: no dependency at all; its data
//      check is expected to fail),
//   E  as C, but waiting before any load (a kernel's frame that waits at its
//      top, before it knows what to load),
//   F  as C without a clFlush after each enqueue (does the driver submit a
//      queue's work without one?),
//   G  one queue, two kernels a launch: each work-group takes a ticket, the
//      first tickets run the first kernel's stream, the rest load their first
//      weights of the second, then wait until every first-phase group has
//      counted itself done (docs/perf.md Next 1: a layer's kernels in fewer
//      launches without a grid barrier, the successor's ramp over the
//      predecessor's drain, in one queue).
// The wait gives up after 65536 polls (a kernel that ran before its
// predecessor then shows as WRONG data, not as a hang).
// "layer" cycles through the 7B Q4_0 layer's five launches (Q+K+V, attention's
// ~0.5 MB, O, gate + up, down) and prints the time of the five.
// Each kernel reads `in` (the last kernel's `out`) after its wait and writes
// in + 1, so A, B and C must end with every value equal to N.
// Usage: overlap [N (made even)] [grid work-groups of 256, 0 = 8 a compute unit] [weight bytes]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *src =
    "#define U 8\n"
    // Work-item 0 polls until *c reaches `want` (at most `polls` times), then
    // the group goes on together.
    "inline void wait_count(volatile global int *c, int want, int polls) {\n"
    "  if (get_local_id(0) == 0) {\n"
    "    for (int t = 0; t < polls && atomic_add(c, 0) < want; ++t) {}\n"
    "  }\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "}\n"
    // A work-item's U loads of the stream from i, gsz apart, up to end.
    "inline void load_u(const global int4 *w, long i, long gsz, long end, int4 *v) {\n"
    "  for (int u = 0; u < U; ++u) { long j = i + u * gsz; v[u] = j < end ? w[j] : (int4)0; }\n"
    "}\n"
    // The loads in v (from i), then the rest of the stream, folded so that
    // none is dead; a fold that can not occur writes out[100].
    "inline void drain(const global int4 *w, long i, long gsz, long end, int4 *v, global float *out) {\n"
    "  int4 s = 0;\n"
    "  for (int u = 0; u < U; ++u) s ^= v[u];\n"
    "  for (i += U * gsz; i < end; i += U * gsz) {\n"
    "    load_u(w, i, gsz, end, v);\n"
    "    for (int u = 0; u < U; ++u) s ^= v[u];\n"
    "  }\n"
    "  if ((s.x ^ s.y ^ s.z ^ s.w) == 0x12345678) out[100] = 1.0f;\n"
    "}\n"
    "kernel void stream(const global int4 *w, long off4, long n4, const global float *in,\n"
    "                   global float *out, volatile global int *cnt, int my, int prev_groups, int wait) {\n"
    "  const long gsz = get_global_size(0);\n"
    "  const long i = off4 + get_global_id(0);\n"
    "  const long end = off4 + n4;\n"
    "  int4 v[U];\n"
    "  if (wait == 2) wait_count(&cnt[my - 1], prev_groups, 1 << 16);\n"
    "  load_u(w, i, gsz, end, v);\n"
    "  if (wait == 1) wait_count(&cnt[my - 1], prev_groups, 1 << 16);\n"
    "  const int g = get_group_id(0);\n"
    "  const float a = g < 64 ? in[g] : 0.0f;\n"
    "  drain(w, i, gsz, end, v, out);\n"
    "  if (get_local_id(0) == 0 && g < 64) out[g] = a + 1.0f;\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "  if (get_local_id(0) == 0) { mem_fence(CLK_GLOBAL_MEM_FENCE); atomic_inc(&cnt[my]); }\n"
    "}\n"
    // G: two streams in one launch, phases by ticket. tk[0] hands out tickets,
    // tk[1] counts the first phase's groups done. The second phase reads
    // `mid` (the first phase's output) through a volatile pointer after its
    // wait: L1 is not coherent across SMs on NVIDIA.
    "kernel void stream2(const global int4 *w, long offA, long nA, long offB, long nB,\n"
    "                    const global float *in, volatile global float *mid, global float *out,\n"
    "                    volatile global int *cnt, int at, int each) {\n"
    "  volatile global int *tk = cnt + at;\n"
    "  local int ticket;\n"
    "  if (get_local_id(0) == 0) ticket = atomic_inc(&tk[0]);\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  const int second = ticket >= each;\n"
    "  const int g = second ? ticket - each : ticket;\n"
    "  const long gsz = (long)each * get_local_size(0);\n"
    "  const long i = (second ? offB : offA) + (long)g * get_local_size(0) + get_local_id(0);\n"
    "  const long end = second ? offB + nB : offA + nA;\n"
    "  int4 v[U];\n"
    "  load_u(w, i, gsz, end, v);\n"
    "  if (second) wait_count(&tk[1], each, 1 << 20);\n"
    "  const float a = g < 64 ? (second ? mid[g] : in[g]) : 0.0f;\n"
    "  drain(w, i, gsz, end, v, out);\n"
    "  if (get_local_id(0) == 0 && g < 64) { if (second) out[g] = a + 1.0f; else mid[g] = a + 1.0f; }\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "  if (get_local_id(0) == 0 && !second) { mem_fence(CLK_GLOBAL_MEM_FENCE); atomic_inc(&tk[1]); }\n"
    "}\n";

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    const int n = ((argc > 1 ? atoi(argv[1]) : 200) + 1) & ~1; // even, for G
    int groups_arg = argc > 2 ? atoi(argv[2]) : 0;
    cl_platform_id p;
    cl_device_id d;
    cl_int e;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    cl_uint cus;
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    cl_command_queue q[2] = {clCreateCommandQueue(ctx, d, 0, &e), clCreateCommandQueue(ctx, d, 0, &e)};
    cl_program pr = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    if (clBuildProgram(pr, 1, &d, "", NULL, NULL) != CL_SUCCESS) {
        char log[8192];
        clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        fprintf(stderr, "build failed:\n%s\n", log);
        return 1;
    }
    const long big = argc > 3 ? atol(argv[3]) : (1L << 30);
    cl_mem w = clCreateBuffer(ctx, CL_MEM_READ_ONLY, big, NULL, &e);
    {
        char *ones = malloc(1 << 24);
        memset(ones, 1, 1 << 24);
        for (long o = 0; o < big; o += 1 << 24) clEnqueueWriteBuffer(q[0], w, CL_TRUE, o, 1 << 24, ones, 0, NULL, NULL);
        free(ones);
    }
    cl_mem buf[2] = {clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &e),
                     clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &e)};
    // B..F: one counter a kernel; G: two a launch (n / 2 launches).
    cl_mem cnt = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(int) * (n + 2), NULL, &e);
    cl_mem mid = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &e);
    // Bytes of one kernel's weights: the 7B Q4_0's gate + up, down, Q + K + V, O.
    const long shapes[] = {50724864, 25362432, 28311552, 9437184, 0};
    const char *names[] = {"gate+up 50.7 MB", "down 25.4 MB", "qkv 28.3 MB", "o 9.4 MB", "layer (5 kernels)"};
    const long layer[] = {28311552, 524288, 9437184, 50724864, 25362432};
    const int grids[] = {groups_arg ? groups_arg : (int)cus * 8, (int)cus * 2, (int)cus};
    for (int si = 0; si < 5; ++si) {
        for (int gi = 0; gi < 3; ++gi) {
            const int groups = grids[gi];
            const size_t local = 256, global = (size_t)groups * local;
            for (int mode = 0; mode < 7; ++mode) {
                double best = 1e30, host = 1e30;
                int ok = 1;
                // Arguments bound before the timed loop, as polycl binds them at
                // plan time: the loop is enqueues (and flushes) only.
                cl_kernel *ks = malloc(sizeof(cl_kernel) * n);
                // G: launch k runs kernels 2k and 2k + 1 (n even).
                const int launches = mode == 6 ? n / 2 : n;
                for (int i = 0; mode == 6 && i < launches; ++i) {
                    ks[i] = clCreateKernel(pr, "stream2", &e);
                    const long bA = si == 4 ? layer[(2 * i) % 5] : shapes[si];
                    const long bB = si == 4 ? layer[(2 * i + 1) % 5] : shapes[si];
                    const long offA = ((long)(2 * i) * 50724864 % (big - bA)) / 16, nA = bA / 16;
                    const long offB = ((long)(2 * i + 1) * 50724864 % (big - bB)) / 16, nB = bB / 16;
                    const int at = 2 * i;
                    clSetKernelArg(ks[i], 0, sizeof(cl_mem), &w);
                    clSetKernelArg(ks[i], 1, sizeof(long), &offA);
                    clSetKernelArg(ks[i], 2, sizeof(long), &nA);
                    clSetKernelArg(ks[i], 3, sizeof(long), &offB);
                    clSetKernelArg(ks[i], 4, sizeof(long), &nB);
                    clSetKernelArg(ks[i], 5, sizeof(cl_mem), &buf[i % 2]);
                    clSetKernelArg(ks[i], 6, sizeof(cl_mem), &mid);
                    clSetKernelArg(ks[i], 7, sizeof(cl_mem), &buf[(i + 1) % 2]);
                    clSetKernelArg(ks[i], 8, sizeof(cl_mem), &cnt);
                    clSetKernelArg(ks[i], 9, sizeof(int), &at);
                    clSetKernelArg(ks[i], 10, sizeof(int), &groups);
                }
                for (int i = 0; mode != 6 && i < n; ++i) {
                    ks[i] = clCreateKernel(pr, "stream", &e);
                    const long bytes = si == 4 ? layer[i % 5] : shapes[si];
                    const long off4 = ((long)i * 50724864 % (big - bytes)) / 16;
                    const long n4 = bytes / 16;
                    const int my = i + 1;
                    const int wait = i == 0 || mode == 0 || mode == 3 ? 0 : (mode == 4 ? 2 : 1);  // F: as C
                    clSetKernelArg(ks[i], 0, sizeof(cl_mem), &w);
                    clSetKernelArg(ks[i], 1, sizeof(long), &off4);
                    clSetKernelArg(ks[i], 2, sizeof(long), &n4);
                    clSetKernelArg(ks[i], 3, sizeof(cl_mem), &buf[i % 2]);
                    clSetKernelArg(ks[i], 4, sizeof(cl_mem), &buf[(i + 1) % 2]);
                    clSetKernelArg(ks[i], 5, sizeof(cl_mem), &cnt);
                    clSetKernelArg(ks[i], 6, sizeof(int), &my);
                    clSetKernelArg(ks[i], 7, sizeof(int), &groups);
                    clSetKernelArg(ks[i], 8, sizeof(int), &wait);
                }
                for (int rep = 0; rep < 3; ++rep) {
                    const int zero = 0;
                    float zf[1024] = {0};
                    clEnqueueFillBuffer(q[0], cnt, &zero, 4, 0, sizeof(int) * (n + 2), 0, NULL, NULL);
                    // Both, so a grid of fewer than 64 groups fails the check
                    // instead of reading an earlier mode's values.
                    clEnqueueWriteBuffer(q[0], buf[0], CL_TRUE, 0, 4096, zf, 0, NULL, NULL);
                    clEnqueueWriteBuffer(q[0], buf[1], CL_TRUE, 0, 4096, zf, 0, NULL, NULL);
                    clFinish(q[0]);
                    const double t0 = now_us();
                    const size_t global2 = 2 * global;
                    for (int i = 0; i < launches; ++i) {
                        cl_command_queue qq = mode >= 2 && mode != 6 ? q[i % 2] : q[0];
                        clEnqueueNDRangeKernel(qq, ks[i], 1, NULL, mode == 6 ? &global2 : &global, &local, 0, NULL,
                                               NULL);
                        if (mode >= 2 && mode != 5 && mode != 6) clFlush(qq);
                    }
                    const double th = (now_us() - t0) / n;
                    if (th < host) host = th;
                    clFlush(q[0]);
                    clFlush(q[1]);
                    clFinish(q[0]);
                    clFinish(q[1]);
                    const double t = (now_us() - t0) / n;
                    if (t < best) best = t;
                    float out[64];
                    clEnqueueReadBuffer(q[0], buf[launches % 2], CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
                    for (int j = 0; j < 64; ++j) ok &= out[j] == (float)n;
                }
                for (int i = 0; i < launches; ++i) clReleaseKernel(ks[i]);
                free(ks);
                if (si == 4) best *= 5;
                const long total = si == 4 ? 114360320 : shapes[si];
                // G's host time is a launch's, for two kernels.
                printf("%-18s groups %4d  %c  %7.2f us %s  %6.0f GB/s  host %5.2f us a launch  data %s\n", names[si],
                       groups, "ABCDEFG"[mode], best, si == 4 ? "a layer " : "a kernel", total / best / 1e3,
                       mode == 6 ? host * 2 : host, ok ? "ok" : (mode == 3 ? "(not ordered)" : "WRONG"));
                fflush(stdout);
            }
        }
    }
    return 0;
}
