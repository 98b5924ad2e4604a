// Q8_0 and Q4_0 decode matvecs (weights x one Q8_1 activation row) by how many lanes
// share a weight block. ggml's Q8_0 block is 34 bytes (a half scale, 32 int8
// codes), so its codes are only 2-byte aligned. polycl's kernels give each
// lane whole blocks (`lanes 1`: eight aligned 4-byte words and a 2-byte tail,
// shifted together where a block starts 2 bytes into a word): one warp-wide
// load then touches 32 blocks 34 bytes apart, ~9 cache lines for 128 bytes
// of use, and the L1 may bound the kernel before DRAM does. `lanes 8` gives
// a block 8 lanes (one code word each, from two aligned words), so a load
// touches 4 consecutive blocks (2 lines); `lanes 4` gives it 4 lanes of two
// words. The same for Q4_0 (18-byte blocks, 4 code words): `lanes 1` is
// polycl's frame, `lanes 2` and `lanes 4` share a block. Each variant is checked against a host reference and timed with
// profiling events and in a chain of launches without events, cycling
// through enough weight copies that L2 holds none.
// Build: cc -O2 matvec-q8.c -lOpenCL -lm
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "q4_0-case.h"

static const char *SRC =
    MV_CL_PRELUDE
    // N code words from a 2-byte aligned address: aligned words, shifted together.
    "#define WORDS_A2(qs, w, N) do { const int mis_ = ((ulong)(qs) & 2) != 0;"
    " const global uint *p_ = (const global uint *)((qs) - (mis_ ? 2 : 0)); uint x_[(N) + 1];"
    " _Pragma(\"unroll\") for (int i_ = 0; i_ < (N); ++i_) x_[i_] = p_[i_];"
    " x_[N] = *(const global ushort *)((qs) + 4 * (N) - 2);"
    " _Pragma(\"unroll\") for (int i_ = 0; i_ < (N); ++i_) (w)[i_] = (int)(mis_ ? ((x_[i_] >> 16) | (x_[i_ + 1] << 16)) : x_[i_]); } while (0)\n"
    // Two rows a warp (a row pair, as polycl's kernels), WARPS warps a group.
    // Q4: Q4_0 (18-byte blocks, 4 code words of two nibbles a byte), else
    // Q8_0 (34-byte blocks, 8 code words).
    "#ifdef Q4\n"
    "#define BLK 18\n#define NW 4\n"
    "inline int blkdot(const int *q, const int *a, int i) { return dot4((q[i] >> 4) & 0x0F0F0F0F, a[i + 4], dot4(q[i] & 0x0F0F0F0F, a[i], 0)); }\n"
    "#else\n"
    "#define BLK 34\n#define NW 8\n"
    "inline int blkdot(const int *q, const int *a, int i) { return dot4(q[i], a[i], 0); }\n"
    "#endif\n"
    "kernel void mv(const global char *w, const global char *act, global float *dst, int ncols, int nrows) {\n"
    "  local float scr[32 * WARPS];\n"
    "  const int lane = get_local_id(0) % 32, warp = get_local_id(0) / 32;\n"
    "  const int r0 = (get_group_id(0) * WARPS + warp) * 2;\n"
    "  const int nb = ncols / 32; const long rb = (long)nb * BLK;\n"
    "  const global char *w0 = w + (long)min(r0, nrows - 1) * rb, *w1 = w + (long)min(r0 + 1, nrows - 1) * rb;\n"
    "  float s0 = 0.0f, s1 = 0.0f;\n"
    // LANES lanes a block: lane k of a block takes its code words k * WPL ..
    // + WPL - 1 (WPL = NW / LANES), from the aligned words around them, and
    // the activation words that meet them (Q4_0: word i and i + 4).
    "  const int k = lane % LANES;\n"
    "  _Pragma(\"unroll UNROLL\") for (int b = lane / LANES; b < nb; b += 32 / LANES) {\n"
    "    const global char *ab = act + b * 36; const float da = vload_half(0, (const global half *)ab);\n"
    "    const float sa = vload_half(1, (const global half *)ab);\n"
    "    int a[8]; for (int i = 0; i < NW / LANES; ++i) { a[i] = ((const global int *)(ab + 4))[k * (NW / LANES) + i];\n"
    "#ifdef Q4\n"
    "      a[i + 4] = ((const global int *)(ab + 4))[k * (NW / LANES) + i + 4];\n"
    "#endif\n"
    "    }\n"
    "    for (int m = 0; m < 2; ++m) {\n"
    "      const global char *wb = (m == 0 ? w0 : w1) + b * BLK; const float dw = vload_half(0, (const global half *)wb);\n"
    "      int q[NW / LANES]; WORDS_A2(wb + 2 + 4 * (NW / LANES) * k, q, NW / LANES); int s = 0;\n"
    "      for (int i = 0; i < NW / LANES; ++i) s += blkdot(q, a, i);\n"
    "#ifdef Q4\n"
    "      const float r = dw * (da * (float)s - (k == 0 ? 8.0f * sa : 0.0f));\n"
    "#else\n"
    "      const float r = dw * da * (float)s;\n"
    "#endif\n"
    "      if (m == 0) s0 += r; else s1 += r; } }\n"
    "  const float t0 = wsum(s0, scr + warp * 32), t1 = wsum(s1, scr + warp * 32);\n"
    "  if (lane == 0) { if (r0 < nrows) dst[r0] = t0; if (r0 + 1 < nrows) dst[r0 + 1] = t1; }\n"
    "}\n";

