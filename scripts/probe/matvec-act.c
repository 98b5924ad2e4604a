// GLU-shaped decode matvecs (gate and up rows of Q4_0 against one Q8_1
// activation row, silu(gate) * up out) by how a work-group is laid out (row
// pairs a warp in sequence, warps a group, unroll), where the activations come
// from (global memory, or staged in local memory once a group) and how a
// block's code bytes are loaded (2-byte loads, or 4-byte words shifted
// together), and whether its scalars are kernel arguments or come from a
// constant buffer (PK). Checks each variant against a host reference and prints its time
// per launch from profiling events and from a chain of launches without
// events (what a launch costs back to back), cycling through enough weight
// copies that L2 holds none. docs/perf.md step 25 has the H200's figures.
// Packed slots are cold in polycl's decode (each launch has its own slots,
// read once a token with gigabytes of weights streamed in between): `cold`
// gives each weight copy its own slot buffer, `hint` (NVIDIA) loads the slots
// with an L2 evict_last policy, which may keep them in L2 from token to token.
// PK_ONLY=1 runs only the first shape's packed-slot variants.
// `q8` makes the Q8_1 blocks of the result that the down projection reads,
// as polycl's GLU kernel does: `own` where a group's rows are whole 32-row
// blocks (one work-item quantizes each after a barrier), `last` where they
// are not (the last group of a block to count itself done quantizes it, the
// fa_split pattern), to weigh one row pair a warp against that cost.
// Q8_ONLY=1 runs only the first shape's q8 variants.
// Build: cc -O2 matvec-act.c -lOpenCL -lm
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
    "inline int ld2(const global char *p) { ushort2 u = vload2(0, (const global ushort *)p); return (int)u.x | ((int)u.y << 16); }\n"
    "inline int blk(int4 q, int8 a) { int s = 0;\n"
    "  s = dot4(q.x & 0x0F0F0F0F, a.s0, s); s = dot4((q.x >> 4) & 0x0F0F0F0F, a.s4, s);\n"
    "  s = dot4(q.y & 0x0F0F0F0F, a.s1, s); s = dot4((q.y >> 4) & 0x0F0F0F0F, a.s5, s);\n"
    "  s = dot4(q.z & 0x0F0F0F0F, a.s2, s); s = dot4((q.z >> 4) & 0x0F0F0F0F, a.s6, s);\n"
    "  s = dot4(q.w & 0x0F0F0F0F, a.s3, s); s = dot4((q.w >> 4) & 0x0F0F0F0F, a.s7, s); return s; }\n"
    // Q4_0 block ib of a row: the 18 bytes from 2-byte loads (W16), or from the
    // aligned 4-byte words around them (W32: 5 words, shifted when the block
    // starts 2 bytes into a word).
    "inline float wblk(const global char *row, int ib, int8 a, float da, float sa) {\n"
    "#ifdef W32\n"
    "  const long o = (long)ib * 18; const global uint *p = (const global uint *)(row + (o & ~3L)); const bool s = (o & 2) != 0;\n"
    "  const uint w0 = p[0], w1 = p[1], w2 = p[2], w3 = p[3], w4 = p[4];\n"
    "  const ushort hb = (ushort)(s ? (w0 >> 16) : (w0 & 0xffff));\n"
    "  const float dw = vload_half(0, (const private half *)&hb);\n"
    "  const int4 qq = s ? (int4)((int)w1, (int)w2, (int)w3, (int)w4)\n"
    "                    : (int4)((int)(w0 >> 16 | w1 << 16), (int)(w1 >> 16 | w2 << 16), (int)(w2 >> 16 | w3 << 16), (int)(w3 >> 16 | w4 << 16));\n"
    "  return dw * (da * (float)blk(qq, a) - 8.0f * sa);\n"
    "#else\n"
    "  const global char *wb = row + ib * 18; const float dw = vload_half(0, (const global half *)wb);\n"
    "  const int4 q = (int4)(ld2(wb + 2), ld2(wb + 6), ld2(wb + 10), ld2(wb + 14));\n"
    "  return dw * (da * (float)blk(q, a) - 8.0f * sa);\n"
    "#endif\n"
    "}\n"
    // GLU-shaped: gate and up matrices, SEQ row pairs a warp in sequence,
    // WARPS warps a group; activations from global (ggml Q8_1) or staged in
    // local memory once per group (ACT_LOCAL).
    // PK=n: the shape and n - 2 more 8-byte scalars (zeros, added into the
    // row addresses so none is dead) come from a constant buffer, the way
    // polycl's packed decode kernels take theirs, instead of kernel arguments.
    "#if defined(PK_HINT) && defined(NV)\n"
    "inline ulong pkld(const global ulong *p, int i) { ulong v; asm volatile(\"{ .reg .b64 pol; createpolicy.fractional.L2::evict_last.b64 pol, 1.0; ld.global.L2::cache_hint.u64 %0, [%1], pol; }\" : \"=l\"(v) : \"l\"(p + i)); return v; }\n"
    "#else\n"
    "inline ulong pkld(const global ulong *p, int i) { return p[i]; }\n"
    "#endif\n"
    "inline void dev_fence(void) { mem_fence(CLK_GLOBAL_MEM_FENCE);\n"
    "#ifdef NV\n"
    "  asm volatile(\"membar.gl;\" ::: \"memory\");\n"
    "#endif\n"
    "}\n"
    // One Q8_1 block (half d, half d * sum, 32 codes) of rows r0..r0 + 31.
    "inline void q8blk(const volatile global float *y, int r0, global char *q8) {\n"
    "  float v[32], amax = 0.0f; for (int i = 0; i < 32; ++i) { v[i] = y[r0 + i]; amax = fmax(amax, fabs(v[i])); }\n"
    "  const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f; global char *o = q8 + (r0 / 32) * 36; int sum = 0;\n"
    "  for (int i = 0; i < 32; ++i) { const int q = (int)rint(v[i] * id); o[4 + i] = (char)q; sum += q; }\n"
    "  vstore_half(d, 0, (global half *)o); vstore_half(d * (float)sum, 1, (global half *)o); }\n"
    "kernel void glu(const global char *wg0, const global char *wu0, const global char *act, global float *dst, int ncols_a, int nrows_a, const global ulong *restrict pk, global char *q8, volatile global uint *cnt) {\n"
    "#if PK > 0\n"
    "  const int ncols = (int)pkld(pk, 0), nrows = (int)pkld(pk, 1); long z = 0; for (int i = 2; i < PK; ++i) z += (long)pkld(pk, i);\n"
    "#else\n"
    "  const int ncols = ncols_a, nrows = nrows_a; const long z = 0;\n"
    "#endif\n"
    "  const global char *wg = wg0 + z, *wu = wu0 + z;\n"
    "  const int lane = get_local_id(0) % 32, warp = get_local_id(0) / 32; local float scr[1024];\n"
    "  const int nb = ncols / 32; const long rb = (long)nb * 18;\n"
    "#ifdef ACT_LOCAL\n"
    "  local int al[ACT_LOCAL / 4];\n"
    "  for (int i = get_local_id(0); i < nb * 9; i += get_local_size(0)) al[i] = ((const global int *)act)[i];\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "#define ASP local\n"
    "  const local char *ap = (const local char *)al;\n"
    "#else\n"
    "#define ASP global\n"
    "  const global char *ap = act;\n"
    "#endif\n"
    "  for (int k = 0; k < SEQ; ++k) {\n"
    "    const int r = (get_group_id(0) * WARPS + warp) * SEQ + k; const int rr = min(r, nrows - 1);\n"
    "    const global char *g = wg + rr * rb, *u = wu + rr * rb; float sg = 0.0f, su = 0.0f;\n"
    "    _Pragma(\"unroll UNROLL\") for (int ib = lane; ib < nb; ib += 32) {\n"
    "      const ASP char *ab = ap + ib * 36; const float da = vload_half(0, (const ASP half *)ab), sa = vload_half(1, (const ASP half *)ab);\n"
    "      const int8 a = vload8(0, (const ASP int *)(ab + 4));\n"
    "      sg += wblk(g, ib, a, da, sa); su += wblk(u, ib, a, da, sa); }\n"
    "    const float tg = wsum(sg, scr + warp * 32), tu = wsum(su, scr + warp * 32);\n"
    "    if (lane == 0 && r < nrows) dst[r] = tg / (1.0f + exp(-tg)) * tu; }\n"
    "#if Q8 == 1\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "  const int r0 = get_group_id(0) * WARPS * SEQ;\n"
    "  if (get_local_id(0) < WARPS * SEQ / 32 && r0 + 32 * (int)get_local_id(0) < nrows) q8blk(dst, r0 + 32 * get_local_id(0), q8);\n"
    "#elif Q8 == 2\n"
    "  local int last; const int r0 = get_group_id(0) * WARPS * SEQ, blk = r0 / 32;\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "  if (get_local_id(0) == 0) { dev_fence(); last = atomic_inc(&cnt[blk]) == 32 / (WARPS * SEQ) - 1; if (last) { cnt[blk] = 0; dev_fence(); } }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (last && get_local_id(0) == 0) q8blk(dst, blk * 32, q8);\n"
    "#endif\n"
    "}\n";

