// Host cost of clEnqueueNDRangeKernel on one device, by kernel argument
// shape: how many buffer arguments, how many bytes of scalar arguments, and
// whether the buffers are distinct. Build: cc -O2 enqueue-cost.c -lOpenCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *SRC =
    "kernel void k1(global float *a) { if (get_global_id(0) == 100000) a[0] = 1; }\n"
    "kernel void k8(global float *a, global float *b, global float *c, global float *d,"
    " global float *e, global float *f, global float *g, global float *h)"
    " { if (get_global_id(0) == 100000) a[0] = b[0]+c[0]+d[0]+e[0]+f[0]+g[0]+h[0]; }\n"
    "kernel void ks(global float *a, long4 x0, long4 x1, long4 x2, long4 x3, long4 x4, long4 x5,"
    " long4 x6, long4 x7, long4 x8, long4 x9, long4 x10, long4 x11, long4 x12, long4 x13, long4 x14, long4 x15)"
    " { if (get_global_id(0) == 100000) a[0] = x0.x + x15.w; }\n"
    "kernel void k8x(global float *a, global float *b, global float *c, global float *d,"
    " global float *e, global float *f, global float *g, global float *h, long4 x0, long4 x1,"
    " long4 x2, long4 x3, long4 x4, long4 x5, long4 x6, long4 x7, long4 x8, long4 x9, long4 x10,"
    " long4 x11, long4 x12, long4 x13, long4 x14, long4 x15)"
    " { if (get_global_id(0) == 100000) a[0] = b[0]+c[0]+d[0]+e[0]+f[0]+g[0]+h[0]+x0.x+x15.w; }\n"
    // The attention + O pair's shape (attn_o.cl): 19 buffers and 3 ints.
    "kernel void k19(global float *a, global float *b, global float *c, global float *d,"
    " global float *e, global float *f, global float *g, global float *h, global float *i,"
    " global float *j, global float *k, global float *l, global float *m, global float *n,"
    " global float *o, global float *p, global float *q, global float *r, global float *s,"
    " int x, int y, int z) { if (get_global_id(0) == 100000) a[0] = b[0]+c[0]+d[0]+e[0]+f[0]"
    "+g[0]+h[0]+i[0]+j[0]+k[0]+l[0]+m[0]+n[0]+o[0]+p[0]+q[0]+r[0]+s[0]+x+y+z; }\n"
    "kernel void kbusy(global float *a, int n) { float x = get_global_id(0);"
    " for (int i = 0; i < n; ++i) x = x * 0.999f + 0.5f; if (x == 12345.0f) a[0] = x; }\n";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    cl_platform_id p;
    cl_device_id d;
    cl_int e;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    cl_command_queue q = clCreateCommandQueue(ctx, d, 0, &e);
    cl_program pr = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
    if (clBuildProgram(pr, 1, &d, "", NULL, NULL)) { puts("build failed"); return 1; }
    cl_mem bufs[19];
    for (int i = 0; i < 19; ++i) bufs[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &e);
    cl_kernel k1 = clCreateKernel(pr, "k1", &e), k8d = clCreateKernel(pr, "k8", &e),
              k8s = clCreateKernel(pr, "k8", &e), ks = clCreateKernel(pr, "ks", &e);
    clSetKernelArg(k1, 0, sizeof(cl_mem), &bufs[0]);
    for (int i = 0; i < 8; ++i) {
        clSetKernelArg(k8d, i, sizeof(cl_mem), &bufs[i]);
        clSetKernelArg(k8s, i, sizeof(cl_mem), &bufs[0]);
    }
    clSetKernelArg(ks, 0, sizeof(cl_mem), &bufs[0]);
    cl_long4 v = {{1, 2, 3, 4}};
    for (int i = 1; i <= 16; ++i) clSetKernelArg(ks, i, sizeof(v), &v);
    cl_kernel k8x = clCreateKernel(pr, "k8x", &e), kb = clCreateKernel(pr, "kbusy", &e);
    for (int i = 0; i < 8; ++i) clSetKernelArg(k8x, i, sizeof(cl_mem), &bufs[i]);
    for (int i = 8; i < 24; ++i) clSetKernelArg(k8x, i, sizeof(v), &v);
    clSetKernelArg(kb, 0, sizeof(cl_mem), &bufs[0]);
    cl_kernel k19 = clCreateKernel(pr, "k19", &e);
    for (int i = 0; i < 19; ++i) clSetKernelArg(k19, i, sizeof(cl_mem), &bufs[i]);
    for (int i = 19; i < 22; ++i) clSetKernelArg(k19, i, sizeof(int), &i);
    int spin = argc > 1 ? atoi(argv[1]) : 20000;
    clSetKernelArg(kb, 1, sizeof(int), &spin);
    struct { const char *name; cl_kernel k; } cases[] = {
        {"1 buffer", k1}, {"8 distinct buffers", k8d}, {"8x the same buffer", k8s},
        {"1 buffer + 512 B scalars", ks}, {"8 buffers + 512 B scalars", k8x},
        {"19 buffers + 3 ints", k19}, {"busy kernel (spin)", kb}};
    size_t g = 128, l = 128;
    for (int rep = 0; rep < 2; ++rep)
        for (int c = 0; c < 7; ++c) {
            const int n = 4000;
            clFinish(q);
            double t0 = now();
            for (int i = 0; i < n; ++i) {
                clEnqueueNDRangeKernel(q, cases[c].k, 1, NULL, &g, &l, 0, NULL, NULL);
                if (i % 16 == 15) clFlush(q);
            }
            double t1 = now();
            clFinish(q);
            double t2 = now();
            if (rep) printf("%-26s enqueue %.2f us/launch, all done %.2f us/launch\n", cases[c].name,
                            (t1 - t0) / n, (t2 - t0) / n);
        }
    // The regime of a decode step: the GPU is busy, so the queue is deep
    // while the host enqueues. Alternate a busy kernel with a light one.
    for (int c = 0; c < 6; ++c) {
        const int n = 2000;
        clFinish(q);
        double t0 = now();
        for (int i = 0; i < n; ++i) {
            clEnqueueNDRangeKernel(q, (i & 1) ? cases[c].k : kb, 1, NULL, &g, &l, 0, NULL, NULL);
            if (i % 16 == 15) clFlush(q);
        }
        double t1 = now();
        clFinish(q);
        double t2 = now();
        printf("busy GPU, alternating with %-26s enqueue %.2f us/launch, all done %.2f us/launch\n",
               cases[c].name, (t1 - t0) / n, (t2 - t0) / n);
    }
    return 0;
}
