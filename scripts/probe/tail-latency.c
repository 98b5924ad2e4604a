// Why does a little dependent work cost ~10 us on the H200 (docs/perf.md
// steps 7 and 13: the wide norm kernel, and the last work-group's norm at the
// end of a matvec)? Times, with the GPU's own clocks (%globaltimer ns and
// %clock64 cycles, so also the SM clock while it runs):
//  - a pointer chase by one work-item (volatile loads: not L1) through 16 KB
//    (L2 hits after the first pass) and 256 MB (mostly DRAM): latency per
//    dependent load;
//  - the norm's tail alone: one work-group of 128 loads a 4096-float row
//    (32 floats a work-item), reduces, writes two rows;
//  - the same tail in the last work-group of a kernel whose 512 groups first
//    stream 50 MB (a 7B matvec's bytes), as mul_mv_norm.cl does.
// Build: cc -O2 tail-latency.c -lOpenCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *SRC =
    "#ifdef NV\n"
    "inline ulong gtime(void) { ulong t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n"
    "inline ulong clk(void) { ulong t; asm volatile(\"mov.u64 %0, %%clock64;\" : \"=l\"(t)); return t; }\n"
    "#define FENCE() asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\")\n"
    "#else\n"
    "inline ulong gtime(void) { return 0; }\n"
    "inline ulong clk(void) { return 0; }\n"
    "#define FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)\n"
    "#endif\n"
    "kernel void chase(volatile global const int *next, int steps, global ulong *out) {\n"
    "  int i = 0; const ulong t0 = gtime(), c0 = clk();\n"
    "  for (int s = 0; s < steps; ++s) i = next[i];\n"
    "  out[0] = gtime() - t0; out[1] = clk() - c0; out[2] = i; }\n"
    // The tail: 128 work-items, 32 floats each, sum of squares, scale, two rows out.
    // Variants (build options): LAYOUT 1 = element j*128+l (a warp's accesses
    // contiguous) instead of l*32+j; WFIRST 1 = the weights loaded before any
    // store; FENCE_END 0 no barrier at the end, 1 barrier(global), 2 barrier(local).
    "#ifndef LAYOUT\n#define LAYOUT 0\n#endif\n#ifndef WFIRST\n#define WFIRST 0\n#endif\n"
    "#ifndef FENCE_END\n#define FENCE_END 1\n#endif\n"
    "#if LAYOUT\n#define IX(l, j) ((j) * 128 + (l))\n#else\n#define IX(l, j) ((l) * 32 + (j))\n#endif\n"
    "inline void tail(const global float *x, const global float *w, global float *y, local float *red,\n"
    "                 global ulong *out) {\n"
    "  const int l = get_local_id(0); const ulong t0 = gtime(), c0 = clk();\n"
    "  float v[32]; float acc = 0.0f;\n"
    "  for (int j = 0; j < 32; ++j) { v[j] = x[IX(l, j)]; acc += v[j] * v[j]; }\n"
    "  const ulong t1 = gtime();\n"
    "  red[l] = acc; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  float tot = 0.0f; for (int k = 0; k < 128; ++k) tot += red[k];\n"
    "  const float sc = rsqrt(tot / 4096.0f + 1e-5f); const ulong t2 = gtime();\n"
    "#if WFIRST\n"
    "  float ws[32]; for (int j = 0; j < 32; ++j) ws[j] = w[IX(l, j)];\n"
    "  for (int j = 0; j < 32; ++j) { y[IX(l, j)] = v[j] * sc; y[4096 + IX(l, j)] = v[j] * sc * ws[j]; }\n"
    "#else\n"
    "  for (int j = 0; j < 32; ++j) { y[IX(l, j)] = v[j] * sc; y[4096 + IX(l, j)] = v[j] * sc * w[IX(l, j)]; }\n"
    "#endif\n"
    "  const ulong t3 = gtime();\n"
    "#if FENCE_END == 1\n  barrier(CLK_GLOBAL_MEM_FENCE);\n#elif FENCE_END == 2\n  barrier(CLK_LOCAL_MEM_FENCE);\n#endif\n"
    "  if (l == 0) { out[0] = t1 - t0; out[1] = t2 - t0; out[2] = gtime() - t0; out[3] = clk() - c0;\n"
    "    out[7] = t3 - t0; } }\n"
"kernel void tail_alone(const global float *x, const global float *w, global float *y, global ulong *out) {\n"
    "  local float red[128]; tail(x, w, y, red, out); }\n"
    // 512 groups stream `per` floats each, then count; the last runs the tail.
    "kernel void stream_then_tail(const global float4 *big, int per, global float *x, const global float *w,\n"
    "                             global float *y, volatile global uint *ctr, global ulong *out, long base) {\n"
    "  local float red[128]; local int last; const int l = get_local_id(0), g = get_group_id(0);\n"
    "  if (g == 0 && l == 0) out[6] = gtime();\n"
    "  float4 s = 0.0f; const global float4 *p = big + base + (long)g * per;\n"
    "  for (int i = l; i < per; i += 128) s += p[i];\n"
    "  red[l] = s.x + s.y + s.z + s.w; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (l < 8) x[g * 8 + l] = red[l * 16];\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);\n"
    "  if (l == 0) { FENCE(); last = atomic_inc(ctr) == get_num_groups(0) - 1; if (last) out[4] = gtime(); }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (last) { FENCE(); tail(x, w, y, red, out); if (l == 0) { *ctr = 0; out[5] = gtime(); } } }\n";

