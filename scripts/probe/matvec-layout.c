// Decode matvec speed by weight layout on one device: Q4_0 weights (ggml's
// 18-byte blocks, or each row split into its 16-byte code blocks followed by
// its 2-byte scales) against Q8_1 activations (ggml's 36-byte blocks, or
// split the same way). Checks each variant against a host reference and
// prints GPU time per launch (profiling events) and the weight bandwidth.
// Build: cc -O2 matvec-layout.c -lOpenCL -lm
// Usage: matvec-layout [bytes cycled through] [COLSxROWS,...]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "q4_0-case.h"

static const char *SRC =
    MV_CL_PRELUDE
    "inline int ld2(const global char *p) { ushort2 u = vload2(0, (const global ushort *)p); return (int)u.x | ((int)u.y << 16); }\n"
    "inline int blk(int4 q, int8 a) { int s = 0;\n"
    "  s = dot4(q.x & 0x0F0F0F0F, a.s0, s); s = dot4((q.x >> 4) & 0x0F0F0F0F, a.s4, s);\n"
    "  s = dot4(q.y & 0x0F0F0F0F, a.s1, s); s = dot4((q.y >> 4) & 0x0F0F0F0F, a.s5, s);\n"
    "  s = dot4(q.z & 0x0F0F0F0F, a.s2, s); s = dot4((q.z >> 4) & 0x0F0F0F0F, a.s6, s);\n"
    "  s = dot4(q.w & 0x0F0F0F0F, a.s3, s); s = dot4((q.w >> 4) & 0x0F0F0F0F, a.s7, s); return s; }\n"
    // ggml layout: the kernel polycl runs today (two rows a warp).
    "kernel void aos(const global char *w, const global char *act, global float *dst, int ncols, int nrows) {\n"
    "  const int lane = get_local_id(0) % 32; const int r = (get_group_id(0) * (get_local_size(0) / 32) + get_local_id(0) / 32) * ROWS;\n"
    "  const int nb = ncols / 32; const long rb = (long)nb * 18; float sum[ROWS]; local float scr[256];\n"
    "  for (int m = 0; m < ROWS; ++m) sum[m] = 0.0f;\n"
    "  _Pragma(\"unroll UNROLL\") for (int ib = lane; ib < nb; ib += 32) {\n"
    "    const global char *ab = act + ib * 36; const float da = vload_half(0, (const global half *)ab), sa = vload_half(1, (const global half *)ab);\n"
    "    const int8 a = vload8(0, (const global int *)(ab + 4));\n"
    "    for (int m = 0; m < ROWS; ++m) { const global char *wb = w + (r + m) * rb + ib * 18;\n"
    "      const float dw = vload_half(0, (const global half *)wb);\n"
    "      const int4 q = (int4)(ld2(wb + 2), ld2(wb + 6), ld2(wb + 10), ld2(wb + 14));\n"
    "      sum[m] += dw * (da * (float)blk(q, a) - 8.0f * sa); } }\n"
    "  for (int m = 0; m < ROWS; ++m) { const float t = wsum(sum[m], scr + get_local_id(0) / 32 * 32); if (lane == 0 && r + m < nrows) dst[r + m] = t; } }\n"
    // Split rows: row r = codes (nb x 16 bytes, 16-aligned) then scales (nb
    // halves); same row size, so row strides and views are unchanged.
    // Activations: SPLIT_ACT = codes (nb x 32 bytes) then (d, s) half pairs.
    "kernel void soa(const global char *w, const global char *act, global float *dst, int ncols, int nrows) {\n"
    "  const int lane = get_local_id(0) % 32; const int r = (get_group_id(0) * (get_local_size(0) / 32) + get_local_id(0) / 32) * ROWS;\n"
    "  const int nb = ncols / 32; const long rb = (long)nb * 18; float sum[ROWS]; local float scr[256];\n"
    "  for (int m = 0; m < ROWS; ++m) sum[m] = 0.0f;\n"
    "  _Pragma(\"unroll UNROLL\") for (int ib = lane; ib < nb; ib += 32) {\n"
    "#ifdef SPLIT_ACT\n"
    "    const float2 ds = vload_half2(ib, (const global half *)(act + nb * 32)); const float da = ds.x, sa = ds.y;\n"
    "    const int8 a = *(const global int8 *)(act + ib * 32);\n"
    "#else\n"
    "    const global char *ab = act + ib * 36; const float da = vload_half(0, (const global half *)ab), sa = vload_half(1, (const global half *)ab);\n"
    "    const int8 a = vload8(0, (const global int *)(ab + 4));\n"
    "#endif\n"
    "    for (int m = 0; m < ROWS; ++m) { const global char *row = w + (r + m) * rb;\n"
    "      const int4 q = *(const global int4 *)(row + ib * 16);\n"
    "      const float dw = vload_half(ib, (const global half *)(row + nb * 16));\n"
    "      sum[m] += dw * (da * (float)blk(q, a) - 8.0f * sa); } }\n"
    "  for (int m = 0; m < ROWS; ++m) { const float t = wsum(sum[m], scr + get_local_id(0) / 32 * 32); if (lane == 0 && r + m < nrows) dst[r + m] = t; } }\n";

