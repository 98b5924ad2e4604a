// What does a work-group that waits cost the kernel running beside it?
// docs/perf.md step 63: on the H200 the hand-off's waiting groups slowed the
// 7B's launches far more than the places they hold (256 waiting groups of
// 128 through two launches: +1.9 ms a token), and not by their polls. Here a
// weight-streaming kernel (queue 0) is timed by its event while a second
// kernel (queue 1, enqueued and flushed first) holds N work-groups of 128
// that wait, until a one-item kernel enqueued after the stream on queue 0
// sets their counter:
//   none   no waiter kernel (the stream alone)
//   bar    work-item 0 polls, the rest of its group waits at a barrier
//          (the hand-off's frame)
//   all    every work-item polls
//   sleep  work-item 0 polls with a 1 us nanosleep between polls (NVIDIA)
//   done   the same groups exit at once (the stream beside a launch that is
//          already over: the queue's own cost)
// A wait gives up after 2^20 polls and counts itself (the gave-up column):
// a stream that found no place beside the waiters shows there, not as a hang.
// Usage: waiter-cost [stream groups of 256 a compute unit, default 4]
//                    [stream bytes, default 50 MB] [reps, default 30]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src =
    "kernel void stream(const global int4 *w, long n, global int *out) {\n"
    "  int4 s = 0;\n"
    "  for (long i = get_global_id(0); i < n; i += get_global_size(0)) s ^= w[i];\n"
    "  if (s.x == 12345 && s.y == 678) out[0] = s.z;\n"
    "}\n"
    "kernel void setc(global int *c, int v) { *c = v; }\n"
    "#ifdef cl_nv_pragma_unroll\n"
    "#define PAUSE() asm volatile(\"nanosleep.u32 1000;\")\n"
    "#else\n"
    "#define PAUSE()\n"
    "#endif\n"
    // mode 0: leader polls, others at a barrier; 1: all poll; 2: leader
    // polls with a pause; 3: exit at once.
    "kernel void waiter(volatile global int *c, int mode, global int *gaveup) {\n"
    "  if (mode == 3) return;\n"
    "  if (mode == 1 || get_local_id(0) == 0) {\n"
    "    int t = 0;\n"
    "    while (*c == 0) {\n"
    "      if (++t == (1 << 20)) { atomic_inc(gaveup); break; }\n"
    "      if (mode == 2) PAUSE();\n"
    "    }\n"
    "  }\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "}\n";

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int per_cu = argc > 1 ? atoi(argv[1]) : 4;
    const long bytes = argc > 2 ? atol(argv[2]) : 50L << 20;
    const int reps = argc > 3 ? atoi(argv[3]) : 30;
    cl_platform_id p;
    cl_device_id d;
    cl_int e;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    cl_uint cus;
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    cl_command_queue q[2] = {clCreateCommandQueue(ctx, d, CL_QUEUE_PROFILING_ENABLE, &e),
                             clCreateCommandQueue(ctx, d, 0, &e)};
    cl_program pr = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    if (clBuildProgram(pr, 1, &d, "", NULL, NULL) != CL_SUCCESS) {
        char log[8192];
        clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        fprintf(stderr, "build failed:\n%s\n", log);
        return 1;
    }
    cl_mem w = clCreateBuffer(ctx, CL_MEM_READ_ONLY, bytes, NULL, &e);
    {
        char *ones = calloc(1, bytes);
        clEnqueueWriteBuffer(q[0], w, CL_TRUE, 0, bytes, ones, 0, NULL, NULL);
        free(ones);
    }
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &e);
    cl_mem cnt = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &e);
    cl_mem gaveup = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &e);
    cl_kernel ks = clCreateKernel(pr, "stream", &e), kc = clCreateKernel(pr, "setc", &e),
              kw = clCreateKernel(pr, "waiter", &e);
    const long n = bytes / 16;
    clSetKernelArg(ks, 0, sizeof w, &w);
    clSetKernelArg(ks, 1, sizeof n, &n);
    clSetKernelArg(ks, 2, sizeof out, &out);
    clSetKernelArg(kc, 0, sizeof cnt, &cnt);
    clSetKernelArg(kw, 0, sizeof cnt, &cnt);
    clSetKernelArg(kw, 2, sizeof gaveup, &gaveup);
    const size_t sg = (size_t)per_cu * cus * 256, sl = 256, wl = 128, one = 1;
    printf("stream %.1f MB, %d groups of 256 (%d a CU), waiters of 128, median of %d (us)\n",
           bytes / 1048576.0, per_cu * (int)cus, per_cu, reps);
    printf("%-6s %8s %10s %8s %8s\n", "mode", "waiters", "stream us", "GB/s", "gave up");
    const char *names[] = {"bar", "all", "sleep", "done"};
    const int counts[] = {0, 132, 264, 528, 1056};
    for (int mi = -1; mi < 4; ++mi) {
        for (int ci = 0; ci < 5; ++ci) {
            if ((mi < 0) != (ci == 0)) continue;
            const int nw = counts[ci];
            const int mode = mi < 0 ? 3 : mi;
            clSetKernelArg(kw, 1, sizeof mode, &mode);
            double *t = calloc(reps, sizeof *t);
            int zero = 0, gave = 0;
            clEnqueueWriteBuffer(q[0], gaveup, CL_TRUE, 0, 4, &zero, 0, NULL, NULL);
            for (int r = 0; r < reps + 2; ++r) {
                clEnqueueWriteBuffer(q[0], cnt, CL_TRUE, 0, 4, &zero, 0, NULL, NULL);
                if (nw > 0) {
                    const size_t wg = (size_t)nw * wl;
                    clEnqueueNDRangeKernel(q[1], kw, 1, NULL, &wg, &wl, 0, NULL, NULL);
                    clFlush(q[1]);
                }
                cl_event ev;
                clEnqueueNDRangeKernel(q[0], ks, 1, NULL, &sg, &sl, 0, NULL, &ev);
                int v = 1;
                clSetKernelArg(kc, 1, sizeof v, &v);
                clEnqueueNDRangeKernel(q[0], kc, 1, NULL, &one, &one, 0, NULL, NULL);
                clFlush(q[0]);
                clFinish(q[0]);
                clFinish(q[1]);
                cl_ulong a, b;
                clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
                clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
                clReleaseEvent(ev);
                if (r >= 2) t[r - 2] = (b - a) / 1e3;
            }
            clEnqueueReadBuffer(q[0], gaveup, CL_TRUE, 0, 4, &gave, 0, NULL, NULL);
            qsort(t, reps, sizeof *t, cmp);
            const double med = t[reps / 2];
            printf("%-6s %8d %10.2f %8.0f %8d\n", mi < 0 ? "none" : names[mi], nw, med,
                   bytes / med / 1e3, gave);
            free(t);
        }
    }
    return 0;
}