static double event_us(cl_event ev) {
    cl_ulong t0, t1;
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, 8, &t0, NULL);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, 8, &t1, NULL);
    return (t1 - t0) / 1e3;
}

static void die(const char *what, cl_int e) {
    printf("%s failed: %d\n", what, e);
    exit(1);
}

int main(void) {
    cl_platform_id p;
    cl_device_id d;
    cl_int e;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    char vendor[256];
    clGetDeviceInfo(d, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
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
    cl_ulong out[8];
    cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof out, NULL, &e);

    // Pointer chases: a random cycle over `bytes`.
    const size_t sizes[] = {16 << 10, 256u << 20};
    for (int s = 0; s < 2; ++s) {
        const size_t n = sizes[s] / 4;
        int *next = malloc(n * 4);
        size_t *perm = malloc(n * sizeof *perm);
        for (size_t i = 0; i < n; ++i) perm[i] = i;
        srand(1);
        for (size_t i = n - 1; i > 0; --i) {
            const size_t j = ((size_t)rand() * RAND_MAX + rand()) % (i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        // One random cycle through every int; volatile loads skip L1, so the
        // small buffer measures L2 hits.
        for (size_t i = 0; i < n; ++i) next[perm[i]] = (int)perm[(i + 1) % n];
        cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * 4, next, &e);
        if (e) die("buffer", e);
        cl_kernel k = clCreateKernel(pr, "chase", &e);
        const int steps = 4000;
        clSetKernelArg(k, 0, sizeof b, &b);
        clSetKernelArg(k, 1, sizeof steps, &steps);
        clSetKernelArg(k, 2, sizeof o, &o);
        const size_t one = 1;
        for (int r = 0; r < 2; ++r) clEnqueueNDRangeKernel(q, k, 1, NULL, &one, &one, 0, NULL, NULL);
        clEnqueueReadBuffer(q, o, CL_TRUE, 0, 3 * 8, out, 0, NULL, NULL);
        printf("chase %9zu bytes: %6.1f ns a dependent load, %6.1f cycles (SM clock %.2f GHz)\n", sizes[s],
               (double)out[0] / steps, (double)out[1] / steps, out[0] ? (double)out[1] / out[0] : 0.0);
        free(next);
        free(perm);
        clReleaseMemObject(b);
    }

    float *row = malloc(8192 * 4);
    for (int i = 0; i < 8192; ++i) row[i] = (float)(i % 17) * 0.25f - 2.0f;
    cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 8192 * 4, row, &e);
    cl_mem w = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 8192 * 4, row, &e);
    cl_mem y = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 8192 * 4, NULL, &e);
    cl_kernel ka = clCreateKernel(pr, "tail_alone", &e);
    clSetKernelArg(ka, 0, sizeof x, &x);
    clSetKernelArg(ka, 1, sizeof w, &w);
    clSetKernelArg(ka, 2, sizeof y, &y);
    clSetKernelArg(ka, 3, sizeof o, &o);
    const size_t wg = 128;
    for (int r = 0; r < 3; ++r) {
        cl_event ev;
        clEnqueueNDRangeKernel(q, ka, 1, NULL, &wg, &wg, 0, NULL, &ev);
        clEnqueueReadBuffer(q, o, CL_TRUE, 0, 4 * 8, out, 0, NULL, NULL);
        printf("tail alone: loads %.2f us, +reduce %.2f us, total %.2f us (%llu cycles); kernel event %.2f us\n",
               out[0] / 1e3, out[1] / 1e3, out[2] / 1e3, (unsigned long long)out[3], event_us(ev));
        clReleaseEvent(ev);
    }

    // The tail's variants, each a program of its own.
    const char *variants[] = {"-DLAYOUT=0 -DWFIRST=0 -DFENCE_END=1", "-DLAYOUT=0 -DWFIRST=0 -DFENCE_END=0",
                              "-DLAYOUT=0 -DWFIRST=0 -DFENCE_END=2", "-DLAYOUT=0 -DWFIRST=1 -DFENCE_END=1",
                              "-DLAYOUT=1 -DWFIRST=0 -DFENCE_END=1", "-DLAYOUT=1 -DWFIRST=1 -DFENCE_END=0"};
    for (size_t vi = 0; vi < sizeof variants / sizeof *variants; ++vi) {
        char opts[256];
        snprintf(opts, sizeof opts, "%s %s", nv ? "-DNV" : "", variants[vi]);
        cl_program pv = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
        if (clBuildProgram(pv, 1, &d, opts, NULL, NULL)) die("variant build", 1);
        if (vi == 0) { // the PTX, to read what the barrier and the stores became
            size_t n = 0;
            clGetProgramInfo(pv, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL);
            unsigned char *bin = malloc(n + 1);
            clGetProgramInfo(pv, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL);
            const char *dir = getenv("OUT");
            char path[512];
            snprintf(path, sizeof path, "%s/tail.ptx", dir ? dir : "/tmp");
            FILE *f = fopen(path, "wb");
            if (f) { fwrite(bin, 1, n, f); fclose(f); }
            free(bin);
        }
        cl_kernel kv = clCreateKernel(pv, "tail_alone", &e);
        clSetKernelArg(kv, 0, sizeof x, &x);
        clSetKernelArg(kv, 1, sizeof w, &w);
        clSetKernelArg(kv, 2, sizeof y, &y);
        clSetKernelArg(kv, 3, sizeof o, &o);
        for (int r = 0; r < 3; ++r) {
            cl_event ev;
            clEnqueueNDRangeKernel(q, kv, 1, NULL, &wg, &wg, 0, NULL, &ev);
            clEnqueueReadBuffer(q, o, CL_TRUE, 0, 8 * 8, out, 0, NULL, NULL);
            if (r == 2)
                printf("tail %-36s loads %.2f, +reduce %.2f, +stores %.2f, +end %.2f us; event %.2f us\n",
                       variants[vi], out[0] / 1e3, out[1] / 1e3, out[7] / 1e3, out[2] / 1e3, event_us(ev));
            clReleaseEvent(ev);
        }
        clReleaseKernel(kv);
        clReleaseProgram(pv);
    }

    // The stream at a 7B matvec's size and at the O projection's (4096 x 4096
    // Q4_0, 9.4 MB); group 0's start stamp against the event says how much of
    // the event is not the kernel running.
    const int groups = 512;
    const size_t stream_bytes[] = {50u << 20, 9u << 20};
    // 1 GiB, each launch reading the next slice, so L2 (50 MB) holds none of it.
    const size_t big_bytes = (size_t)1 << 30;
    cl_mem big = clCreateBuffer(ctx, CL_MEM_READ_ONLY, big_bytes, NULL, &e);
    if (e) die("big buffer", e);
    cl_uint zero = 0;
    cl_mem ctr = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 4, &zero, &e);
    cl_kernel ks = clCreateKernel(pr, "stream_then_tail", &e);
    clSetKernelArg(ks, 0, sizeof big, &big);
    clSetKernelArg(ks, 2, sizeof x, &x);
    clSetKernelArg(ks, 3, sizeof w, &w);
    clSetKernelArg(ks, 4, sizeof y, &y);
    clSetKernelArg(ks, 5, sizeof ctr, &ctr);
    clSetKernelArg(ks, 6, sizeof o, &o);
    const size_t global = (size_t)groups * wg;
    for (int s = 0; s < 2; ++s) {
        const int per = (int)(stream_bytes[s] / 16 / groups);
        clSetKernelArg(ks, 1, sizeof per, &per);
        const int slices = (int)(big_bytes / stream_bytes[s]);
        for (int r = 0; r < 4; ++r) {
            const cl_long base = (cl_long)(r % slices) * (cl_long)(stream_bytes[s] / 16);
            clSetKernelArg(ks, 7, sizeof base, &base);
            cl_event ev;
            clEnqueueNDRangeKernel(q, ks, 1, NULL, &global, &wg, 0, NULL, &ev);
            clEnqueueReadBuffer(q, o, CL_TRUE, 0, 7 * 8, out, 0, NULL, NULL);
            printf("%zu MB stream + last-group tail: event %.2f us, group 0 start to tail end %.2f us, "
                   "stream to ticket %.2f us; tail loads %.2f us, +reduce %.2f us, total %.2f us "
                   "(%llu cycles, %.2f GHz); ticket to tail end %.2f us\n",
                   stream_bytes[s] >> 20, event_us(ev), (double)(out[5] - out[6]) / 1e3,
                   (double)(out[4] - out[6]) / 1e3, out[0] / 1e3, out[1] / 1e3, out[2] / 1e3,
                   (unsigned long long)out[3], out[2] ? (double)out[3] / out[2] : 0.0,
                   (double)(out[5] - out[4]) / 1e3);
            clReleaseEvent(ev);
        }
        // Back to back without events, as a decode step runs them: the wall
        // time a launch in the chain costs.
        struct timespec t0, t1;
        clFinish(q);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int r = 0; r < 200; ++r) {
            const cl_long base = (cl_long)((r + 4) % slices) * (cl_long)(stream_bytes[s] / 16);
            clSetKernelArg(ks, 7, sizeof base, &base);
            clEnqueueNDRangeKernel(q, ks, 1, NULL, &global, &wg, 0, NULL, NULL);
        }
        clFinish(q);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("%zu MB stream + tail, 200 back to back: %.2f us a launch (%.0f GB/s)\n", stream_bytes[s] >> 20,
               ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / 200,
               stream_bytes[s] * 200.0 / ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)));
    }
    return 0;
}
