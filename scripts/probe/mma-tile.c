// Where does the tensor-core prompt tile (mul_mm_mma.cl) spend its time?
// Times kernel_mul_mm_mma_q4_0 on one prompt-sized matmul (events, best of
// REPS) as built from the repository's sources, and variants of it made by
// replacing source text (so the product kernel carries no probe hooks); each
// variant removes or changes one part of the work:
//   base       the kernel as it is
//   nofold     the float fold after each mma is a plain add of the integers
//   fold1      the fold without the Q4_0 offset term (one product)
//   nomma      the mma is replaced by an xor of its fragments (no tensor core)
//   copyonly   the stage copies without the mma loop
//   nofrag     the fragments are constants instead of local-memory loads
//   kbfull     every stage full (K a multiple of the stage), block loop unrolled
//   copyloop1  the stage copy loops not unrolled
// The base run's outputs are checked against a host computation.
// docs/perf.md step 18 has what it found (the int8-staged tile of session 6,
// which these variants were first written against, is git history).
// Build: cc -O2 mma-tile.c -lOpenCL -lm
// Run:   ./a.out KERNELS_DIR M N K [WM WN MT NT KB] (e.g. src/runtime/kernels 4096 512 4096)
// Env:   VARIANTS=base,nofold,...  REPS=10  OPTS=<build options, e.g. -cl-nv-verbose>
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_file(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(n + 1);
    if (fread(s, 1, n, f) != (size_t)n) exit(1);
    s[n] = 0;
    fclose(f);
    return s;
}

// Every occurrence of `from` in `s` replaced by `to` (a new string); exits
// when there is none, so a stale variant is noticed.
static char *replace(const char *s, const char *from, const char *to) {
    size_t n = 0, lf = strlen(from), lt = strlen(to);
    for (const char *p = strstr(s, from); p; p = strstr(p + lf, from)) ++n;
    if (!n) {
        fprintf(stderr, "variant text not found: %s\n", from);
        exit(1);
    }
    char *out = malloc(strlen(s) + n * (lt + 1) + 1), *o = out;
    const char *p = s;
    for (const char *q = strstr(p, from); q; q = strstr(p, from)) {
        memcpy(o, p, q - p);
        o += q - p;
        memcpy(o, to, lt);
        o += lt;
        p = q + lf;
    }
    strcpy(o, p);
    return out;
}

