// Whether a kernel can write pinned host memory (a mapped CL_MEM_ALLOC_HOST_PTR
// buffer) directly, and what a decode step's logits read costs each way: after a
// ~100 us kernel, (a) nothing, (b) clEnqueueReadBuffer of 128 KiB into the pinned
// buffer (polycl's readback.rs today), (c) a copy kernel that writes the pinned
// buffer, (d) as (c) with the host spinning on the last word instead of clFinish.
// Host time from the first enqueue to the wait's return, medians of 200, us.
// Build: cc -O2 zero-copy.c -lOpenCL
#include "gpu-frame.h"

#define N (32768) /* floats: 128 KiB */
static const char *SRC =
    "kernel void spin(global int *a, ulong ns) {\n"
    "  ulong t0, t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "  do { asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); } while (t - t0 < ns);\n"
    "  if (get_global_id(0) == 0) a[0] = (int)(t - t0); }\n"
    "kernel void copy(const global float4 *s, global float4 *d, int tag) {\n"
    "  const int i = get_global_id(0); float4 v = s[i]; v.x += tag; d[i] = v; }\n";

int main(void) {
    gpu_frame f;
    cl_int e;
    if (gpu_frame_open(&f, SRC)) return 1;
    cl_kernel spin = clCreateKernel(f.prog, "spin", &e); CK(e);
    cl_kernel copy = clCreateKernel(f.prog, "copy", &e); CK(e);
    cl_mem junk = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, 64, NULL, &e); CK(e);
    cl_mem src = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE, N * 4, NULL, &e); CK(e);
    cl_mem pin = clCreateBuffer(f.ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, N * 4, NULL, &e); CK(e);
    float *h = clEnqueueMapBuffer(f.q, pin, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, N * 4, 0, NULL, NULL, &e); CK(e);
    float *init = malloc(N * 4);
    for (int i = 0; i < N; ++i) init[i] = (float)i;
    CK(clEnqueueWriteBuffer(f.q, src, CL_TRUE, 0, N * 4, init, 0, NULL, NULL));
    cl_ulong ns = 100000;
    CK(clSetKernelArg(spin, 0, sizeof junk, &junk));
    CK(clSetKernelArg(spin, 1, 8, &ns));
    CK(clSetKernelArg(copy, 0, sizeof src, &src));
    CK(clSetKernelArg(copy, 1, sizeof pin, &pin));
    size_t g1 = 128, l1 = 128, gc = N / 4, lc = 256;
    const char *names[] = {"spin only", "spin + read into pinned", "spin + copy kernel to pinned",
                           "spin + copy kernel, host spins on last word"};
    for (int c = 0; c < 4; ++c) {
        double t[200]; int bad = 0;
        for (int it = 0; it < 200; ++it) {
            int tag = 1000 + it;
            h[N - 4] = -1.0f;
            CK(clSetKernelArg(copy, 2, 4, &tag));
            double t0 = now();
            CK(clEnqueueNDRangeKernel(f.q, spin, 1, NULL, &g1, &l1, 0, NULL, NULL));
            if (c == 1) CK(clEnqueueReadBuffer(f.q, src, CL_FALSE, 0, N * 4, h, 0, NULL, NULL));
            if (c >= 2) CK(clEnqueueNDRangeKernel(f.q, copy, 1, NULL, &gc, &lc, 0, NULL, NULL));
            if (c == 3) {
                clFlush(f.q);
                volatile float *w = &h[N - 4];
                while (*w != (float)(N - 4 + tag) && now() - t0 < 5000.0) {}
                t[it] = now() - t0;
                clFinish(f.q);
            } else {
                clFinish(f.q);
                t[it] = now() - t0;
            }
            if (c >= 2) {
                for (int i = 0; i < N; i += 4) if (h[i] != (float)(i + tag)) { ++bad; break; }
            } else if (c == 1) {
                for (int i = 0; i < N; ++i) if (h[i] != (float)i) { ++bad; break; }
            }
        }
        const double p50 = median(t, 200);
        printf("%-45s p50 %8.1f  p10 %8.1f  p90 %8.1f us   bad %d of 200\n", names[c], p50, t[20], t[180], bad);
    }
    // What the host's copy out of the pinned buffer costs (readback.rs copies
    // each staged read on to the caller's memory).
    {
        float *out = malloc(N * 4);
        double t[200];
        for (int it = 0; it < 200; ++it) {
            CK(clEnqueueReadBuffer(f.q, src, CL_TRUE, 0, N * 4, h, 0, NULL, NULL));
            double t0 = now();
            memcpy(out, h, N * 4);
            t[it] = now() - t0;
        }
        const double p50 = median(t, 200);
        printf("memcpy of 128 KiB out of the pinned buffer: p50 %.1f us, p90 %.1f (%g)\n", p50, t[180], out[N - 1]);
    }
    // Does the host see the kernel's writes before the kernel ends? (zero-copy, not a copy at the end)
    {
        cl_ulong long_ns = 2000000; // 2 ms spin after the copy
        CK(clSetKernelArg(spin, 1, 8, &long_ns));
        int tag = 7;
        CK(clSetKernelArg(copy, 2, 4, &tag));
        h[N - 4] = -1.0f;
        double t0 = now();
        CK(clEnqueueNDRangeKernel(f.q, copy, 1, NULL, &gc, &lc, 0, NULL, NULL));
        CK(clEnqueueNDRangeKernel(f.q, spin, 1, NULL, &g1, &l1, 0, NULL, NULL));
        clFlush(f.q);
        volatile float *w = &h[N - 4];
        while (*w != (float)(N - 4 + tag) && now() - t0 < 5000.0) {}
        double seen = now() - t0;
        clFinish(f.q);
        double done = now() - t0;
        printf("copy then a 2 ms kernel: host saw the copy at %.1f us, finish at %.1f us (%s)\n", seen, done,
               seen < done - 1000 ? "zero-copy: written through while the queue ran" : "not before the queue ended");
    }
    return 0;
}
