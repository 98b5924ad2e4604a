// Host cost of clEnqueueNDRangeKernel in the shape of a decode step: 113
// launches a "token" (the 1B's 22 layers x 5 + 3), then clFinish, as llama
// does when it reads the logits. Cases add one difference at a time to a
// tight loop of one kernel object, to find what makes polycl's launches cost
// ~6-9 us of host time each (docs/perf.md step 38) where enqueue-cost.c saw
// ~2-3: many kernel objects, many programs, large buffers, a busy GPU, a
// host that touches other memory between tokens.
// Build: cc -O2 enqueue-mix.c -lOpenCL   Run: ./a.out [tokens]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LAUNCHES 113
#define NARGS 12

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// Twelve buffer arguments like the fused decode kernels; p[0] spins the
// work-item for a few microseconds of GPU time when nonzero.
static const char *SRC =
    "kernel void k(global float *a0, global float *a1, global float *a2, global float *a3,"
    " global float *a4, global float *a5, global float *a6, global float *a7, global float *a8,"
    " global float *a9, global float *a10, global const ulong *p) {"
    " float x = get_global_id(0); for (ulong i = 0; i < p[0]; ++i) x = x * 0.999f + 0.5f;"
    " if (x == 12345.0f) a0[ID] = a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0] + a8[0]"
    " + a9[0] + a10[0]; }\n"
    "kernel void k1(global float *a0) { if (get_global_id(0) == 1u << 30) a0[ID] = 1; }\n";

static cl_context ctx;
static cl_device_id dev;

