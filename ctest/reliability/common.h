/* Shared by the reliability C tests: the plugin dlopen'ed the way a ggml host
 * loads it, direct access to its vtables (ggml-backend-impl.h), CHECK macros,
 * polycl_memory_stats, and a small decode step built with ggml. */
#ifndef POLYCL_RELIABILITY_COMMON_H
#define POLYCL_RELIABILITY_COMMON_H

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-alloc.h"
#include "ggml-backend-impl.h"
#include "ggml-impl.h" /* struct ggml_cgraph, to break a graph on purpose */
#include "ggml-backend.h"
#include "ggml.h"
#include "polycl.h"

static int g_failures = 0;
static int g_cases = 0;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        g_cases++;                                                                        \
        if (!(cond)) {                                                                    \
            g_failures++;                                                                 \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
        }                                                                                 \
    } while (0)

#define REQUIRE(cond, ...)                                                                \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: REQUIRE(%s) failed: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static int finish(const char *what) {
    printf("%s: %d checks, %d failed\n", what, g_cases, g_failures);
    return g_failures ? 1 : 0;
}

typedef struct {
    void *lib;
    ggml_backend_reg_t reg;
    ggml_backend_dev_t dev;
    ggml_backend_buffer_type_t buft;
    enum PolyclStatus (*stats)(PolyclMemoryStats *);
    int init_refused; /* ggml_backend_init answered NULL once (a forced panic) */
} Plugin;

/* dlopen + ggml_backend_init, as ggml_backend_load does, but without
 * registering: the tests call the vtables themselves. */
static Plugin plugin_open(const char *path) {
    Plugin p;
    memset(&p, 0, sizeof p);
    p.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(p.lib, "dlopen %s: %s", path, dlerror());
    ggml_backend_reg_t (*init)(void) = (ggml_backend_reg_t(*)(void))dlsym(p.lib, "ggml_backend_init");
    REQUIRE(init, "no ggml_backend_init");
    p.reg = init();
    if (!p.reg) {
        p.init_refused = 1; /* a forced panic in init answers NULL once */
        p.reg = init();
    }
    REQUIRE(p.reg, "ggml_backend_init returned NULL");
    *(void **)&p.stats = dlsym(p.lib, "polycl_memory_stats");
    REQUIRE(p.stats, "no polycl_memory_stats");
    return p;
}

static void plugin_devices(Plugin *p) {
    p->dev = p->reg->iface.get_device(p->reg, 0);
    REQUIRE(p->dev, "no POLYCL0");
    p->buft = p->dev->iface.get_buffer_type(p->dev);
    REQUIRE(p->buft, "no buffer type");
}

static PolyclMemoryStats plugin_stats(Plugin *p) {
    PolyclMemoryStats s;
    memset(&s, 0, sizeof s);
    REQUIRE(p->stats(&s) == POLYCL_STATUS_OK, "polycl_memory_stats failed");
    return s;
}

static ggml_backend_t backend_on(ggml_backend_dev_t dev) {
    ggml_backend_t b = dev->iface.init_backend(dev, NULL);
    REQUIRE(b, "init_backend failed");
    return b;
}

static uint64_t g_seed = 12345;
static float frand(void) {
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_seed >> 40) & 0xffff) / 65536.0f - 0.5f;
}

/* A small graph: out = softmax(silu(rms_norm(W x) + b)), W Q8_0. The
 * tensors live in one buffer of `buft`. */
enum { SK = 256, SM = 64 };
typedef struct {
    struct ggml_context *ctx;
    struct ggml_tensor *w, *x, *b, *out;
    struct ggml_cgraph *gf;
    ggml_backend_buffer_t buf;
} Small;