int main(int argc, char **argv) {
    cl_device_id d;
    cl_context ctx;
    cl_command_queue q;
    cl_int e;
    const int nv = mv_open(&d, &ctx, &q);
    const long big = argc > 1 ? atol(argv[1]) : (1L << 30);  // bytes of weights cycled through
    const int shapes[][2] = {{4096, 22016}, {4096, 12288}, {11008, 4096}, {4096, 4096}, {2048, 11264}};
    for (int si = 0; si < 5; ++si) {
        const int ncols = shapes[si][0], nrows = shapes[si][1], nb = ncols / 32;
        const long mat = (long)nrows * nb * 18;
        const int ncopies = (int)(big / mat) + 1 > 64 ? 64 : (int)(big / mat) + 1;
        uint8_t *aos = malloc(mat), *act = malloc(nb * 36);
        float *ref = malloc(sizeof(float) * nrows), *out = malloc(sizeof(float) * nrows);
        q4_0_case(ncols, nrows, si + 1, aos, act, ref);
        // 64 bytes of slack: a variant's 4-byte words may end past the last block.
        cl_mem wa = clCreateBuffer(ctx, CL_MEM_READ_ONLY, mat * ncopies + 64, NULL, &e);
        for (int c = 0; c < ncopies; ++c) clEnqueueWriteBuffer(q, wa, CL_TRUE, mat * c, mat, aos, 0, NULL, NULL);
        cl_mem ba = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nb * 36, act, &e);
        cl_mem bd = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * nrows, NULL, &e);
        // Q8_1 blocks of the result and one counter a block, zero.
        cl_mem bq8 = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)nrows / 32 * 36 + 36, NULL, &e);
        cl_uint *zeros = calloc((size_t)nrows / 32 + 1, sizeof(cl_uint));
        cl_mem bcnt = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(cl_uint) * (nrows / 32 + 1), zeros, &e);
        free(zeros);
        struct { int seq, warps, unroll, act_local, w32, pk, cold, hint, q8; } vs[] = {
            {4, 8, 4, 0, 0, 0}, {4, 8, 4, 1, 0, 0}, {4, 8, 4, 0, 1, 0}, {4, 8, 4, 1, 1, 0},
            {1, 8, 4, 0, 0, 0}, {1, 8, 4, 1, 0, 0}, {1, 8, 4, 1, 1, 0}, {2, 8, 4, 1, 1, 0},
            {4, 8, 2, 1, 1, 0}, {4, 4, 4, 1, 1, 0}, {1, 4, 4, 1, 1, 0}, {8, 4, 4, 1, 1, 0},
            // The GLU kernel's and the group kernels' frames with scalars from a
            // constant buffer: 2, and 64 (the GLU kernel reads ~60).
            {4, 8, 4, 0, 1, 2}, {4, 8, 4, 0, 1, 64}, {1, 4, 4, 0, 1, 0}, {1, 4, 4, 0, 1, 64},
            // The GLU kernel as polycl builds it (unroll 2), ~20 slots before its
            // weights' addresses are known: none, shared (warm), its own (cold),
            // its own loaded with evict_last.
            {4, 8, 2, 0, 1, 0}, {4, 8, 2, 0, 1, 20, 0}, {4, 8, 2, 0, 1, 20, 1}, {4, 8, 2, 0, 1, 20, 1, 1},
            {1, 4, 4, 0, 1, 20, 1}, {1, 4, 4, 0, 1, 20, 1, 1},
            // With the Q8_1 blocks: the GLU kernel's frame (its own blocks),
            // one row pair a warp (the block's last group).
            {4, 8, 2, 0, 1, 0, 0, 0, 1}, {4, 8, 4, 0, 1, 0, 0, 0, 1}, {1, 4, 4, 0, 1, 0, 0, 0, 2},
            {1, 4, 2, 0, 1, 0, 0, 0, 2}, {1, 8, 4, 0, 1, 0, 0, 0, 2},
            // 32 rows a group (its own blocks) from wider groups with fewer
            // row pairs a warp in sequence: 16 warps of two, 32 warps of one.
            {2, 16, 4, 0, 1, 0, 0, 0, 1}, {2, 16, 2, 0, 1, 0, 0, 0, 1}, {1, 32, 4, 0, 1, 0, 0, 0, 1},
            {1, 32, 2, 0, 1, 0, 0, 0, 1},
        };
        const int q8_only = getenv("Q8_ONLY") && atoi(getenv("Q8_ONLY"));
        if (q8_only && si > 0) break;
        const int pk_only = getenv("PK_ONLY") && atoi(getenv("PK_ONLY"));
        if (pk_only && si > 0) break;
        cl_ulong pk_host[64] = {(cl_ulong)ncols, (cl_ulong)(nrows / 2)};
        cl_mem bpk = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof pk_host, pk_host, &e);
        // One slot buffer a weight copy, for the cold variants.
        cl_mem cpk[64];
        for (int c = 0; c < 64; ++c)
            cpk[c] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof pk_host, pk_host, &e);
        const int half_rows = nrows / 2;
        printf("== %d x %d Q4_0 as gate + up of %d rows (%.1f MB, %d copies)\n", ncols, nrows, half_rows, mat / 1e6, ncopies);
        for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; ++vi) {
            if (pk_only && (vi < 16 || vs[vi].q8)) continue;
            if (q8_only && !vs[vi].q8) continue;
            if (vs[vi].q8 && half_rows % 32) continue;
            if (vs[vi].hint && !nv) continue;
            char opts[256];
            snprintf(opts, sizeof opts, "-DSEQ=%d -DWARPS=%d -DUNROLL=%d -DPK=%d %s %s %s %s -DQ8=%d", vs[vi].seq, vs[vi].warps,
                     vs[vi].unroll, vs[vi].pk, vs[vi].act_local ? "-DACT_LOCAL=16384" : "", vs[vi].w32 ? "-DW32" : "",
                     nv ? "-DNV" : "", vs[vi].hint ? "-DPK_HINT" : "", vs[vi].q8);
            if (vs[vi].act_local && nb * 36 > 16384) continue;
            cl_program pr = mv_build(ctx, d, SRC, opts);
            if (!pr) continue;
            cl_kernel k = clCreateKernel(pr, "glu", &e);
            clSetKernelArg(k, 2, sizeof(cl_mem), &ba);
            clSetKernelArg(k, 3, sizeof(cl_mem), &bd);
            clSetKernelArg(k, 4, sizeof(int), &ncols);
            clSetKernelArg(k, 5, sizeof(int), &half_rows);
            clSetKernelArg(k, 6, sizeof(cl_mem), &bpk);
            {   // A variant that writes no blocks must not pass on the last one's.
                const cl_uint z = 0;
                clEnqueueFillBuffer(q, bq8, &z, 4, 0, (size_t)nrows / 32 * 36 + 36, 0, NULL, NULL);
            }
            clSetKernelArg(k, 7, sizeof(cl_mem), &bq8);
            clSetKernelArg(k, 8, sizeof(cl_mem), &bcnt);
            const size_t local = 32 * vs[vi].warps;
            const size_t rows_wg = vs[vi].warps * vs[vi].seq;
            const size_t global = (half_rows + rows_wg - 1) / rows_wg * local;
            const int iters = getenv("ITERS") ? atoi(getenv("ITERS")) : 200;
            cl_mem subs[2][64];
            for (int c = 0; c < ncopies && c < 64; ++c)
                for (int h = 0; h < 2; ++h) {
                    cl_buffer_region reg = {mat * c + (size_t)h * half_rows * nb * 18, (size_t)half_rows * nb * 18};
                    subs[h][c] = clCreateSubBuffer(wa, 0, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
                }
            double gpu = 0;
            cl_event ev[200];
            for (int it = 0; it < iters; ++it) {
                clSetKernelArg(k, 0, sizeof(cl_mem), &subs[0][it % ncopies]);
                clSetKernelArg(k, 1, sizeof(cl_mem), &subs[1][it % ncopies]);
                if (vs[vi].cold) clSetKernelArg(k, 6, sizeof(cl_mem), &cpk[it % ncopies % 64]);
                clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev[it]);
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
            // The same launches back to back without events: what one costs in a chain.
            struct timespec c0, c1;
            clock_gettime(CLOCK_MONOTONIC, &c0);
            for (int it = 0; it < iters; ++it) {
                clSetKernelArg(k, 0, sizeof(cl_mem), &subs[0][it % ncopies]);
                clSetKernelArg(k, 1, sizeof(cl_mem), &subs[1][it % ncopies]);
                if (vs[vi].cold) clSetKernelArg(k, 6, sizeof(cl_mem), &cpk[it % ncopies % 64]);
                clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL);
            }
            clFinish(q);
            clock_gettime(CLOCK_MONOTONIC, &c1);
            const double chain = ((c1.tv_sec - c0.tv_sec) * 1e9 + (c1.tv_nsec - c0.tv_nsec)) / 1e3 / iters;
            for (int c = 0; c < ncopies && c < 64; ++c) { clReleaseMemObject(subs[0][c]); clReleaseMemObject(subs[1][c]); }
            clEnqueueReadBuffer(q, bd, CL_TRUE, 0, sizeof(float) * half_rows, out, 0, NULL, NULL);
            double err = 0, mag = 0;
            for (int r = 0; r < half_rows; ++r) {
                const double g = ref[r], u = ref[r + half_rows], y = g / (1.0 + exp(-g)) * u;
                err = fmax(err, fabs(out[r] - y));
                mag = fmax(mag, fabs(y));
            }
            int q8_bad = 0;
            if (vs[vi].q8) {
                uint8_t *qb = malloc((size_t)half_rows / 32 * 36);
                clEnqueueReadBuffer(q, bq8, CL_TRUE, 0, (size_t)half_rows / 32 * 36, qb, 0, NULL, NULL);
                for (int b = 0; b < half_rows / 32; ++b) {
                    float amax = 0;
                    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(out[32 * b + i]));
                    uint16_t h;
                    memcpy(&h, qb + 36 * b, 2);
                    const int ex = (h >> 10) & 31, mant = h & 1023;
                    const float dh = ex ? ldexpf(1.0f + mant / 1024.0f, ex - 15) : ldexpf(mant / 1024.0f, -14);
                    if (fabsf(dh - amax / 127.0f) > 2e-3f * amax / 127.0f + 1e-30f) q8_bad++;
                }
                free(qb);
            }
            printf("seq %d warps %d unroll %d act %-6s w %-3s pk %2d %-9s q8 %-4s event %7.2f us %6.0f GB/s  chain %7.2f us %6.0f GB/s  rel err %.1e%s\n",
                   vs[vi].seq, vs[vi].warps, vs[vi].unroll, vs[vi].act_local ? "local" : "global", vs[vi].w32 ? "u32" : "u16", vs[vi].pk,
                   !vs[vi].pk ? "" : vs[vi].hint ? "cold+hint" : vs[vi].cold ? "cold" : "warm",
                   vs[vi].q8 == 1 ? "own" : vs[vi].q8 == 2 ? "last" : "",
                   gpu, mat / gpu / 1e3, chain, mat / chain / 1e3, err / mag,
                   err / mag > 1e-3 || q8_bad ? "  WRONG" : "");
            clReleaseKernel(k);
            clReleaseProgram(pr);
        }
        print_readbw(ctx, d, q, wa, bd, mat, ncopies);
        clReleaseMemObject(wa);
        clReleaseMemObject(ba);
        clReleaseMemObject(bd);
        clReleaseMemObject(bpk);
        clReleaseMemObject(bq8);
        clReleaseMemObject(bcnt);
        for (int c = 0; c < 64; ++c) clReleaseMemObject(cpk[c]);
        free(aos); free(act); free(ref); free(out);
    }
    return 0;
}
