/* 16 decode steps of the example attention graph: the stateless model (the
 * host feeds its caches back) and the stateful one (polycl owns them) give
 * bit-identical outputs; with a beam permutation every step, the stateful
 * model's Gather(beam_idx) equals a host that permutes its own caches. The
 * stateful variables equal the host's caches after every step. */
#include "check.h"

static void run(int permute, int device) {
    static AgAttention a;
    ag_attention(&a);
    PolyclModel *plain = NULL, *owned = NULL;
    AG_CHECK(ag_convert(&a.g, NULL, &plain));
    PolyclFrontend *fe = stateful_frontend(NULL, -1);
    AG_CHECK(ag_convert(&a.g, fe, &owned));
    polycl_frontend_free(fe);
    PolyclCompiledModel *cp = NULL, *co = NULL;
    AG_CHECK(polycl_model_compile(plain, &device, 1, &cp));
    AG_CHECK(polycl_model_compile(owned, &device, 1, &co));
    PolyclInferRequest *rp = NULL, *ro = NULL;
    AG_CHECK(polycl_infer_request_new(cp, 0, &rp));
    AG_CHECK(polycl_infer_request_new(co, 0, &ro));
    AgCache cache = {NULL, NULL, 0};
    uint64_t seed = 42;
    for (int step = 0; step < 16; step++) {
        int32_t perm[AG_B];
        ag_beam_order(step, permute, perm);
        ag_cache_permute(&cache, perm);
        float x[AG_C * AG_B], out_p[AG_C * AG_B], out_o[AG_C * AG_B];
        for (int i = 0; i < AG_C * AG_B; i++) x[i] = ag_rand(&seed);
        ag_step_stateless(rp, &cache, x, out_p);
        ag_step_stateful(ro, step, x, perm, out_o);
        if (memcmp(out_p, out_o, sizeof out_p) != 0) {
            fprintf(stderr, "device %d, permute %d, step %d: out differs (%g vs %g)\n", device, permute, step,
                    out_p[0], out_o[0]);
            failures++;
        }
        int32_t type;
        PolyclShape shape;
        size_t size;
        AG_CHECK(polycl_infer_request_state_info(ro, "v_cache", &type, &shape, &size));
        CHECK(type == AG_F16 && shape.ne[1] == step + 1);
        unsigned char *state = malloc(size);
        AG_CHECK(polycl_infer_request_get_state(ro, "v_cache", state, size));
        CHECK(size == (size_t)(cache.n * AG_H * AG_B * AG_ROW) && memcmp(state, cache.v, size) == 0);
        free(state);
    }
    /* After a reset the stateful model starts over: its first output equals a
     * fresh stateless run's. */
    AG_CHECK(polycl_infer_request_reset_state(ro));
    AgCache fresh = {NULL, NULL, 0};
    float x[AG_C * AG_B], out_p[AG_C * AG_B], out_o[AG_C * AG_B];
    for (int i = 0; i < AG_C * AG_B; i++) x[i] = ag_rand(&seed);
    int32_t ident[AG_B];
    ag_beam_order(0, 0, ident);
    ag_step_stateless(rp, &fresh, x, out_p);
    ag_step_stateful(ro, 0, x, ident, out_o);
    CHECK(memcmp(out_p, out_o, sizeof out_p) == 0);
    free(fresh.k);
    free(fresh.v);
    free(cache.k);
    free(cache.v);
    polycl_infer_request_free(rp);
    polycl_infer_request_free(ro);
    polycl_compiled_model_free(cp);
    polycl_compiled_model_free(co);
    polycl_model_free(plain);
    polycl_model_free(owned);
}

int main(void) {
    int n = 0;
    AG_CHECK(polycl_device_count(&n));
    if (n == 0) {
        fprintf(stderr, "numerics needs an OpenCL device\n");
        return 1;
    }
    for (int d = 0; d < n; d++) {
        run(0, d);
        run(1, d);
    }
    return finish("numerics");
}