static int small_build(Small *s, ggml_backend_buffer_type_t buft) {
    struct ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true};
    s->ctx = ggml_init(ip);
    s->w = ggml_new_tensor_2d(s->ctx, GGML_TYPE_Q8_0, SK, SM);
    s->x = ggml_new_tensor_2d(s->ctx, GGML_TYPE_F32, SK, 1);
    s->b = ggml_new_tensor_1d(s->ctx, GGML_TYPE_F32, SM);
    struct ggml_tensor *y = ggml_mul_mat(s->ctx, s->w, s->x);
    y = ggml_rms_norm(s->ctx, y, 1e-5f);
    y = ggml_add(s->ctx, y, s->b);
    y = ggml_silu(s->ctx, y);
    s->out = ggml_soft_max(s->ctx, y);
    s->gf = ggml_new_graph(s->ctx);
    ggml_build_forward_expand(s->gf, s->out);
    s->buf = ggml_backend_alloc_ctx_tensors_from_buft(s->ctx, buft);
    return s->buf != NULL;
}

static void small_fill(Small *s) {
    float w[SK * SM], x[SK], b[SM];
    uint64_t keep = g_seed;
    g_seed = 99;
    for (int i = 0; i < SK * SM; i++) w[i] = frand();
    for (int i = 0; i < SK; i++) x[i] = frand() * 2;
    for (int i = 0; i < SM; i++) b[i] = frand();
    g_seed = keep;
    static unsigned char q[SM * (SK / 32) * 34];
    ggml_quantize_chunk(GGML_TYPE_Q8_0, w, q, 0, SM, SK, NULL);
    ggml_backend_tensor_set(s->w, q, 0, sizeof q);
    ggml_backend_tensor_set(s->x, x, 0, sizeof x);
    ggml_backend_tensor_set(s->b, b, 0, sizeof b);
}

static void small_free(Small *s) {
    if (s->buf) ggml_backend_buffer_free(s->buf);
    ggml_free(s->ctx);
    memset(s, 0, sizeof *s);
}

/* ggml's CPU backend on one thread: its default threads spin at barriers,
 * which on a 2-core machine shared with PoCL's threads costs 100x. */
static ggml_backend_t cpu_backend(void) {
    ggml_backend_t cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    REQUIRE(cpu, "no CPU backend (ggml_backend_load_all_from_path first)");
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(cpu));
    void (*set_threads)(ggml_backend_t, int) =
        (void (*)(ggml_backend_t, int))ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
    if (set_threads) set_threads(cpu, 1);
    return cpu;
}

/* The small graph's output computed by ggml's CPU backend (the oracle). */
static void small_reference(float *out) {
    ggml_backend_t cpu = cpu_backend();
    Small s;
    REQUIRE(small_build(&s, ggml_backend_get_default_buffer_type(cpu)), "cpu alloc");
    small_fill(&s);
    REQUIRE(ggml_backend_graph_compute(cpu, s.gf) == GGML_STATUS_SUCCESS, "cpu compute");
    ggml_backend_tensor_get(s.out, out, 0, sizeof(float) * SM);
    small_free(&s);
    ggml_backend_free(cpu);
}

/* Computes the small graph on `be` (fresh tensors in `buft`): the status,
 * and whether the output matches `ref` when it succeeded. */
static enum ggml_status small_run(ggml_backend_t be, ggml_backend_buffer_type_t buft, const float *ref, int *matches) {
    Small s;
    *matches = 0;
    if (!small_build(&s, buft)) {
        ggml_free(s.ctx);
        return GGML_STATUS_ALLOC_FAILED;
    }
    small_fill(&s);
    enum ggml_status st = ggml_backend_graph_compute(be, s.gf);
    if (st == GGML_STATUS_SUCCESS) {
        float out[SM];
        ggml_backend_tensor_get(s.out, out, 0, sizeof out);
        double err = 0, n = 0;
        for (int i = 0; i < SM; i++) {
            err += (out[i] - ref[i]) * (double)(out[i] - ref[i]);
            n += ref[i] * (double)ref[i];
        }
        *matches = err / n < 1e-6;
        if (!*matches) fprintf(stderr, "small graph: nmse %g\n", err / n);
    }
    small_free(&s);
    return st;
}

#endif
