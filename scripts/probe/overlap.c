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
//      queue's work without one?).
// The wait gives up after 65536 polls (a kernel that ran before its
// predecessor then shows as WRONG data, not as a hang).
// "layer" cycles through the 7B Q4_0 layer's five launches (Q+K+V, attention's
// ~0.5 MB, O, gate + up, down) and prints the time of the five.
// Each kernel reads `in` (the last kernel's `out`) after its wait and writes
// in + 1, so A, B and C must end with every value equal to N.
// Usage: overlap [N] [grid work-groups of 256, 0 = 8 a compute unit]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *src =
    "#define U 8\n"
    "kernel void stream(const global int4 *w, long off4, long n4, const global float *in,\n"
    "                   global float *out, volatile global int *cnt, int my, int prev_groups, int wait) {\n"
    "  const long gsz = get_global_size(0);\n"
    "  long i = off4 + get_global_id(0);\n"
    "  const long end = off4 + n4;\n"
    "  int4 s = 0, v[U];\n"
    "  if (wait == 2) {\n"
    "    if (get_local_id(0) == 0) {\n"
    "      for (int t = 0; t < (1 << 16) && atomic_add(&cnt[my - 1], 0) < prev_groups; ++t) {}\n"
    "    }\n"
    "    barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "  }\n"
    "  for (int u = 0; u < U; ++u) { long j = i + u * gsz; v[u] = j < end ? w[j] : (int4)0; }\n"
    "  if (wait == 1) {\n"
    "    if (get_local_id(0) == 0) {\n"
    "      for (int t = 0; t < (1 << 16) && atomic_add(&cnt[my - 1], 0) < prev_groups; ++t) {}\n"
    "    }\n"
    "    barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "  }\n"
    "  const int g = get_group_id(0);\n"
    "  const float a = g < 64 ? in[g] : 0.0f;\n"
    "  for (int u = 0; u < U; ++u) s ^= v[u];\n"
    "  for (i += U * gsz; i < end; i += U * gsz) {\n"
    "    for (int u = 0; u < U; ++u) { long j = i + u * gsz; v[u] = j < end ? w[j] : (int4)0; }\n"
    "    for (int u = 0; u < U; ++u) s ^= v[u];\n"
    "  }\n"
    "  if ((s.x ^ s.y ^ s.z ^ s.w) == 0x12345678) out[100] = 1.0f;\n"
    "  if (get_local_id(0) == 0 && g < 64) out[g] = a + 1.0f;\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "  if (get_local_id(0) == 0) { mem_fence(CLK_GLOBAL_MEM_FENCE); atomic_inc(&cnt[my]); }\n"
    "}\n";

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 200;
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
    cl_mem cnt = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(int) * (n + 1), NULL, &e);
    // Bytes of one kernel's weights: the 7B Q4_0's gate + up, down, Q + K + V, O.
    const long shapes[] = {50724864, 25362432, 28311552, 9437184, 0};
    const char *names[] = {"gate+up 50.7 MB", "down 25.4 MB", "qkv 28.3 MB", "o 9.4 MB", "layer (5 kernels)"};
    const long layer[] = {28311552, 524288, 9437184, 50724864, 25362432};
    const int grids[] = {groups_arg ? groups_arg : (int)cus * 8, (int)cus * 2, (int)cus};
    for (int si = 0; si < 5; ++si) {
        for (int gi = 0; gi < 3; ++gi) {
            const int groups = grids[gi];
            const size_t local = 256, global = (size_t)groups * local;
            for (int mode = 0; mode < 6; ++mode) {
                double best = 1e30, host = 1e30;
                int ok = 1;
                // Arguments bound before the timed loop, as polycl binds them at
                // plan time: the loop is enqueues (and flushes) only.
                cl_kernel *ks = malloc(sizeof(cl_kernel) * n);
                for (int i = 0; i < n; ++i) {
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
                    clEnqueueFillBuffer(q[0], cnt, &zero, 4, 0, sizeof(int) * (n + 1), 0, NULL, NULL);
                    clEnqueueWriteBuffer(q[0], buf[0], CL_TRUE, 0, 4096, zf, 0, NULL, NULL);
                    clFinish(q[0]);
                    const double t0 = now_us();
                    for (int i = 0; i < n; ++i) {
                        cl_command_queue qq = mode >= 2 ? q[i % 2] : q[0];
                        clEnqueueNDRangeKernel(qq, ks[i], 1, NULL, &global, &local, 0, NULL, NULL);
                        if (mode >= 2 && mode != 5) clFlush(qq);
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
                    clEnqueueReadBuffer(q[0], buf[n % 2], CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
                    for (int j = 0; j < 64; ++j) ok &= out[j] == (float)n;
                }
                for (int i = 0; i < n; ++i) clReleaseKernel(ks[i]);
                free(ks);
                if (si == 4) best *= 5;
                const long total = si == 4 ? 114360320 : shapes[si];
                printf("%-18s groups %4d  %c  %7.2f us %s  %6.0f GB/s  host %5.2f us a launch  data %s\n", names[si],
                       groups, "ABCDEF"[mode], best, si == 4 ? "a layer " : "a kernel", total / best / 1e3, host,
                       ok ? "ok" : (mode == 3 ? "(not ordered)" : "WRONG"));
                fflush(stdout);
            }
        }
    }
    return 0;
}
