// What the decode matvec probes (matvec-layout.c, matvec-act.c, matvec-q8.c)
// share: half conversions, the OpenCL helpers their kernels start with
// (MV_CL_PRELUDE), a random Q4_0 or Q8_0 case with its float reference, and
// the time a plain read of the same bytes takes.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// dp4a and a warp's sum (inline PTX with -DNV, portable code elsewhere).
#define MV_CL_PRELUDE                                                                             \
    "#ifdef NV\n"                                                                                 \
    "inline int dot4(int a, int b, int c) { int r; asm volatile(\"dp4a.s32.s32 %0, %1, %2, %3;\" : \"=r\"(r) : \"r\"(a), \"r\"(b), \"r\"(c)); return r; }\n" \
    "inline float wsum(float v, local float *scr) { for (int m = 16; m >= 1; m >>= 1) { float o;" \
    " asm volatile(\"shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\" : \"=f\"(o) : \"f\"(v), \"r\"(m)); v += o; } return v; }\n" \
    "#else\n"                                                                                     \
    "inline int dot4(int a, int b, int c) { char4 x = as_char4(a), y = as_char4(b); return c + x.x*y.x + x.y*y.y + x.z*y.z + x.w*y.w; }\n" \
    "inline float wsum(float v, local float *scr) { const int l = get_local_id(0) % 32; scr[l] = v; barrier(CLK_LOCAL_MEM_FENCE);" \
    " float t = 0.0f; for (int i = 0; i < 32; ++i) t += scr[i]; barrier(CLK_LOCAL_MEM_FENCE); return t; }\n" \
    "#endif\n"

// The first device of the first platform, a context and a profiling queue
// on it; returns whether it is NVIDIA's (inline PTX).
static inline int mv_open(cl_device_id *d, cl_context *ctx, cl_command_queue *q) {
    cl_platform_id p;
    cl_int e;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, d, NULL);
    char vendor[256];
    clGetDeviceInfo(*d, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
    *ctx = clCreateContext(NULL, 1, d, NULL, NULL, &e);
    *q = clCreateCommandQueue(*ctx, *d, CL_QUEUE_PROFILING_ENABLE, &e);
    return strstr(vendor, "NVIDIA") != NULL;
}

// `src` built with `opts`, or NULL after printing the start of its build log.
static inline cl_program mv_build(cl_context ctx, cl_device_id d, const char *src, const char *opts) {
    cl_int e;
    cl_program pr = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    if (clBuildProgram(pr, 1, &d, opts, NULL, NULL)) {
        char log[8192];
        clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        printf("build failed (%s): %.300s\n", opts, log);
        clReleaseProgram(pr);
        return NULL;
    }
    return pr;
}

// Mean device time (us) of n launches' profiling events after the first
// tenth (warm-up); releases the events.
static inline double mv_events_us(cl_event *ev, int n) {
    double us = 0;
    for (int it = 0; it < n; ++it) {
        cl_ulong t0, t1;
        clGetEventProfilingInfo(ev[it], CL_PROFILING_COMMAND_START, 8, &t0, NULL);
        clGetEventProfilingInfo(ev[it], CL_PROFILING_COMMAND_END, 8, &t1, NULL);
        if (it >= n / 10) us += (t1 - t0) / 1e3;
        clReleaseEvent(ev[it]);
    }
    return us / (n - n / 10);
}

// Monotonic wall time in us.
static inline double mv_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// Times `iters` 1-D launches of `k`, before each setting argument arg[a]
// (a < nargs) to entry it % ncycle of the buffers cycle[a]: the launches'
// mean device time from profiling events (mv_events_us) in *event_us, and in
// *chain_us the wall time a launch takes in the same chain without events
// (what one costs back to back).
static inline void mv_time(cl_command_queue q, cl_kernel k, size_t global, size_t local, int iters,
                           int nargs, const cl_uint *arg, cl_mem *const *cycle, int ncycle,
                           double *event_us, double *chain_us) {
    cl_event *ev = malloc(sizeof(cl_event) * iters);
    for (int it = 0; it < iters; ++it) {
        for (int a = 0; a < nargs; ++a) clSetKernelArg(k, arg[a], sizeof(cl_mem), &cycle[a][it % ncycle]);
        clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev[it]);
    }
    clFinish(q);
    *event_us = mv_events_us(ev, iters);
    free(ev);
    const double c0 = mv_now_us();
    for (int it = 0; it < iters; ++it) {
        for (int a = 0; a < nargs; ++a) clSetKernelArg(k, arg[a], sizeof(cl_mem), &cycle[a][it % ncycle]);
        clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL);
    }
    clFinish(q);
    *chain_us = (mv_now_us() - c0) / iters;
}

