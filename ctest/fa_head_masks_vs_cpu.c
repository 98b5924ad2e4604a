/* FLASH_ATTN_EXT with a mask that differs by head (mask ne[2] = the query
 * heads, or 2 of them taken in turn), computed on POLYCL0 and on ggml's CPU
 * backend: results must agree. test-backend-ops only builds masks shared by
 * all heads, so a kernel that took head 0's mask row for every head (or for
 * every head of a group, as the grouped-query kernels take several query
 * heads of one KV head a work-group) would pass there and fail here.
 *
 *   fa_head_masks_vs_cpu PLUGIN [--kv q8_0|q4_0] [KERNEL...]
 *
 * Each KERNEL named must appear in polycl's plan log (POLYCL_LOG=1), so a run
 * under some POLYCL_FA_* settings proves it reached the kernels it is for.
 * --kv: K and V in that type (quantized from the same values) instead of
 * F16, for the kernels that read quantized caches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "vs_cpu.h"

/* ggml's log, kept whole for the KERNEL check and passed on to stderr. */
static char *log_text;
static size_t log_len, log_cap;

static void keep_log(enum ggml_log_level level, const char *text, void *user_data) {
    (void)user_data;
    size_t n = strlen(text);
    if (log_len + n + 1 > log_cap) {
        size_t cap = (log_len + n + 1) * 2;
        char *grown = realloc(log_text, cap);
        if (!grown) return;
        log_text = grown;
        log_cap = cap;
    }
    memcpy(log_text + log_len, text, n + 1);
    log_len += n;
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

/* The kernel_* names the log holds, each once (for a failed KERNEL check). */
static void print_kernels_launched(void) {
    printf("kernels launched:");
    for (const char *p = log_text; p && (p = strstr(p, "kernel_")); p++) {
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
        const char *seen = log_text;
        while ((seen = strstr(seen, "kernel_")) < p) {
            if (strspn(seen, "abcdefghijklmnopqrstuvwxyz0123456789_") == n && !strncmp(seen, p, n)) break;
            seen++;
        }
        if (seen == p) printf(" %.*s", (int)n, p);
    }
    printf("\n");
}

struct fa_case {
    int d, n_head, n_kv_head, kv, nb, mask_heads;
    enum ggml_type kv_type;
};

struct fa_graph {
    struct ggml_context *ctx;
    struct ggml_tensor *q, *k, *v, *mask, *out;
    struct ggml_cgraph *gf;
    ggml_backend_buffer_t buf;
};

static int build(struct fa_graph *g, const struct fa_case *c, ggml_backend_t backend) {
    struct ggml_init_params p = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true};
    g->ctx = ggml_init(p);
    g->q = ggml_new_tensor_4d(g->ctx, GGML_TYPE_F32, c->d, c->nb, c->n_head, 1);
    g->k = ggml_new_tensor_4d(g->ctx, c->kv_type, c->d, c->kv, c->n_kv_head, 1);
    g->v = ggml_new_tensor_4d(g->ctx, c->kv_type, c->d, c->kv, c->n_kv_head, 1);
    g->mask = ggml_new_tensor_4d(g->ctx, GGML_TYPE_F16, c->kv, c->nb, c->mask_heads, 1);
    g->out = ggml_flash_attn_ext(g->ctx, g->q, g->k, g->v, g->mask, 1.0f / sqrtf((float)c->d), 0.0f, 0.0f);
    ggml_prec_set_acc(g->out, GGML_PREC_F32);
    g->gf = ggml_new_graph(g->ctx);
    ggml_build_forward_expand(g->gf, g->out);
    g->buf = ggml_backend_alloc_ctx_tensors(g->ctx, backend);
    return g->buf != NULL;
}

static void release(struct fa_graph *g) {
    ggml_backend_buffer_free(g->buf);
    ggml_free(g->ctx);
}

static float uniform(void) { return (float)rand() / RAND_MAX * 2.0f - 1.0f; }

/* Each mask head hides other keys: a stride-5 comb shifted by the head and
 * the row, and a tail whose length grows with the head (a causal-like end),
 * with small biases elsewhere. Key 0 stays open so no row is all masked. */
static float mask_value(int key, int row, int head, int kv) {
    if (key > 0 && ((key + 3 * head + row) % 5 == 0 || key >= kv - 37 * head)) return -INFINITY;
    return 0.25f * uniform();
}

