// What the session 33 probes (kernel-gap.c, stream-pattern.c, zero-copy.c)
// share: the host clock, a median's sort, a status check, and the first GPU
// with one in-order queue and one program built from source.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The median of n doubles (sorts them).
static inline double median(double *v, int n) {
    qsort(v, n, sizeof v[0], cmp_double);
    return v[n / 2];
}

#define CK(x) do { cl_int e_ = (x); if (e_) { printf("%s: %d\n", #x, e_); return 1; } } while (0)

typedef struct {
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
} gpu_frame;

// The first GPU, its queue and `src` built; 0 on success. stdout is line
// buffered, so a probe killed by a timeout keeps what it printed.
static inline int gpu_frame_open(gpu_frame *g, const char *src) {
    cl_platform_id p;
    cl_int e;
    setvbuf(stdout, NULL, _IOLBF, 0);
    CK(clGetPlatformIDs(1, &p, NULL));
    CK(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 1, &g->dev, NULL));
    g->ctx = clCreateContext(NULL, 1, &g->dev, NULL, NULL, &e); CK(e);
    g->q = clCreateCommandQueue(g->ctx, g->dev, 0, &e); CK(e);
    g->prog = clCreateProgramWithSource(g->ctx, 1, &src, NULL, &e); CK(e);
    if (clBuildProgram(g->prog, 1, &g->dev, "", NULL, NULL)) {
        static char log[65536];
        clGetProgramBuildInfo(g->prog, g->dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        printf("build: %s\n", log);
        return 1;
    }
    return 0;
}
