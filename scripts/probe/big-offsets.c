// Which OpenCL transfers work at byte offsets past 4 GiB of one buffer on the
// first device: a fill (1- and 16-byte patterns), a fill of a sub-buffer
// that starts there, a write read back, a device copy, and a kernel store.
// A failed command can poison the whole process on NVIDIA (its 1-byte fill
// at 3.5 GiB did: every later allocation failed, docs/perf.md step 40), so
// one case a process. Build: cc big-offsets.c -lOpenCL.
// Usage: big-offsets GIB OFFSET_MIB CASE (0..5, see run)
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_device_id dev;
#define PIECE ((size_t)16 << 20)

static const char *KSRC =
    "kernel void put(global uchar *p, ulong off) { p[off + get_global_id(0)] = 0x5a; }";

// 0: fill 1-byte, 1: fill 16-byte, 2: fill via sub-buffer, 3: write+read,
// 4: copy from there to offset 0, 5: kernel store.
static const char *run(int kind, size_t total, size_t off) {
    cl_int e;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &e);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, total, NULL, &e);
    if (e) return "alloc failed";
    unsigned char *h = malloc(PIECE), *back = malloc(PIECE);
    memset(h, 0x5a, PIECE);
    memset(back, 0, PIECE);
    unsigned char pat[16];
    memset(pat, 0x5a, 16);
    cl_mem sub = NULL;
    switch (kind) {
    case 0: e = clEnqueueFillBuffer(q, b, pat, 1, off, PIECE, 0, NULL, NULL); break;
    case 1: e = clEnqueueFillBuffer(q, b, pat, 16, off, PIECE, 0, NULL, NULL); break;
    case 2: {
        cl_buffer_region r = {off, PIECE};
        sub = clCreateSubBuffer(b, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &e);
        if (!e) e = clEnqueueFillBuffer(q, sub, pat, 1, 0, PIECE, 0, NULL, NULL);
        break;
    }
    case 3: e = clEnqueueWriteBuffer(q, b, CL_TRUE, off, PIECE, h, 0, NULL, NULL); break;
    case 4:
        e = clEnqueueWriteBuffer(q, b, CL_TRUE, off, PIECE, h, 0, NULL, NULL);
        if (!e) e = clEnqueueCopyBuffer(q, b, b, off, 0, PIECE, 0, NULL, NULL);
        break;
    case 5: {
        cl_program pr = clCreateProgramWithSource(ctx, 1, &KSRC, NULL, &e);
        clBuildProgram(pr, 1, &dev, "", NULL, NULL);
        cl_kernel k = clCreateKernel(pr, "put", &e);
        cl_ulong o = off;
        clSetKernelArg(k, 0, sizeof b, &b);
        clSetKernelArg(k, 1, sizeof o, &o);
        size_t g = PIECE;
        e = clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL);
        break;
    }
    }
    static char msg[128];
    if (e) { snprintf(msg, sizeof msg, "enqueue status %d", e); return msg; }
    e = clFinish(q);
    if (e) { snprintf(msg, sizeof msg, "clFinish status %d", e); return msg; }
    e = clEnqueueReadBuffer(q, b, CL_TRUE, kind == 4 ? 0 : off, PIECE, back, 0, NULL, NULL);
    if (e) { snprintf(msg, sizeof msg, "read status %d", e); return msg; }
    int ok = memcmp(back, h, PIECE) == 0;
    if (sub) clReleaseMemObject(sub);
    clReleaseMemObject(b);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    free(h);
    free(back);
    return ok ? "ok" : "WRONG BYTES";
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s GIB OFFSET_MIB CASE\n", argv[0]);
        return 2;
    }
    size_t gib = (size_t)atoi(argv[1]), off = (size_t)atoi(argv[2]) << 20;
    int kind = atoi(argv[3]);
    cl_platform_id p;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    const char *names[] = {"fill 1-byte pattern", "fill 16-byte pattern", "fill of a sub-buffer",
                           "write, read back", "copy to offset 0", "kernel store"};
    printf("%zu GiB buffer, offset %zu MiB, %s: %s\n", gib, off >> 20, names[kind],
           run(kind, gib << 30, off));
    return 0;
}
