/* Long run on the ggml path: STEPS graph computes of a decode step (as
 * llama.cpp runs them: persistent weights and KV cache, a per-step graph
 * whose intermediates ggml-alloc places in a reused buffer) keep polycl's
 * device buffers, device bytes and live plans flat and the process's resident
 * memory bounded.
 *
 *   long_run PLUGIN [STEPS]
 *
 * First half: the same graph every step (KV positions change, shapes do not):
 * the plan cache hits. Second half: the attention reads a view of n_kv rows
 * that cycles through 48 lengths, so plans are built, cached and (past
 * POLYCL_PLAN_CACHE) evicted. Every 97th step is checked against ggml's CPU
 * backend running the same graph. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { C = 64, NCTX = 128, FF = 128 };

typedef struct {
    struct ggml_context *ctx;
    ggml_backend_buffer_t buf;
    struct ggml_tensor *wq, *wk, *wv, *wo, *wg, *wu, *wd, *norm;
    struct ggml_tensor *kc, *vc;
    struct ggml_tensor *x, *pos, *idx, *mask;
} Model;

static void model_init(Model *m, ggml_backend_buffer_type_t buft) {
    struct ggml_init_params ip = {ggml_tensor_overhead() * 32, NULL, true};
    m->ctx = ggml_init(ip);
    struct ggml_tensor **w[] = {&m->wq, &m->wk, &m->wv, &m->wo};
    for (int i = 0; i < 4; i++) *w[i] = ggml_new_tensor_2d(m->ctx, GGML_TYPE_Q8_0, C, C);
    m->wg = ggml_new_tensor_2d(m->ctx, GGML_TYPE_Q8_0, C, FF);
    m->wu = ggml_new_tensor_2d(m->ctx, GGML_TYPE_Q8_0, C, FF);
    m->wd = ggml_new_tensor_2d(m->ctx, GGML_TYPE_F16, FF, C);
    m->norm = ggml_new_tensor_1d(m->ctx, GGML_TYPE_F32, C);
    m->kc = ggml_new_tensor_2d(m->ctx, GGML_TYPE_F16, C, NCTX);
    m->vc = ggml_new_tensor_2d(m->ctx, GGML_TYPE_F16, C, NCTX);
    m->x = ggml_new_tensor_2d(m->ctx, GGML_TYPE_F32, C, 1);
    m->pos = ggml_new_tensor_1d(m->ctx, GGML_TYPE_I32, 1);
    m->idx = ggml_new_tensor_1d(m->ctx, GGML_TYPE_I64, 1);
    m->mask = ggml_new_tensor_2d(m->ctx, GGML_TYPE_F32, NCTX, 1);
    m->buf = ggml_backend_alloc_ctx_tensors_from_buft(m->ctx, buft);
    REQUIRE(m->buf, "model allocation");
    ggml_backend_buffer_clear(m->buf, 0);
    uint64_t keep = g_seed;
    g_seed = 7;
    static float f[C * FF];
    static unsigned char q[FF * (C / 32) * 34];
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < C * C; j++) f[j] = frand() * 0.5f;
        ggml_quantize_chunk(GGML_TYPE_Q8_0, f, q, 0, C, C, NULL);
        ggml_backend_tensor_set(*w[i], q, 0, ggml_nbytes(*w[i]));
    }
    struct ggml_tensor *ff[2] = {m->wg, m->wu};
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < C * FF; j++) f[j] = frand() * 0.5f;
        ggml_quantize_chunk(GGML_TYPE_Q8_0, f, q, 0, FF, C, NULL);
        ggml_backend_tensor_set(ff[i], q, 0, ggml_nbytes(ff[i]));
    }
    static ggml_fp16_t h[FF * C];
    for (int j = 0; j < FF * C; j++) h[j] = ggml_fp32_to_fp16(frand() * 0.5f);
    ggml_backend_tensor_set(m->wd, h, 0, sizeof h);
    for (int j = 0; j < C; j++) f[j] = 1.0f + frand() * 0.1f;
    ggml_backend_tensor_set(m->norm, f, 0, sizeof(float) * C);
    g_seed = keep;
}

static void model_free(Model *m) {
    ggml_backend_buffer_free(m->buf);
    ggml_free(m->ctx);
}

/* One decode step reading the first n_kv cache rows. */
static struct ggml_cgraph *step_graph(struct ggml_context *ctx, Model *m, int n_kv, struct ggml_tensor **out) {
    struct ggml_tensor *h = ggml_mul(ctx, ggml_rms_norm(ctx, m->x, 1e-5f), m->norm);
    struct ggml_tensor *q = ggml_mul_mat(ctx, m->wq, h);
    struct ggml_tensor *k = ggml_mul_mat(ctx, m->wk, h);
    struct ggml_tensor *v = ggml_mul_mat(ctx, m->wv, h);
    q = ggml_rope_ext(ctx, ggml_reshape_3d(ctx, q, 16, C / 16, 1), m->pos, NULL, 16, 0, 0, 10000.0f, 1.0f, 0.0f, 1.0f,
                      32.0f, 1.0f);
    k = ggml_rope_ext(ctx, ggml_reshape_3d(ctx, k, 16, C / 16, 1), m->pos, NULL, 16, 0, 0, 10000.0f, 1.0f, 0.0f, 1.0f,
                      32.0f, 1.0f);
    struct ggml_tensor *kw = ggml_set_rows(ctx, m->kc, ggml_reshape_2d(ctx, k, C, 1), m->idx);
    struct ggml_tensor *vw = ggml_set_rows(ctx, m->vc, v, m->idx);
    struct ggml_tensor *kv = ggml_view_2d(ctx, kw, C, n_kv, kw->nb[1], 0);
    struct ggml_tensor *vv = ggml_view_2d(ctx, vw, C, n_kv, vw->nb[1], 0);
    struct ggml_tensor *mask = ggml_view_2d(ctx, m->mask, n_kv, 1, m->mask->nb[1], 0);
    struct ggml_tensor *s = ggml_mul_mat(ctx, kv, ggml_reshape_2d(ctx, q, C, 1));
    struct ggml_tensor *p = ggml_soft_max_ext(ctx, s, mask, 0.125f, 0.0f);
    struct ggml_tensor *vt = ggml_cont(ctx, ggml_transpose(ctx, ggml_cast(ctx, vv, GGML_TYPE_F32)));
    struct ggml_tensor *a = ggml_mul_mat(ctx, vt, p);
    struct ggml_tensor *o = ggml_add(ctx, ggml_mul_mat(ctx, m->wo, a), m->x);
    struct ggml_tensor *h2 = ggml_rms_norm(ctx, o, 1e-5f);
    struct ggml_tensor *act = ggml_swiglu_split(ctx, ggml_mul_mat(ctx, m->wg, h2), ggml_mul_mat(ctx, m->wu, h2));
    *out = ggml_add(ctx, ggml_mul_mat(ctx, m->wd, act), o);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, *out);
    return gf;
}