/* Runs case c on both backends; returns its NMSE, or -1 if either failed. */
static double run_case(const struct fa_case *c, ggml_backend_t pc, ggml_backend_t cpu) {
    size_t nq = (size_t)c->d * c->nb * c->n_head, nkv = (size_t)c->d * c->kv * c->n_kv_head;
    size_t nm = (size_t)c->kv * c->nb * c->mask_heads, no = nq;
    float *q = malloc(sizeof(float) * nq), *a = malloc(sizeof(float) * no), *b = malloc(sizeof(float) * no);
    /* K and V as floats, then in kv_type: kv_bytes each. */
    size_t kv_rows = (size_t)c->kv * c->n_kv_head, kv_bytes = ggml_row_size(c->kv_type, c->d) * kv_rows;
    float *kf = malloc(sizeof(float) * nkv), *vf = malloc(sizeof(float) * nkv);
    void *k = malloc(kv_bytes), *v = malloc(kv_bytes);
    ggml_fp16_t *m = malloc(sizeof(ggml_fp16_t) * nm);
    for (size_t i = 0; i < nq; i++) q[i] = uniform();
    for (size_t i = 0; i < nkv; i++) kf[i] = uniform();
    for (size_t i = 0; i < nkv; i++) vf[i] = uniform();
    if (c->kv_type == GGML_TYPE_F16) {
        ggml_fp32_to_fp16_row(kf, k, (int64_t)nkv);
        ggml_fp32_to_fp16_row(vf, v, (int64_t)nkv);
    } else {
        ggml_quantize_chunk(c->kv_type, kf, k, 0, (int64_t)kv_rows, c->d, NULL);
        ggml_quantize_chunk(c->kv_type, vf, v, 0, (int64_t)kv_rows, c->d, NULL);
    }
    for (int h = 0; h < c->mask_heads; h++)
        for (int r = 0; r < c->nb; r++)
            for (int j = 0; j < c->kv; j++)
                m[((size_t)h * c->nb + r) * c->kv + j] = ggml_fp32_to_fp16(mask_value(j, r, h, c->kv));

    double nmse_out = -1;
    struct fa_graph g[2];
    ggml_backend_t backends[2] = {pc, cpu};
    float *outs[2] = {a, b};
    int made = 0, ok = 1;
    for (int i = 0; i < 2 && ok; i++) {
        ok = build(&g[i], c, backends[i]);
        made = i + 1;
        if (!ok) break;
        ggml_backend_tensor_set(g[i].q, q, 0, sizeof(float) * nq);
        ggml_backend_tensor_set(g[i].k, k, 0, kv_bytes);
        ggml_backend_tensor_set(g[i].v, v, 0, kv_bytes);
        ggml_backend_tensor_set(g[i].mask, m, 0, sizeof(ggml_fp16_t) * nm);
        ok = ggml_backend_graph_compute(backends[i], g[i].gf) == GGML_STATUS_SUCCESS;
        if (ok) ggml_backend_tensor_get(g[i].out, outs[i], 0, sizeof(float) * no);
    }
    if (ok) nmse_out = nmse(a, b, no);
    for (int i = 0; i < made; i++) release(&g[i]);
    free(q);
    free(a);
    free(b);
    free(kf);
    free(vf);
    free(k);
    free(v);
    free(m);
    return nmse_out;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLUGIN [--kv q8_0|q4_0] [KERNEL...]\n", argv[0]);
        return 2;
    }
    enum ggml_type kv_type = GGML_TYPE_F16;
    int first_kernel = 2;
    if (argc > 3 && !strcmp(argv[2], "--kv")) {
        if (!strcmp(argv[3], "q8_0")) kv_type = GGML_TYPE_Q8_0;
        else if (!strcmp(argv[3], "q4_0")) kv_type = GGML_TYPE_Q4_0;
        else {
            fprintf(stderr, "--kv %s: expected q8_0 or q4_0\n", argv[3]);
            return 2;
        }
        first_kernel = 4;
    }
    ggml_log_set(keep_log, NULL);
    ggml_backend_dev_t dev;
    ggml_backend_t pc, cpu;
    if (!open_polycl_and_cpu(argv[1], &dev, &pc, &cpu)) return 1;

    /* Head sizes 64 and 128; 4, 2, 3 and 1 query heads a KV head; caches that
     * take the short, vector and long-cache kernels; decode and 3 rows; a
     * mask a query head and one of 2 taken in turn (head h reads h % 2). */
    static const int shapes[][3] = {{64, 8, 2}, {128, 8, 4}, {64, 8, 4}, {64, 6, 2}, {128, 4, 4}};
    static const int kvs[] = {256, 1024};
    static const int nbs[] = {1, 3};
    srand(11);
    int n = 0, bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t i = 0; i < sizeof kvs / sizeof kvs[0]; i++)
            for (size_t j = 0; j < sizeof nbs / sizeof nbs[0]; j++)
                for (int per_head = 1; per_head >= 0; per_head--) {
                    struct fa_case c = {shapes[s][0], shapes[s][1], shapes[s][2], kvs[i], nbs[j],
                                        per_head ? shapes[s][1] : 2, kv_type};
                    double nmse = run_case(&c, pc, cpu);
                    int ok = nmse >= 0 && nmse < 5e-4;
                    n++;
                    bad += !ok;
                    printf("d=%d heads=%d kv_heads=%d kv=%d nb=%d mask_heads=%d %s: nmse %.3g %s\n", c.d,
                           c.n_head, c.n_kv_head, c.kv, c.nb, c.mask_heads, ggml_type_name(kv_type), nmse,
                           ok ? "ok" : "FAIL");
                }
    int missing = 0;
    for (int i = first_kernel; i < argc; i++)
        if (!log_text || !strstr(log_text, argv[i])) {
            printf("never launched: %s\n", argv[i]);
            missing++;
        }
    if (missing) print_kernels_launched();
    bad += missing;
    printf("%d cases, %d bad\n", n, bad);
    ggml_backend_free(pc);
    ggml_backend_free(cpu);
    free(log_text);
    return bad ? 1 : 0;
}