static uint16_t f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e < 103) return sign;
    if (e < 113) return sign | ((m | 0x800000) >> (126 - e));
    return sign | ((e - 112) << 10) | (m >> 13);
}
static float h2f(uint16_t h) {
    uint32_t s = (h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, x;
    if (e == 0) {
        float v = m / 1024.0f / 16384.0f;
        return s ? -v : v;
    }
    x = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

// A random Q4_0 (q8 = 0: ggml's 18-byte blocks) or Q8_0 (q8 = 1: 34-byte
// blocks) matrix of nrows x ncols, scales within +-0.01, in w; a random Q8_1
// activation row (ggml's 36-byte blocks) in act; and ref[r] = row r of w
// times act, in double precision.
static void mv_case(int q8, int ncols, int nrows, unsigned seed, uint8_t *w, uint8_t *act, float *ref) {
    const int nb = ncols / 32, bs = q8 ? 34 : 18;
    const long mat = (long)nrows * nb * bs;
    float *xa = malloc(sizeof(float) * ncols);
    srand(seed);
    for (long i = 0; i < mat; ++i) w[i] = rand() & 0xff;
    for (long blk = 0; blk < (long)nrows * nb; ++blk) {
        uint16_t h = f2h((rand() % 2000 - 1000) / 1e5f);
        memcpy(w + blk * bs, &h, 2);
    }
    for (int b = 0; b < nb; ++b) {
        float da = (rand() % 1000 + 1) / 1e4f;
        int qs = 0;
        for (int j = 0; j < 32; ++j) {
            int8_t v = (int8_t)(rand() % 255 - 127);
            act[b * 36 + 4 + j] = (uint8_t)v;
            qs += v;
        }
        uint16_t hd = f2h(da), hs = f2h(da * qs);
        memcpy(act + b * 36, &hd, 2);
        memcpy(act + b * 36 + 2, &hs, 2);
        for (int j = 0; j < 32; ++j) xa[b * 32 + j] = h2f(hd) * (int8_t)act[b * 36 + 4 + j];
    }
    for (int r = 0; r < nrows; ++r) {
        double s = 0;
        for (int b = 0; b < nb; ++b) {
            const uint8_t *blk = w + ((long)r * nb + b) * bs;
            uint16_t h;
            memcpy(&h, blk, 2);
            const float dw = h2f(h);
            if (q8) {
                for (int j = 0; j < 32; ++j) s += dw * (int8_t)blk[2 + j] * xa[b * 32 + j];
                continue;
            }
            for (int j = 0; j < 16; ++j) {
                s += dw * ((blk[2 + j] & 15) - 8) * xa[b * 32 + j];
                s += dw * ((blk[2 + j] >> 4) - 8) * xa[b * 32 + 16 + j];
            }
        }
        ref[r] = (float)s;
    }
    free(xa);
}

static inline void q4_0_case(int ncols, int nrows, unsigned seed, uint8_t *w, uint8_t *act, float *ref) {
    mv_case(0, ncols, nrows, seed, w, act, ref);
}

// Prints the GPU time (profiling events, launches 10..49) of a plain int4
// read of `mat` bytes, cycling through the `ncopies` copies in `w`: the
// bandwidth a matvec over those bytes could reach. `scratch` takes the
// kernel's one (never written) result.
static inline void print_readbw(cl_context ctx, cl_device_id d, cl_command_queue q, cl_mem w, cl_mem scratch,
                         long mat, int ncopies) {
    static const char *src =
        "kernel void readbw(const global int4 *w, global int *dst, long n) {\n"
        "  int4 s = 0; for (long i = get_global_id(0); i < n; i += get_global_size(0)) s ^= w[i];\n"
        "  if ((s.x ^ s.y ^ s.z ^ s.w) == 0x12345) dst[0] = 1; }\n";
    cl_int e;
    cl_program pr = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    clBuildProgram(pr, 1, &d, "", NULL, NULL);
    cl_kernel k = clCreateKernel(pr, "readbw", &e);
    const long n = mat / 16;
    clSetKernelArg(k, 1, sizeof(cl_mem), &scratch);
    clSetKernelArg(k, 2, sizeof(long), &n);
    const size_t local = 256, global = 132 * 2048;
    double gpu = 0;
    for (int it = 0; it < 50; ++it) {
        cl_buffer_region reg = {mat * (it % ncopies), mat};
        cl_mem sub = clCreateSubBuffer(w, 0, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
        clSetKernelArg(k, 0, sizeof(cl_mem), &sub);
        cl_event ev;
        clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev);
        clWaitForEvents(1, &ev);
        cl_ulong t0, t1;
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, 8, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, 8, &t1, NULL);
        if (it >= 10) gpu += (t1 - t0) / 1e3;
        clReleaseEvent(ev);
        clReleaseMemObject(sub);
    }
    gpu /= 40;
    printf("readbw (plain int4 read of the same bytes)     %7.2f us  %6.0f GB/s\n", gpu, mat / gpu / 1e3);
    clReleaseKernel(k);
    clReleaseProgram(pr);
}
