// Host cost of a decode step's launches by the number of buffer arguments a
// kernel takes, in the regime of a step (113 launches a "token", then
// clFinish), the cases interleaved token by token so that a change of the
// host's state (docs/perf.md step 38) lands on every case alike. Step 45's
// enqueue-cost.c saw ~0.5 us a buffer argument with an idle GPU and no
// finish; step 38's enqueue-mix.c saw none in this regime, in another
// session. Also checks that a buffer's device address, read once by a kernel
// and passed as an integer in a packed slot, reaches the buffer (the way a
// kernel could take one buffer argument, whatever it reads).
// Also: the same pointers as ulong scalar arguments (s<n>), the way a
// kernel could take its addresses without the driver handling buffers.
// Build: cc -O2 enqueue-args.c -lOpenCL   Run: ./a.out [tokens] [spin]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LAUNCHES 113
#define MAXB 16

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static const char *SRC =
    "#define SPIN float x = get_global_id(0); for (ulong i = 0; i < p[0]; ++i) x = x * 0.999f + 0.5f;\n"
    "kernel void b1(global const ulong *p) { SPIN if (x == 12345.0f) ((global float *)p[1])[0] = x; }\n"
    "kernel void b2(global float *a0, global const ulong *p) { SPIN if (x == 12345.0f) a0[0] = x; }\n"
    "kernel void b4(global float *a0, global float *a1, global float *a2, global const ulong *p)"
    " { SPIN if (x == 12345.0f) a0[0] = a1[0] + a2[0]; }\n"
    "kernel void b8(global float *a0, global float *a1, global float *a2, global float *a3,"
    " global float *a4, global float *a5, global float *a6, global const ulong *p)"
    " { SPIN if (x == 12345.0f) a0[0] = a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0]; }\n"
    "kernel void b12(global float *a0, global float *a1, global float *a2, global float *a3,"
    " global float *a4, global float *a5, global float *a6, global float *a7, global float *a8,"
    " global float *a9, global float *a10, global const ulong *p)"
    " { SPIN if (x == 12345.0f) a0[0] = a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0]"
    " + a8[0] + a9[0] + a10[0]; }\n"
    "kernel void b16(global float *a0, global float *a1, global float *a2, global float *a3,"
    " global float *a4, global float *a5, global float *a6, global float *a7, global float *a8,"
    " global float *a9, global float *a10, global float *a11, global float *a12, global float *a13,"
    " global float *a14, global const ulong *p)"
    " { SPIN if (x == 12345.0f) a0[0] = a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0]"
    " + a8[0] + a9[0] + a10[0] + a11[0] + a12[0] + a13[0] + a14[0]; }\n"
    // Addresses as scalar arguments: a kernel's pointers without the
    // driver's handling of a buffer argument.
    "kernel void s4(ulong a0, ulong a1, ulong a2, ulong a3, global const ulong *p)"
    " { SPIN if (x == 12345.0f) ((global float *)a0)[0] = x + (float)(a1 + a2 + a3); }\n"
    "kernel void s8(ulong a0, ulong a1, ulong a2, ulong a3, ulong a4, ulong a5, ulong a6,"
    " ulong a7, global const ulong *p)"
    " { SPIN if (x == 12345.0f) ((global float *)a0)[0] = x + (float)(a1 + a2 + a3 + a4 + a5 + a6 + a7); }\n"
    "kernel void s16(ulong a0, ulong a1, ulong a2, ulong a3, ulong a4, ulong a5, ulong a6,"
    " ulong a7, ulong a8, ulong a9, ulong a10, ulong a11, ulong a12, ulong a13, ulong a14,"
    " ulong a15, global const ulong *p)"
    " { SPIN if (x == 12345.0f) ((global float *)a0)[0] = x + (float)(a1 + a2 + a3 + a4 + a5 + a6 + a7"
    " + a8 + a9 + a10 + a11 + a12 + a13 + a14 + a15); }\n"
    // The address check: one kernel reads each buffer's address, another
    // copies through the addresses alone.
    "kernel void addr(global float *a, global float *b, global ulong *out)"
    " { out[0] = (ulong)a; out[1] = (ulong)b; }\n"
    "kernel void through(global const ulong *p) { const size_t i = get_global_id(0);"
    " ((global float *)p[1])[i] = 2.0f * ((global const float *)p[0])[i] + 1.0f; }\n";

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int tokens = argc > 1 ? atoi(argv[1]) : 300;
    const cl_ulong spin = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    cl_platform_id plat;
    cl_device_id dev;
    cl_int e;
    clGetPlatformIDs(1, &plat, NULL);
    clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &e);
    cl_program pr = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
    if (clBuildProgram(pr, 1, &dev, "", NULL, NULL)) {
        static char log[1 << 16];
        clGetProgramBuildInfo(pr, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        printf("build failed:\n%s\n", log);
        return 1;
    }
    cl_mem bufs[MAXB];
    for (int i = 0; i < MAXB; ++i) bufs[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &e);

    // Address check.
    {
        const int n = 1 << 16;
        float *h = malloc(sizeof(float) * n);
        for (int i = 0; i < n; ++i) h[i] = (float)i;
        cl_mem src = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(float) * n, h, &e);
        cl_mem dst = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * n, NULL, &e);
        cl_mem slots = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 16, NULL, &e);
        cl_kernel ka = clCreateKernel(pr, "addr", &e), kt = clCreateKernel(pr, "through", &e);
        clSetKernelArg(ka, 0, sizeof(cl_mem), &src);
        clSetKernelArg(ka, 1, sizeof(cl_mem), &dst);
        clSetKernelArg(ka, 2, sizeof(cl_mem), &slots);
        clSetKernelArg(kt, 0, sizeof(cl_mem), &slots);
        size_t one = 1, g = n, l = 128;
        clEnqueueNDRangeKernel(q, ka, 1, NULL, &one, &one, 0, NULL, NULL);
        e = clEnqueueNDRangeKernel(q, kt, 1, NULL, &g, &l, 0, NULL, NULL);
        cl_ulong a[2];
        clEnqueueReadBuffer(q, slots, CL_TRUE, 0, 16, a, 0, NULL, NULL);
        clEnqueueReadBuffer(q, dst, CL_TRUE, 0, sizeof(float) * n, h, 0, NULL, NULL);
        int bad = 0;
        for (int i = 0; i < n; ++i) bad += h[i] != 2.0f * i + 1.0f;
        printf("address check: src 0x%llx dst 0x%llx, enqueue %d, %d of %d wrong\n",
               (unsigned long long)a[0], (unsigned long long)a[1], e, bad, n);
        free(h);
    }

    cl_ulong slot[2] = {spin, 0};
    {
        // slot[1]: bufs[0]'s address, for b1's (never taken) store.
        cl_mem tmp = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 16, NULL, &e);
        cl_kernel ka = clCreateKernel(pr, "addr", &e);
        clSetKernelArg(ka, 0, sizeof(cl_mem), &bufs[0]);
        clSetKernelArg(ka, 1, sizeof(cl_mem), &bufs[0]);
        clSetKernelArg(ka, 2, sizeof(cl_mem), &tmp);
        size_t one = 1;
        clEnqueueNDRangeKernel(q, ka, 1, NULL, &one, &one, 0, NULL, NULL);
        clEnqueueReadBuffer(q, tmp, CL_TRUE, 0, 8, &slot[1], 0, NULL, NULL);
    }
    cl_mem pk = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 16, slot, &e);

    // b<n>: n buffer arguments; s<n>: n addresses as ulong scalars and one
    // buffer.
    const int counts[] = {1, 2, 4, 8, 12, 16, 4, 8, 16};
    const char *names[] = {"b1", "b2", "b4", "b8", "b12", "b16", "s4", "s8", "s16"};
    enum { NC = 9, NB = 6 };
    // Per case, LAUNCHES kernel objects (a plan's one object a launch).
    cl_kernel ks[NC][LAUNCHES];
    for (int c = 0; c < NC; ++c)
        for (int i = 0; i < LAUNCHES; ++i) {
            ks[c][i] = clCreateKernel(pr, names[c], &e);
            if (c < NB) {
                for (int a = 0; a < counts[c] - 1; ++a)
                    clSetKernelArg(ks[c][i], a, sizeof(cl_mem), &bufs[(a + i) % MAXB]);
                clSetKernelArg(ks[c][i], counts[c] - 1, sizeof(cl_mem), &pk);
            } else {
                for (int a = 0; a < counts[c]; ++a) clSetKernelArg(ks[c][i], a, sizeof(cl_ulong), &slot[1]);
                clSetKernelArg(ks[c][i], counts[c], sizeof(cl_mem), &pk);
            }
        }
    double *enq[NC], *tok[NC];
    for (int c = 0; c < NC; ++c) {
        enq[c] = malloc(sizeof(double) * tokens);
        tok[c] = malloc(sizeof(double) * tokens);
    }
    size_t g = 128 * 264, l = 128;
    for (int t = -20; t < tokens; ++t)
        for (int c = 0; c < NC; ++c) {
            const double t0 = now();
            for (int i = 0; i < LAUNCHES; ++i) {
                if (clEnqueueNDRangeKernel(q, ks[c][i], 1, NULL, &g, &l, 0, NULL, NULL)) {
                    puts("enqueue failed");
                    return 1;
                }
                if (i % 16 == 15) clFlush(q);
            }
            const double t1 = now();
            clFinish(q);
            const double t2 = now();
            if (t >= 0) {
                enq[c][t] = (t1 - t0) / LAUNCHES;
                tok[c][t] = t2 - t0;
            }
        }
    printf("spin %llu, %d tokens of %d launches, cases interleaved token by token\n",
           (unsigned long long)spin, tokens, LAUNCHES);
    for (int c = 0; c < NC; ++c) {
        qsort(enq[c], tokens, sizeof(double), cmp);
        qsort(tok[c], tokens, sizeof(double), cmp);
        printf("%2d %s: enqueue us/launch p10 %.2f p50 %.2f p90 %.2f   token us p50 %.0f\n",
               counts[c], c < NB ? "buffer arguments" : "ulong addresses + 1 buffer",
               enq[c][tokens / 10], enq[c][tokens / 2], enq[c][9 * tokens / 10], tok[c][tokens / 2]);
    }
    return 0;
}