int main(int argc, char **argv) {
    cl_device_id d;
    cl_context ctx;
    cl_command_queue q;
    cl_int e;
    const int nv = mv_open(&d, &ctx, &q);
    const long big = argc > 1 ? atol(argv[1]) : (1L << 30);  // bytes of weights cycled through
    // Shapes (columns x rows): argv[2] as "COLSxROWS,..." (at most 8), or the 7B's.
    int shapes[8][2] = {{4096, 4096}, {4096, 22016}, {11008, 4096}, {2048, 2048}};
    int nshapes = 4;
    if (argc > 2) {
        nshapes = 0;
        for (const char *s = argv[2]; *s && nshapes < 8;) {
            if (sscanf(s, "%dx%d", &shapes[nshapes][0], &shapes[nshapes][1]) != 2) break;
            ++nshapes;
            s = strchr(s, ',');
            if (!s) break;
            ++s;
        }
    }
    for (int si = 0; si < nshapes; ++si) {
        const int ncols = shapes[si][0], nrows = shapes[si][1], nb = ncols / 32;
        const long mat = (long)nrows * nb * 18;
        const int ncopies = (int)(big / mat) + 1;
        uint8_t *aos = malloc(mat), *soa = malloc(mat);
        uint8_t *act = malloc(nb * 36), *acts = malloc(nb * 36);
        float *ref = malloc(sizeof(float) * nrows), *out = malloc(sizeof(float) * nrows);
        q4_0_case(ncols, nrows, si + 1, aos, act, ref);
        // The split layouts of the same bytes: codes then scales, per row.
        for (int r = 0; r < nrows; ++r)
            for (int b = 0; b < nb; ++b) {
                const uint8_t *blk = aos + ((long)r * nb + b) * 18;
                memcpy(soa + (long)r * nb * 18 + (long)b * 16, blk + 2, 16);
                memcpy(soa + (long)r * nb * 18 + (long)nb * 16 + b * 2, blk, 2);
            }
        for (int b = 0; b < nb; ++b) {
            memcpy(acts + b * 32, act + b * 36 + 4, 32);
            memcpy(acts + nb * 32 + b * 4, act + b * 36, 4);
        }
        cl_mem wa = clCreateBuffer(ctx, CL_MEM_READ_ONLY, mat * ncopies, NULL, &e);
        cl_mem ws = clCreateBuffer(ctx, CL_MEM_READ_ONLY, mat * ncopies, NULL, &e);
        for (int c = 0; c < ncopies; ++c) {
            clEnqueueWriteBuffer(q, wa, CL_TRUE, mat * c, mat, aos, 0, NULL, NULL);
            clEnqueueWriteBuffer(q, ws, CL_TRUE, mat * c, mat, soa, 0, NULL, NULL);
        }
        cl_mem ba = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nb * 36, act, &e);
        cl_mem bs = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nb * 36, acts, &e);
        cl_mem bd = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * nrows, NULL, &e);
        struct { const char *kernel; int rows, unroll, warps, split_act; } vs[] = {
            {"aos", 2, 2, 4, 0}, {"aos", 4, 2, 4, 0}, {"aos", 8, 2, 4, 0}, {"aos", 4, 2, 2, 0},
            {"aos", 2, 2, 16, 0}, {"aos", 8, 2, 1, 0},
            {"aos", 2, 4, 4, 0}, {"aos", 1, 4, 4, 0}, {"aos", 4, 4, 4, 0}, {"aos", 2, 8, 4, 0},
            {"soa", 2, 4, 4, 0}, {"soa", 1, 4, 4, 0}, {"soa", 4, 4, 4, 0}, {"soa", 2, 8, 4, 0},
            {"soa", 2, 4, 4, 1}, {"soa", 4, 4, 4, 1}, {"soa", 2, 4, 8, 1}, {"soa", 1, 4, 2, 1},
            {"soa", 2, 2, 4, 1}, {"soa", 4, 2, 2, 1},
        };
        printf("== %d x %d Q4_0 (%.1f MB, %d copies)\n", ncols, nrows, mat / 1e6, ncopies);
        for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; ++vi) {
            char opts[256];
            snprintf(opts, sizeof opts, "-DROWS=%d -DUNROLL=%d %s %s", vs[vi].rows, vs[vi].unroll,
                     vs[vi].split_act ? "-DSPLIT_ACT" : "", nv ? "-DNV" : "");
            cl_program pr = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
            if (clBuildProgram(pr, 1, &d, opts, NULL, NULL)) {
                char log[8192];
                clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
                printf("build failed: %s\n", log);
                return 1;
            }
            cl_kernel k = clCreateKernel(pr, vs[vi].kernel, &e);
            const int soa_w = vs[vi].kernel[0] == 's';
            clSetKernelArg(k, 1, sizeof(cl_mem), vs[vi].split_act ? &bs : &ba);
            clSetKernelArg(k, 2, sizeof(cl_mem), &bd);
            clSetKernelArg(k, 3, sizeof(int), &ncols);
            clSetKernelArg(k, 4, sizeof(int), &nrows);
            const size_t local = 32 * vs[vi].warps;
            const size_t rows_wg = vs[vi].warps * vs[vi].rows;
            const size_t global = (nrows + rows_wg - 1) / rows_wg * local;
            const int iters = 200;
            double gpu = 0;
            cl_event ev[200];
            for (int it = 0; it < iters; ++it) {
                cl_buffer_region reg = {mat * (it % ncopies), mat};
                cl_mem sub = clCreateSubBuffer(soa_w ? ws : wa, 0, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
                clSetKernelArg(k, 0, sizeof(cl_mem), &sub);
                clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev[it]);
                clReleaseMemObject(sub);
            }
            clFinish(q);
            for (int it = 10; it < iters; ++it) {
                cl_ulong t0, t1;
                clGetEventProfilingInfo(ev[it], CL_PROFILING_COMMAND_START, 8, &t0, NULL);
                clGetEventProfilingInfo(ev[it], CL_PROFILING_COMMAND_END, 8, &t1, NULL);
                gpu += (t1 - t0) / 1e3;
                clReleaseEvent(ev[it]);
            }
            gpu /= iters - 10;
            clEnqueueReadBuffer(q, bd, CL_TRUE, 0, sizeof(float) * nrows, out, 0, NULL, NULL);
            double err = 0, mag = 0;
            for (int r = 0; r < nrows; ++r) {
                err = fmax(err, fabs(out[r] - ref[r]));
                mag = fmax(mag, fabs(ref[r]));
            }
            printf("%-4s rows/warp %d unroll %d warps/wg %d act %-5s  %7.2f us  %6.0f GB/s  rel err %.1e%s\n",
                   vs[vi].kernel, vs[vi].rows, vs[vi].unroll, vs[vi].warps, vs[vi].split_act ? "split" : "ggml",
                   gpu, mat / gpu / 1e3, err / mag, err / mag > 1e-3 ? "  WRONG" : "");
            clReleaseKernel(k);
            clReleaseProgram(pr);
        }
        print_readbw(ctx, d, q, wa, bd, mat, ncopies);
        clReleaseMemObject(wa);
        clReleaseMemObject(ws);
        clReleaseMemObject(ba);
        clReleaseMemObject(bs);
        clReleaseMemObject(bd);
        free(aos); free(soa); free(act); free(acts); free(ref); free(out);
    }
    return 0;
}