static void set_inputs(Model *m, int step, int n_kv) {
    float x[C], mask[NCTX];
    uint64_t keep = g_seed;
    g_seed = 1000 + (uint64_t)step;
    for (int i = 0; i < C; i++) x[i] = frand() * 2;
    g_seed = keep;
    int32_t pos = step % n_kv;
    int64_t idx = pos;
    for (int i = 0; i < NCTX; i++) mask[i] = i <= pos ? 0.0f : -INFINITY;
    ggml_backend_tensor_set(m->x, x, 0, sizeof x);
    ggml_backend_tensor_set(m->pos, &pos, 0, sizeof pos);
    ggml_backend_tensor_set(m->idx, &idx, 0, sizeof idx);
    ggml_backend_tensor_set(m->mask, mask, 0, sizeof mask);
}

/* Runs one step on `be`; writes the output into out[C]. */
static enum ggml_status run_step(ggml_backend_t be, ggml_gallocr_t ga, Model *m, int step, int n_kv, float *out) {
    static char meta[1 << 20];
    struct ggml_init_params ip = {sizeof meta, meta, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *o;
    struct ggml_cgraph *gf = step_graph(ctx, m, n_kv, &o);
    REQUIRE(ggml_gallocr_alloc_graph(ga, gf), "gallocr");
    set_inputs(m, step, n_kv);
    enum ggml_status st = ggml_backend_graph_compute(be, gf);
    if (st == GGML_STATUS_SUCCESS) ggml_backend_tensor_get(o, out, 0, sizeof(float) * C);
    ggml_free(ctx);
    return st;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int steps = argc > 2 ? atoi(argv[2]) : 2000;
    setvbuf(stdout, NULL, _IONBF, 0);
    ggml_backend_load_all_from_path(GGML_BIN_DIR);
    Plugin p = plugin_open(argv[1]);
    plugin_devices(&p);
    PolyclMemoryStats start = plugin_stats(&p);
    ggml_backend_t be = backend_on(p.dev);
    ggml_backend_t cpu = cpu_backend();
    REQUIRE(cpu, "no CPU backend");
    Model m, mc;
    model_init(&m, p.buft);
    model_init(&mc, ggml_backend_get_default_buffer_type(cpu));
    ggml_gallocr_t ga = ggml_gallocr_new(p.buft);
    ggml_gallocr_t gac = ggml_gallocr_new(ggml_backend_get_default_buffer_type(cpu));
    int half = steps / 2;
    PolyclMemoryStats mark = start, peak = start;
    long rss_mark = 0, rss_half = 0, rss_mark2 = 0, rss_peak = 0;
    double worst = 0;
    int checked = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int step = 0; step < steps; step++) {
        int second = step >= half;
        if (step == half) rss_half = rss_kib();
        if (step == half || step == half + 50) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            printf("step %d: %.1f s\n", step, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
        }
        /* n_kv: fixed in the first half; 48 lengths in the second. */
        int n_kv = second ? 16 + (step % 48) : NCTX;
        float out[C], ref[C];
        enum ggml_status st = run_step(be, ga, &m, step, n_kv, out);
        REQUIRE(st == GGML_STATUS_SUCCESS, "step %d: status %d", step, st);
        /* The CPU oracle keeps its cache in step with polycl's. */
        REQUIRE(run_step(cpu, gac, &mc, step, n_kv, ref) == GGML_STATUS_SUCCESS, "cpu step %d", step);
        if (step % 97 == 0 || step == steps - 1) {
            double err = 0, n = 0;
            for (int i = 0; i < C; i++) {
                err += (out[i] - ref[i]) * (double)(out[i] - ref[i]);
                n += ref[i] * (double)ref[i];
            }
            if (err / n > worst) worst = err / n;
            CHECK(err / n < 1e-4, "step %d: nmse %g vs the CPU", step, err / n);
            checked++;
        }
        PolyclMemoryStats s = plugin_stats(&p);
        long rss = rss_kib();
        if (s.device_buffers > peak.device_buffers) peak.device_buffers = s.device_buffers;
        if (s.device_bytes > peak.device_bytes) peak.device_bytes = s.device_bytes;
        if (s.plans > peak.plans) peak.plans = s.plans;
        if (rss > rss_peak) rss_peak = rss;
        /* Warm-up: 100 steps in the first half, one cycle of lengths (+2) in
         * the second; after it every counter must stay where it was. */
        if (step == 100 || step == half + 50) {
            mark = s;
            if (step == 100) rss_mark = rss;
            else rss_mark2 = rss;
        } else if ((step > 100 && step < half) || step > half + 50) {
            if (s.device_buffers != mark.device_buffers || s.device_bytes != mark.device_bytes ||
                s.plans != mark.plans) {
                CHECK(0, "step %d: buffers %zu bytes %zu plans %zu, were %zu %zu %zu", step, s.device_buffers,
                      s.device_bytes, s.plans, mark.device_buffers, mark.device_bytes, mark.plans);
                mark = s;
            }
        }
    }
    PolyclMemoryStats end = plugin_stats(&p);
    long rss_end = rss_kib();
    printf("long run: %d steps (%d checked vs CPU, worst nmse %.3g); device buffers %zu, bytes %zu, plans %zu at the "
           "end; peak %zu buffers, %zu bytes, %zu plans; rss %ld KiB at step 100, %ld at %d, %ld at %d, %ld at the end, "
           "peak %ld KiB\n",
           steps, checked, worst, end.device_buffers, end.device_bytes, end.plans, peak.device_buffers,
           peak.device_bytes, peak.plans, rss_mark, rss_half, half, rss_mark2, half + 50, rss_end, rss_peak);
    CHECK(end.plans <= 64 + 1, "plans %zu exceed the plan cache", end.plans);
#if !defined(__SANITIZE_ADDRESS__)
    /* Host memory after each warm-up: allocator noise only. (Under
     * AddressSanitizer its quarantine holds freed memory, so RSS grows by
     * design; LeakSanitizer checks the leaks there instead.) */
    CHECK(rss_half - rss_mark < 8 * 1024, "resident memory grew by %ld KiB in the first half", rss_half - rss_mark);
    CHECK(rss_end - rss_mark2 < 8 * 1024, "resident memory grew by %ld KiB in the second half", rss_end - rss_mark2);
#endif
    ggml_gallocr_free(ga);
    ggml_gallocr_free(gac);
    model_free(&m);
    model_free(&mc);
    ggml_backend_free(be);
    ggml_backend_free(cpu);
    PolyclMemoryStats after = plugin_stats(&p);
    CHECK(after.device_buffers == start.device_buffers && after.device_bytes == start.device_bytes &&
              after.plans == start.plans,
          "after freeing everything: %zu buffers, %zu bytes, %zu plans remain", after.device_buffers,
          after.device_bytes, after.plans);
    return finish("long-run");
}