// The same source under a different -DID makes a program of its own.
static cl_program build(int id) {
    char opt[64];
    snprintf(opt, sizeof opt, "-DID=%d", id);
    cl_int e;
    cl_program p = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
    if (clBuildProgram(p, 1, &dev, opt, NULL, NULL)) {
        puts("build failed");
        exit(1);
    }
    return p;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int tokens = argc > 1 ? atoi(argv[1]) : 200;
    cl_platform_id plat;
    cl_int e;
    clGetPlatformIDs(1, &plat, NULL);
    clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &e);

    cl_mem small[NARGS], big[2];
    for (int i = 0; i < NARGS; ++i) small[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &e);
    const size_t big_bytes[2] = {(size_t)1536 << 20, (size_t)256 << 20};
    for (int i = 0; i < 2; ++i) {
        big[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, big_bytes[i], NULL, &e);
        const float zero = 0.0f;
        clEnqueueFillBuffer(q, big[i], &zero, 4, 0, big_bytes[i], 0, NULL, NULL);
    }
    const cl_ulong spin0 = 0, spin1 = 1500;
    cl_mem p_idle = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 8, (void *)&spin0, &e);
    cl_mem p_busy = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 8, (void *)&spin1, &e);

    cl_program one = build(0);
    cl_program progs[LAUNCHES];
    for (int i = 0; i < LAUNCHES; ++i) progs[i] = build(i + 1);
    cl_kernel k_one = clCreateKernel(one, "k", &e);
    cl_kernel k_same[LAUNCHES], k_many[LAUNCHES], k_big[LAUNCHES], k_busy[LAUNCHES];
    for (int i = 0; i < LAUNCHES; ++i) {
        k_same[i] = clCreateKernel(one, "k", &e);
        k_many[i] = clCreateKernel(progs[i], "k", &e);
        k_big[i] = clCreateKernel(progs[i], "k", &e);
        k_busy[i] = clCreateKernel(progs[i], "k", &e);
    }
    cl_kernel k_one_busy = clCreateKernel(one, "k", &e);
    for (int a = 0; a < NARGS - 1; ++a) {
        clSetKernelArg(k_one, a, sizeof(cl_mem), &small[a]);
        clSetKernelArg(k_one_busy, a, sizeof(cl_mem), &big[a == 10]);
        for (int i = 0; i < LAUNCHES; ++i) {
            clSetKernelArg(k_same[i], a, sizeof(cl_mem), &small[a]);
            clSetKernelArg(k_many[i], a, sizeof(cl_mem), &small[a]);
            clSetKernelArg(k_big[i], a, sizeof(cl_mem), &big[a == 10]);
            clSetKernelArg(k_busy[i], a, sizeof(cl_mem), &big[a == 10]);
        }
    }
    clSetKernelArg(k_one, NARGS - 1, sizeof(cl_mem), &p_idle);
    clSetKernelArg(k_one_busy, NARGS - 1, sizeof(cl_mem), &p_busy);
    for (int i = 0; i < LAUNCHES; ++i) {
        clSetKernelArg(k_same[i], NARGS - 1, sizeof(cl_mem), &p_idle);
        clSetKernelArg(k_many[i], NARGS - 1, sizeof(cl_mem), &p_idle);
        clSetKernelArg(k_big[i], NARGS - 1, sizeof(cl_mem), &p_idle);
        clSetKernelArg(k_busy[i], NARGS - 1, sizeof(cl_mem), &p_busy);
    }
    char *junk = malloc(8 << 20);

    cl_kernel k_1arg = clCreateKernel(one, "k1", &e);
    clSetKernelArg(k_1arg, 0, sizeof(cl_mem), &small[0]);
    struct {
        const char *name;
        cl_kernel *ks; // LAUNCHES kernels, or NULL for `single`
        cl_kernel single;
        int pollute;
        size_t groups;
        int gated; // the token's first launch waits on a user event set after the last enqueue
    } cases[] = {
        {"one kernel object, 1 buffer, 1 group", NULL, k_1arg, 0, 1},
        {"one kernel object, 1 buffer, 264 groups", NULL, k_1arg, 0, 264},
        {"one kernel object, 12 small buffers, 1 group", NULL, k_one, 0, 1},
        {"one kernel object, 12 small buffers", NULL, k_one, 0, 264},
        {"113 kernel objects of one program", k_same, NULL, 0, 264},
        {"113 programs", k_many, NULL, 0, 264},
        {"113 programs, 2 large buffers", k_big, NULL, 0, 264},
        {"113 programs, large buffers, busy GPU", k_busy, NULL, 0, 264},
        {"one kernel object, large buffers, busy GPU", NULL, k_one_busy, 0, 264},
        {"113 programs, large, busy, 8 MB host writes a token", k_busy, NULL, 1, 264},
        {"one kernel object, 12 small buffers, gated", NULL, k_one, 0, 264, 1},
        {"113 programs, large buffers, busy GPU, gated", k_busy, NULL, 0, 264, 1},
    };
    const int ncases = sizeof cases / sizeof cases[0];
    size_t l = 128;
    double *enq = malloc(sizeof(double) * tokens), *tok = malloc(sizeof(double) * tokens);
    for (int rep = 0; rep < 2; ++rep) {
        for (int c = 0; c < ncases; ++c) {
            for (int t = 0; t < tokens; ++t) {
                if (cases[c].pollute) memset(junk, t, 8 << 20);
                const size_t g = 128 * cases[c].groups;
                const double t0 = now();
                cl_event gate = cases[c].gated ? clCreateUserEvent(ctx, &e) : NULL;
                for (int i = 0; i < LAUNCHES; ++i) {
                    cl_kernel k = cases[c].ks ? cases[c].ks[i] : cases[c].single;
                    if (clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, gate && i == 0, gate && i == 0 ? &gate : NULL, NULL)) {
                        puts("enqueue failed");
                        return 1;
                    }
                    if (i % 16 == 15) clFlush(q);
                }
                if (gate) {
                    clSetUserEventStatus(gate, CL_COMPLETE);
                    clReleaseEvent(gate);
                }
                const double t1 = now();
                clFinish(q);
                const double t2 = now();
                enq[t] = (t1 - t0) / LAUNCHES;
                tok[t] = t2 - t0;
            }
            qsort(enq, tokens, sizeof(double), cmp);
            qsort(tok, tokens, sizeof(double), cmp);
            printf("round %d  %-52s enqueue us/launch p10 %.2f p50 %.2f p90 %.2f   token us p50 %.0f\n",
                   rep + 1, cases[c].name, enq[tokens / 10], enq[tokens / 2], enq[9 * tokens / 10],
                   tok[tokens / 2]);
        }
    }
    return 0;
}