static unsigned rng = 12345;
static unsigned rnd(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}
static unsigned short f2h(float f) {
    // Values used here are normal and small: truncating conversion is enough.
    unsigned u;
    memcpy(&u, &f, 4);
    unsigned e = ((u >> 23) & 0xff) - 127 + 15;
    return (unsigned short)(((u >> 16) & 0x8000) | (e << 10) | ((u >> 13) & 0x3ff));
}
static float h2f(unsigned short h) {
    unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = ldexpf((float)(m | 0x400), (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

#define CHECK(x)                                                       \
    do {                                                               \
        cl_int e_ = (x);                                               \
        if (e_ != CL_SUCCESS) {                                        \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, e_); \
            exit(1);                                                   \
        }                                                              \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s KERNELS_DIR M N K [WM WN MT NT KB]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    const long M = atol(argv[2]), N = atol(argv[3]), K = atol(argv[4]);
    int tile[5] = {2, 2, 4, 4, 4};
    for (int i = 0; i < 5 && 5 + i < argc; ++i) tile[i] = atoi(argv[5 + i]);
    const int wg = 32 * tile[0] * tile[1], tm = tile[0] * tile[2] * 16, tn = tile[1] * tile[3] * 8;

    cl_platform_id plats[8];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(8, plats, &np));
    cl_device_id dev = 0;
    int nvidia = 0;
    for (cl_uint i = 0; i < np && !dev; ++i) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) != CL_SUCCESS) dev = 0;
        char vendor[256] = "";
        if (dev) clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vendor, vendor, 0);
        nvidia = strstr(vendor, "NVIDIA") != 0;
    }
    if (!dev) {
        fprintf(stderr, "no OpenCL device\n");
        return 1;
    }
    cl_int err;
    cl_context ctx = clCreateContext(0, 1, &dev, 0, 0, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(err);

    // Q4_0 weights (18-byte blocks), Q8_1 activations (36-byte blocks: d, s, 32 int8).
    const long nb = K / 32;
    const size_t wbytes = (size_t)M * nb * 18, abytes = (size_t)N * nb * 36;
    unsigned char *w = malloc(wbytes), *a = malloc(abytes);
    for (size_t i = 0; i < wbytes; ++i) w[i] = rnd();
    for (long i = 0; i < M * nb; ++i) {
        unsigned short d = f2h(0.01f + 0.001f * (rnd() % 16));
        memcpy(w + i * 18, &d, 2);
    }
    for (long i = 0; i < N * nb; ++i) {
        unsigned char *b = a + i * 36;
        int s = 0;
        for (int j = 0; j < 32; ++j) {
            signed char v = (signed char)(rnd() % 255 - 127);
            b[4 + j] = (unsigned char)v;
            s += v;
        }
        float d = 0.02f + 0.001f * (rnd() % 16);
        unsigned short dh = f2h(d), sh = f2h(d * s);
        memcpy(b, &dh, 2);
        memcpy(b + 2, &sh, 2);
    }
    cl_mem wbuf = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, wbytes, w, &err);
    CHECK(err);
    cl_mem abuf = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, abytes, a, &err);
    CHECK(err);
    cl_mem dbuf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)M * N * 4, 0, &err);
    CHECK(err);

    char *common = read_file(dir, "common.cl"), *mma = read_file(dir, "mul_mm_mma.cl");
    struct {
        const char *name;
        const char *from[4];
        const char *to[4];
    } variants[] = {
        {"base", {0}, {0}},
        {"nofold",
         {"acc[mt][nt][0] += dw[mt].x * (ds.x * c.x - 8.0f * ds.y);",
          "acc[mt][nt][1] += dw[mt].x * (ds.z * c.y - 8.0f * ds.w);",
          "acc[mt][nt][2] += dw[mt].y * (ds.x * c.z - 8.0f * ds.y);",
          "acc[mt][nt][3] += dw[mt].y * (ds.z * c.w - 8.0f * ds.w);"},
         {"acc[mt][nt][0] += c.x;", "acc[mt][nt][1] += c.y;", "acc[mt][nt][2] += c.z;",
          "acc[mt][nt][3] += c.w;"}},
        {"fold1",
         {"acc[mt][nt][0] += dw[mt].x * (ds.x * c.x - 8.0f * ds.y);",
          "acc[mt][nt][1] += dw[mt].x * (ds.z * c.y - 8.0f * ds.w);",
          "acc[mt][nt][2] += dw[mt].y * (ds.x * c.z - 8.0f * ds.y);",
          "acc[mt][nt][3] += dw[mt].y * (ds.z * c.w - 8.0f * ds.w);"},
         {"acc[mt][nt][0] += dw[mt].x * ds.x * c.x;", "acc[mt][nt][1] += dw[mt].x * ds.z * c.y;",
          "acc[mt][nt][2] += dw[mt].y * ds.x * c.z;", "acc[mt][nt][3] += dw[mt].y * ds.z * c.w;"}},
        {"nomma",
         {"c = mma_i2f(mma_s8(af[mt], bf, scratch));"},
         {"c = mma_i2f(af[mt] ^ (int4)(bf.x, bf.y, bf.x, bf.y));"}},
        {"copyonly", {"for (int kb = 0; kb < nkb; ++kb) {"}, {"for (int kb = 0; kb < 0 * nkb; ++kb) {"}},
        {"nofrag",
         {"af[mt] = (int4)(v0 & m, v1 & m, (v0 >> 4) & m, (v1 >> 4) & m);",
          "const int2 bf = (int2)(*(const __local int *)(q + 4 + 4 * tig),\n"
          "                                       *(const __local int *)(q + 20 + 4 * tig));"},
         {"af[mt] = (int4)(kb + mt, g, tig, lane);", "const int2 bf = (int2)(kb + nt, g);"}},
        {"kbfull",
         {"const int nkb = (int)min((long)rkb, nblocks - st * rkb);",
          "        for (int kb = 0; kb < nkb; ++kb) {"},
         {"const int nkb = rkb;", "#pragma unroll\n        for (int kb = 0; kb < nkb; ++kb) {"}},
        {"copyloop1",
         {"#pragma unroll\n    for (int j = 0; j < (n * cu"},
         {"#pragma unroll 1\n    for (int j = 0; j < (n * cu"}},
    };
    const int nvariants = sizeof variants / sizeof variants[0];
    const char *only = getenv("VARIANTS");
    printf("device %s; M %ld N %ld K %ld; tile %d,%d,%d,%d,%d (%d x %d, %d work-items)\n",
           nvidia ? "NVIDIA" : "other", M, N, K, tile[0], tile[1], tile[2], tile[3], tile[4], tm,
           tn, wg);
    for (int v = 0; v < nvariants; ++v) {
        if (only && !strstr(only, variants[v].name)) continue;
        char *src = strdup(mma);
        for (int r = 0; r < 4 && variants[v].from[r]; ++r) {
            char *t = replace(src, variants[v].from[r], variants[v].to[r]);
            free(src);
            src = t;
        }
        const char *srcs[2] = {common, src};
        cl_program prog = clCreateProgramWithSource(ctx, 2, srcs, 0, &err);
        CHECK(err);
        // OPTS: more build options, e.g. -cl-nv-verbose (then the build log,
        // with NVIDIA's register counts, is printed) or -cl-nv-maxrregcount=N.
        char opts[1024];
        snprintf(opts, sizeof opts,
                 "-cl-std=CL1.2 -DMMA_WM=%d -DMMA_WN=%d -DMMA_MT=%d -DMMA_NT=%d -DMMA_KB=%d %s %s",
                 tile[0], tile[1], tile[2], tile[3], tile[4], nvidia ? "-DPOLYCL_NVIDIA=1" : "",
                 getenv("OPTS") ? getenv("OPTS") : "");
        const cl_int built = clBuildProgram(prog, 1, &dev, opts, 0, 0);
        if (built != CL_SUCCESS || (getenv("OPTS") && strstr(getenv("OPTS"), "verbose"))) {
            char log[65536] = "";
            clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, 0);
            fprintf(stderr, "%s: build log\n%s\n", variants[v].name, log);
            if (built != CL_SUCCESS) continue;
        }
        // KERNEL: which Q4_0 kernel (default kernel_mul_mm_mma_q4_0).
        cl_kernel k = clCreateKernel(
            prog, getenv("KERNEL") ? getenv("KERNEL") : "kernel_mul_mm_mma_q4_0", &err);
        CHECK(err);
        const cl_ulong off = 0;
        const cl_long w_ne[4] = {K, M, 1, 1}, b_ne[4] = {K, N, 1, 1}, d_ne[4] = {M, N, 1, 1};
        const cl_ulong w_nb[4] = {18, nb * 18, nb * 18 * M, nb * 18 * M};
        const cl_ulong a_nb[4] = {36, nb * 36, nb * 36 * N, nb * 36 * N};
        const cl_ulong d_nb[4] = {4, M * 4, M * N * 4, M * N * 4};
        int i = 0;
        CHECK(clSetKernelArg(k, i++, sizeof wbuf, &wbuf));
        CHECK(clSetKernelArg(k, i++, 8, &off));
        CHECK(clSetKernelArg(k, i++, 32, w_ne));
        CHECK(clSetKernelArg(k, i++, 32, w_nb));
        CHECK(clSetKernelArg(k, i++, sizeof abuf, &abuf));
        CHECK(clSetKernelArg(k, i++, 8, &off));
        CHECK(clSetKernelArg(k, i++, 32, a_nb));
        CHECK(clSetKernelArg(k, i++, 32, b_ne));
        CHECK(clSetKernelArg(k, i++, sizeof dbuf, &dbuf));
        CHECK(clSetKernelArg(k, i++, 8, &off));
        CHECK(clSetKernelArg(k, i++, 32, d_ne));
        CHECK(clSetKernelArg(k, i++, 32, d_nb));
        const size_t gs[3] = {(size_t)wg * ((M + tm - 1) / tm), (size_t)((N + tn - 1) / tn), 1};
        const size_t ls[3] = {(size_t)wg, 1, 1};
        double best = 1e30;
        const int reps = getenv("REPS") ? atoi(getenv("REPS")) : 10;
        for (int r = 0; r < reps; ++r) {
            cl_event ev;
            CHECK(clEnqueueNDRangeKernel(q, k, 3, 0, gs, ls, 0, 0, &ev));
            CHECK(clWaitForEvents(1, &ev));
            cl_ulong t0, t1;
            clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, 8, &t0, 0);
            clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, 8, &t1, 0);
            clReleaseEvent(ev);
            if ((t1 - t0) * 1e-3 < best) best = (t1 - t0) * 1e-3;
        }
        const double tops = 2.0 * M * N * K / (best * 1e-6) / 1e12;
        printf("%-8s %9.1f us  %6.1f TOPS", variants[v].name, best, tops);
        if (v == 0) {
            // A few outputs against the host: sum over blocks of dw * (da * sum(q * a) -
            // 8 * sa), with the block's stored (half) sa as the kernel uses it.
            float *out = malloc((size_t)M * N * 4);
            CHECK(clEnqueueReadBuffer(q, dbuf, CL_TRUE, 0, (size_t)M * N * 4, out, 0, 0, 0));
            double maxrel = 0;
            for (int s = 0; s < 16; ++s) {
                const long r = rnd() % M, t = rnd() % N;
                double ref = 0;
                for (long b = 0; b < nb; ++b) {
                    const unsigned char *wb = w + (r * nb + b) * 18, *ab = a + (t * nb + b) * 36;
                    unsigned short dw, da, sa;
                    memcpy(&dw, wb, 2);
                    memcpy(&da, ab, 2);
                    memcpy(&sa, ab + 2, 2);
                    long dot = 0;
                    for (int j = 0; j < 16; ++j) {
                        dot += (wb[2 + j] & 15) * (long)(signed char)ab[4 + j];
                        dot += (wb[2 + j] >> 4) * (long)(signed char)ab[4 + 16 + j];
                    }
                    ref += (double)h2f(dw) * ((double)h2f(da) * dot - 8.0 * h2f(sa));
                }
                const double rel = fabs(out[r * N * 0 + t * M + r] - ref) / (fabs(ref) + 1e-3);
                if (rel > maxrel) maxrel = rel;
            }
            printf("  (16 outputs vs host: max rel err %.2e)", maxrel);
            free(out);
        }
        printf("\n");
        clReleaseKernel(k);
        clReleaseProgram(prog);
        free(src);
    }
    return 0;
}
