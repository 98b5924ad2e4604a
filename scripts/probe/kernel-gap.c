// The GPU's own time between dependent kernels on one in-order queue, with the
// host out of the way: a 3 ms spin kernel first, during which the host enqueues
// K more, so they run back to back on the GPU. Per case: (host time of spin + K
// kernels - spin alone) / K, medians of 30 rounds, us a kernel. Cases change
// one thing at a time: groups, arguments, local memory (alternating sizes, which
// may make the SMs change their L1 / shared memory split between kernels), a
// global store a group.
// Build: cc -O2 kernel-gap.c -lOpenCL   Run: ./a.out
#include "gpu-frame.h"

#define K 200
static const char *SRC =
    "kernel void spin(global int *a, ulong ns) {\n"
    "  ulong t0, t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "  do { asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); } while (t - t0 < ns);\n"
    "  if (get_global_id(0) == 0) a[0] = (int)(t - t0); }\n"
    "kernel void empty(global int *a) { if (get_global_id(0) == 1 << 30) a[0] = 1; }\n"
    "kernel void store(global int *a) { if (get_local_id(0) == 0) a[get_group_id(0)] = 1; }\n"
    "kernel void args12(global int *a, ulong b, ulong c, ulong d, ulong e, ulong f, ulong g,\n"
    "  ulong h, ulong i, ulong j, ulong k, global const ulong *pk) {\n"
    "  if (get_global_id(0) == 1 << 30) a[0] = (int)(b + c + d + e + f + g + h + i + j + k + pk[0]); }\n"
    "kernel void lmem2k(global int *a) { local float s[512]; s[get_local_id(0)] = 1.0f;\n"
    "  barrier(CLK_LOCAL_MEM_FENCE); if (get_global_id(0) == 1 << 30) a[0] = (int)s[3]; }\n"
    "kernel void lmem24k(global int *a) { local float s[6144]; s[get_local_id(0)] = 1.0f;\n"
    "  barrier(CLK_LOCAL_MEM_FENCE); if (get_global_id(0) == 1 << 30) a[0] = (int)s[3]; }\n"
    // A packed-slots kernel's start: the group reads its slots from memory.
    "kernel void slots(global int *a, global const ulong *pk) { const ulong x = pk[get_local_id(0) & 7];\n"
    "  if (x == 12345) a[0] = 1; }\n";

static cl_command_queue q;
static cl_kernel spin;
static size_t one = 128;

// Host time of the spin + the kernels in `ks` (cycled), less the spin's alone.
static double run_case(cl_kernel *ks, int nk, size_t groups, size_t local) {
    double t[30], base[30];
    size_t g = groups * local;
    for (int r = 0; r < 30; ++r) {
        double t0 = now();
        CK(clEnqueueNDRangeKernel(q, spin, 1, NULL, &one, &one, 0, NULL, NULL));
        clFlush(q);
        clFinish(q);
        base[r] = now() - t0;
        t0 = now();
        CK(clEnqueueNDRangeKernel(q, spin, 1, NULL, &one, &one, 0, NULL, NULL));
        clFlush(q);
        for (int i = 0; i < K; ++i) CK(clEnqueueNDRangeKernel(q, ks[i % nk], 1, NULL, &g, &local, 0, NULL, NULL));
        clFinish(q);
        t[r] = now() - t0;
    }
    return (median(t, 30) - median(base, 30)) / K;
}

int main(void) {
    gpu_frame f;
    cl_int e;
    if (gpu_frame_open(&f, SRC)) return 1;
    cl_context ctx = f.ctx;
    cl_program prog = f.prog;
    q = f.q;
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &e); CK(e);
    cl_mem pk = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &e); CK(e);
    spin = clCreateKernel(prog, "spin", &e); CK(e);
    cl_ulong ns = 3000000; // long enough for the host to enqueue K kernels
    CK(clSetKernelArg(spin, 0, sizeof a, &a));
    CK(clSetKernelArg(spin, 1, 8, &ns));
    const char *names[] = {"empty", "store", "args12", "lmem2k", "lmem24k", "slots"};
    cl_kernel k[6];
    for (int i = 0; i < 6; ++i) {
        k[i] = clCreateKernel(prog, names[i], &e); CK(e);
        CK(clSetKernelArg(k[i], 0, sizeof a, &a));
    }
    cl_ulong z = 0;
    for (int i = 1; i <= 10; ++i) CK(clSetKernelArg(k[2], i, 8, &z));
    CK(clSetKernelArg(k[2], 11, sizeof pk, &pk));
    CK(clSetKernelArg(k[5], 1, sizeof pk, &pk));
    printf("empty, 1 group of 128:          %.2f us a kernel\n", run_case(&k[0], 1, 1, 128));
    printf("empty, 132 groups:              %.2f\n", run_case(&k[0], 1, 132, 128));
    printf("empty, 1536 groups:             %.2f\n", run_case(&k[0], 1, 1536, 128));
    printf("store a group, 1536 groups:     %.2f\n", run_case(&k[1], 1, 1536, 128));
    printf("12 arguments, 1536 groups:      %.2f\n", run_case(&k[2], 1, 1536, 128));
    printf("slots read, 1536 groups:        %.2f\n", run_case(&k[5], 1, 1536, 128));
    printf("2 KB local, 528 groups:         %.2f\n", run_case(&k[3], 1, 528, 128));
    printf("24 KB local, 528 groups:        %.2f\n", run_case(&k[4], 1, 528, 128));
    cl_kernel alt[2] = {k[3], k[4]};
    printf("2 KB / 24 KB alternating, 528:  %.2f\n", run_case(alt, 2, 528, 128));
    cl_kernel alt2[2] = {k[0], k[4]};
    printf("none / 24 KB alternating, 528:  %.2f\n", run_case(alt2, 2, 528, 128));
    cl_kernel alt3[2] = {k[0], k[1]};
    printf("empty / store alternating, 528: %.2f\n", run_case(alt3, 2, 528, 128));
    return 0;
}