int main(int argc, char **argv) {
    cl_device_id d;
    cl_context ctx;
    cl_command_queue q;
    cl_int e;
    const int nv = mv_open(&d, &ctx, &q);
    const long big = argc > 1 ? atol(argv[1]) : (1L << 30);  // bytes of weights cycled through
    const int nshapes = argc > 2 ? atoi(argv[2]) : 4;
    // The 7B's gate + up, Q/K/V, down and O projections.
    const int shapes[][2] = {{4096, 22016}, {4096, 12288}, {11008, 4096}, {4096, 4096}};
    const int iters = getenv("ITERS") ? atoi(getenv("ITERS")) : 200;
    for (int t = 0; t < 2; ++t)
    for (int si = 0; si < nshapes && si < 4; ++si) {
        const int q4 = t == 1, blk = q4 ? 18 : 34;
        const int ncols = shapes[si][0], nrows = shapes[si][1], nb = ncols / 32;
        const long mat = (long)nrows * nb * blk;
        const int ncopies = (int)(big / mat) + 1 > 64 ? 64 : (int)(big / mat) + 1;
        uint8_t *w = malloc(mat), *act = malloc(nb * 36);
        float *ref = malloc(sizeof(float) * nrows), *out = malloc(sizeof(float) * nrows);
        mv_case(!q4, ncols, nrows, si + 1, w, act, ref);
        // Slack: a block's aligned words may end past the last block.
        cl_mem wa = clCreateBuffer(ctx, CL_MEM_READ_ONLY, mat * ncopies + 64, NULL, &e);
        for (int c = 0; c < ncopies; ++c) clEnqueueWriteBuffer(q, wa, CL_TRUE, mat * c, mat, w, 0, NULL, NULL);
        cl_mem ba = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nb * 36, act, &e);
        cl_mem bd = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * nrows, NULL, &e);
        printf("== %d x %d %s (%.1f MB, %d copies)\n", ncols, nrows, q4 ? "Q4_0" : "Q8_0", mat / 1e6, ncopies);
        // polycl's frame first: a block a lane, 4 warps, unroll 4 (Q8_0) or 2 (Q4_0).
        static const struct variant { int lanes, warps, unroll; } vs8[] = {
            {1, 4, 4}, {1, 4, 2}, {8, 4, 4}, {8, 4, 8}, {4, 4, 4}, {4, 4, 8}, {8, 8, 8}, {4, 8, 4},
        }, vs4[] = {
            {1, 4, 2}, {1, 4, 4}, {4, 4, 4}, {4, 4, 8}, {2, 4, 4}, {2, 4, 2}, {4, 8, 8}, {2, 8, 4},
        };
        const int nvs = q4 ? sizeof vs4 / sizeof vs4[0] : sizeof vs8 / sizeof vs8[0];
        cl_mem subs[64];
        for (int c = 0; c < ncopies; ++c) {
            cl_buffer_region reg = {mat * c, mat};
            subs[c] = clCreateSubBuffer(wa, 0, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
        }
        for (int vi = 0; vi < nvs; ++vi) {
            const struct variant *v = q4 ? &vs4[vi] : &vs8[vi];
            char opts[256];
            snprintf(opts, sizeof opts, "-DLANES=%d -DWARPS=%d -DUNROLL=%d %s %s", v->lanes, v->warps, v->unroll,
                     nv ? "-DNV" : "", q4 ? "-DQ4" : "");
            cl_program pr = mv_build(ctx, d, SRC, opts);
            if (!pr) continue;
            cl_kernel k = clCreateKernel(pr, "mv", &e);
            clSetKernelArg(k, 1, sizeof(cl_mem), &ba);
            clSetKernelArg(k, 2, sizeof(cl_mem), &bd);
            clSetKernelArg(k, 3, sizeof(int), &ncols);
            clSetKernelArg(k, 4, sizeof(int), &nrows);
            const size_t local = 32 * v->warps, rows_wg = 2 * v->warps;
            const size_t global = (nrows + rows_wg - 1) / rows_wg * local;
            const cl_uint warg[] = {0};
            cl_mem *const wcycle[] = {subs};
            double gpu, chain;
            mv_time(q, k, global, local, iters, 1, warg, wcycle, ncopies, &gpu, &chain);
            clEnqueueReadBuffer(q, bd, CL_TRUE, 0, sizeof(float) * nrows, out, 0, NULL, NULL);
            double err = 0, mag = 0;
            for (int r = 0; r < nrows; ++r) {
                err = fmax(err, fabs(out[r] - ref[r]));
                mag = fmax(mag, fabs(ref[r]));
            }
            printf("lanes a block %d warps %d unroll %d   event %7.2f us %6.0f GB/s  chain %7.2f us %6.0f GB/s  rel err %.1e%s\n",
                   v->lanes, v->warps, v->unroll, gpu, mat / gpu / 1e3, chain, mat / chain / 1e3, err / mag,
                   err / mag > 1e-3 ? "  WRONG" : "");
            clReleaseKernel(k);
            clReleaseProgram(pr);
        }
        print_readbw(ctx, d, q, wa, bd, mat, ncopies);
        for (int c = 0; c < ncopies; ++c) clReleaseMemObject(subs[c]);
        clReleaseMemObject(wa);
        clReleaseMemObject(ba);
        clReleaseMemObject(bd);
        free(w);
        free(act);
        free(ref);
        free(out);
    }
    return 0;
}
