// What one kernel costs the GPU beyond its work, and what a grid-wide barrier
// inside one persistent kernel costs instead: chains of small kernels (wall
// time per kernel once the GPU is the bottleneck, and profiled duration), and
// a kernel whose work-groups meet at a global-atomic barrier many times, with
// a check that plain loads after the barrier see the other groups' writes.
// Build: cc -O2 kernel-floor.c -lOpenCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *SRC =
    "kernel void empty(global int *a) { if (get_global_id(0) == 1 << 30) a[0] = 1; }\n"
    "kernel void cparam(global int *a, constant int *p) { if (get_global_id(0) == p[0]) a[0] = p[1]; }\n"
    // The norm's shape: each group reads one 4096-float row, sums squares, writes 256.
    "kernel void normlike(const global float *x, global float *y) {\n"
    "  local float s[256]; const int l = get_local_id(0); float t = 0.0f;\n"
    "  for (int i = l; i < 4096; i += 256) t += x[i] * x[i];\n"
    "  s[l] = t; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (int k = 128; k > 0; k >>= 1) { if (l < k) s[l] += s[l + k]; barrier(CLK_LOCAL_MEM_FENCE); }\n"
    "  const int i = get_group_id(0) * 256 + l; y[i] = x[i] * rsqrt(s[0] / 4096.0f + 1e-5f); }\n"
    "#ifdef NV\n"
    "#define FENCE() asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\")\n"
    "#else\n"
    "#define FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)\n"
    "#endif\n"
    // Sense-reversing barrier over all groups (all must be resident).
    "inline void grid_sync(volatile global int *bar, int nwg, int *gen) {\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);\n"
    "  if (get_local_id(0) == 0) { FENCE(); const int g = *gen;\n"
    "    if (atomic_inc(&bar[0]) == nwg - 1) { bar[0] = 0; FENCE(); atomic_xchg(&bar[1], g + 1); }\n"
    "    else { while (atomic_add(&bar[1], 0) == g) {} }\n"
    "    FENCE(); }\n"
    "  *gen += 1; barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE); }\n"
    "kernel void gridbar(volatile global int *bar, global int *data, global int *bad, int iters) {\n"
    "  const int nwg = get_num_groups(0), wg = get_group_id(0); int gen = 0; int errs = 0;\n"
    "  for (int it = 0; it < iters; ++it) {\n"
    "    if (get_local_id(0) == 0) data[wg] = it * 7 + wg;\n"
    "    grid_sync(bar, nwg, &gen);\n"
    "    const int o = (wg + 1 + it) % nwg; if (get_local_id(0) == 0 && ((const global int *)data)[o] != it * 7 + o) ++errs;\n"
    "    grid_sync(bar, nwg, &gen); }\n"
    "  if (get_local_id(0) == 0 && errs) atomic_add(bad, errs); }\n";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static double event_us(cl_event ev) {
    cl_ulong t0, t1;
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, 8, &t0, NULL);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, 8, &t1, NULL);
    return (t1 - t0) / 1e3;
}

