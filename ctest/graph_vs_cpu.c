/* A small graph (Q8_0 matmul, RMS norm, softmax, broadcast add, SiLU) computed
 * through ggml on POLYCL0 and on ggml's CPU backend: results must agree. Also
 * checks that a device allocation the device refuses gives NULL, not an abort. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "vs_cpu.h"

enum { K = 256, M = 48, N = 3 };

struct graph {
    struct ggml_context *ctx;
    struct ggml_tensor *w, *x, *bias, *out;
    struct ggml_cgraph *gf;
    ggml_backend_buffer_t buf;
};

static void build(struct graph *g, ggml_backend_t backend) {
    struct ggml_init_params p = {ggml_tensor_overhead() * 32 + ggml_graph_overhead(), NULL, true};
    g->ctx = ggml_init(p);
    g->w = ggml_new_tensor_2d(g->ctx, GGML_TYPE_Q8_0, K, M);
    g->x = ggml_new_tensor_2d(g->ctx, GGML_TYPE_F32, K, N);
    g->bias = ggml_new_tensor_1d(g->ctx, GGML_TYPE_F32, M);
    struct ggml_tensor *y = ggml_mul_mat(g->ctx, g->w, g->x);
    y = ggml_rms_norm(g->ctx, y, 1e-5f);
    y = ggml_add(g->ctx, y, g->bias);
    y = ggml_silu(g->ctx, y);
    g->out = ggml_soft_max_ext(g->ctx, y, NULL, 0.5f, 0.0f);
    g->gf = ggml_new_graph(g->ctx);
    ggml_build_forward_expand(g->gf, g->out);
    g->buf = ggml_backend_alloc_ctx_tensors(g->ctx, backend);
}

static void fill(struct graph *g, const float *w, const float *x, const float *bias) {
    size_t wbytes = ggml_row_size(GGML_TYPE_Q8_0, K) * M;
    void *q = malloc(wbytes);
    ggml_quantize_chunk(GGML_TYPE_Q8_0, w, q, 0, M, K, NULL);
    ggml_backend_tensor_set(g->w, q, 0, wbytes);
    ggml_backend_tensor_set(g->x, x, 0, sizeof(float) * K * N);
    ggml_backend_tensor_set(g->bias, bias, 0, sizeof(float) * M);
    free(q);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    ggml_backend_dev_t dev;
    ggml_backend_t pc, cpu;
    if (!open_polycl_and_cpu(argv[1], &dev, &pc, &cpu)) return 1;

    /* An allocation the device refuses: NULL and a log line, no abort. */
    ggml_backend_buffer_t huge = ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(dev), (size_t)1 << 52);
    if (huge != NULL) {
        fprintf(stderr, "a 4 PiB allocation succeeded\n");
        return 1;
    }

    float *w = malloc(sizeof(float) * K * M), *x = malloc(sizeof(float) * K * N), bias[M];
    srand(7);
    for (int i = 0; i < K * M; i++) w[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < K * N; i++) x[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    for (int i = 0; i < M; i++) bias[i] = (float)i / M;

    struct graph a, b;
    build(&a, pc);
    build(&b, cpu);
    fill(&a, w, x, bias);
    fill(&b, w, x, bias);
    if (ggml_backend_graph_compute(pc, a.gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "POLYCL0 compute failed\n");
        return 1;
    }
    ggml_backend_graph_compute(cpu, b.gf);
    float ra[M * N], rb[M * N];
    ggml_backend_tensor_get(a.out, ra, 0, sizeof ra);
    ggml_backend_tensor_get(b.out, rb, 0, sizeof rb);
    double err = nmse(ra, rb, M * N);
    printf("POLYCL0 vs CPU: nmse %.3g (out[0] %f vs %f)\n", err, ra[0], rb[0]);
    ggml_backend_buffer_free(a.buf);
    ggml_backend_buffer_free(b.buf);
    ggml_free(a.ctx);
    ggml_free(b.ctx);
    ggml_backend_free(pc);
    ggml_backend_free(cpu);
    free(w);
    free(x);
    return err < 1e-6 ? 0 : 1;
}