int main(void) {
    cl_platform_id p;
    cl_device_id d;
    cl_int e;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    char vendor[256];
    cl_uint cus;
    clGetDeviceInfo(d, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    const int nv = strstr(vendor, "NVIDIA") != NULL;
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    cl_command_queue q = clCreateCommandQueue(ctx, d, CL_QUEUE_PROFILING_ENABLE, &e);
    cl_program pr = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
    if (clBuildProgram(pr, 1, &d, nv ? "-DNV" : "", NULL, NULL)) {
        char log[8192];
        clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        printf("build failed: %s\n", log);
        return 1;
    }
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 24, NULL, &e);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 24, NULL, &e);
    int params[2] = {1 << 30, 3};
    cl_mem cp = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 8, params, &e);
    cl_kernel ke = clCreateKernel(pr, "empty", &e), kc = clCreateKernel(pr, "cparam", &e),
              kn = clCreateKernel(pr, "normlike", &e);
    clSetKernelArg(ke, 0, sizeof(cl_mem), &out);
    clSetKernelArg(kc, 0, sizeof(cl_mem), &out);
    clSetKernelArg(kc, 1, sizeof(cl_mem), &cp);
    clSetKernelArg(kn, 0, sizeof(cl_mem), &buf);
    clSetKernelArg(kn, 1, sizeof(cl_mem), &out);
    struct { const char *name; cl_kernel k; size_t groups, local; } cases[] = {
        {"empty, 1 group of 32", ke, 1, 32},
        {"empty, 512 groups of 128", ke, 512, 128},
        {"empty, 4096 groups of 256", ke, 4096, 256},
        {"constant params, 512 x 128", kc, 512, 128},
        {"norm shape, 16 groups of 256", kn, 16, 256},
    };
    const int n = 2000;
    cl_event *ev = malloc(sizeof(cl_event) * n);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const size_t global = cases[c].groups * cases[c].local;
        for (int w = 0; w < 50; ++w) clEnqueueNDRangeKernel(q, cases[c].k, 1, NULL, &global, &cases[c].local, 0, NULL, NULL);
        clFinish(q);
        double t0 = now();
        for (int i = 0; i < n; ++i) clEnqueueNDRangeKernel(q, cases[c].k, 1, NULL, &global, &cases[c].local, 0, NULL, NULL);
        double t1 = now();
        clFinish(q);
        double t2 = now();
        for (int i = 0; i < n; ++i) clEnqueueNDRangeKernel(q, cases[c].k, 1, NULL, &global, &cases[c].local, 0, NULL, &ev[i]);
        clFinish(q);
        double dur = 0, gap = 0;
        cl_ulong prev_end = 0;
        for (int i = 0; i < n; ++i) {
            cl_ulong s, en;
            clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_START, 8, &s, NULL);
            clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_END, 8, &en, NULL);
            dur += (en - s) / 1e3;
            if (i) gap += ((double)s - (double)prev_end) / 1e3;
            prev_end = en;
            clReleaseEvent(ev[i]);
        }
        printf("%-32s enqueue %5.2f us  chain wall %5.2f us/kernel  profiled %5.2f us, start-to-prev-end %5.2f us\n",
               cases[c].name, (t1 - t0) / n, (t2 - t0) / n, dur / n, gap / (n - 1));
    }
    cl_kernel kg = clCreateKernel(pr, "gridbar", &e);
    for (int per = 1; per <= 4; per *= 2) {
        for (int local = 128; local <= 512; local *= 4) {
            int zero[2] = {0, 0};
            cl_mem bar = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 8, zero, &e);
            cl_mem bad = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 4, zero, &e);
            const int iters = 1000;
            clSetKernelArg(kg, 0, sizeof(cl_mem), &bar);
            clSetKernelArg(kg, 1, sizeof(cl_mem), &out);
            clSetKernelArg(kg, 2, sizeof(cl_mem), &bad);
            clSetKernelArg(kg, 3, sizeof(int), &iters);
            const size_t l = local, global = (size_t)cus * per * l;
            cl_event g;
            double t0 = now();
            e = clEnqueueNDRangeKernel(q, kg, 1, NULL, &global, &l, 0, NULL, &g);
            clFinish(q);
            double t1 = now();
            int nbad = -1;
            clEnqueueReadBuffer(q, bad, CL_TRUE, 0, 4, &nbad, 0, NULL, NULL);
            printf("grid barrier, %u x %d groups of %zu: %6.3f us/barrier (profiled %.0f us, wall %.0f us for %d), stale reads %d, err %d\n",
                   cus, per, l, event_us(g) / (2 * iters), event_us(g), t1 - t0, 2 * iters, nbad, e);
            clReleaseEvent(g);
            clReleaseMemObject(bar);
            clReleaseMemObject(bad);
        }
    }
    return 0;
}
