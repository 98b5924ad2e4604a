// attention_stateful: polycl owns the KV cache.
//
//   attention_stateful [STEPS] [--permute]
//
// The same attention layer as attention_stateless (examples/attention_graph.h,
// described through the decoder callbacks), converted with make_stateful
// registered: each SET_ROWS into a cache input becomes a state variable
// (ReadValue -> Gather(beam_idx) -> Concat -> Assign), the cache inputs and
// outputs disappear and a beam_idx input appears. Each step passes only the
// new token and beam_idx (with --permute, the reordering schedule of
// ag_beam_order); the output equals attention_stateless's step for step.
// At the end it reads the k_cache variable and resets the state.
#include "attention_graph.h"

int main(int argc, char **argv) {
    int steps = 16, permute = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--permute") == 0) permute = 1;
        else steps = atoi(argv[i]);
    }
    printf("polycl %s\n", polycl_version());
    static AgAttention a;
    ag_attention(&a);
    PolyclFrontend *fe = NULL;
    AG_CHECK(polycl_frontend_new(&fe));
    AG_CHECK(polycl_frontend_add_make_stateful(fe, NULL, 0, -1, "beam_idx"));
    PolyclModel *model = NULL;
    AG_CHECK(ag_convert(&a.g, fe, &model));
    size_t n_vars, n_sinks;
    AG_CHECK(polycl_model_variable_count(model, &n_vars));
    AG_CHECK(polycl_model_sink_count(model, &n_sinks));
    printf("stateful model: %zu variables, %zu sinks\n", n_vars, n_sinks);
    for (size_t i = 0; i < n_vars; i++) {
        PolyclTensorInfo v;
        AG_CHECK(polycl_model_variable(model, i, &v));
        printf("  variable %s: type %d, ne [%lld, %lld, %lld, %lld] (-1 grows)\n", v.name, v.ggml_type,
               (long long)v.shape.ne[0], (long long)v.shape.ne[1], (long long)v.shape.ne[2], (long long)v.shape.ne[3]);
    }
    PolyclCompiledModel *compiled = NULL;
    AG_CHECK(polycl_model_compile(model, NULL, 0, &compiled));
    PolyclInferRequest *req = NULL;
    AG_CHECK(polycl_infer_request_new(compiled, 0, &req));
    AG_CHECK(polycl_infer_request_reset_state(req));

    uint64_t seed = 42;
    double checksum = 0;
    for (int step = 0; step < steps; step++) {
        int32_t perm[AG_B];
        ag_beam_order(step, permute, perm);
        float x[AG_C * AG_B], out[AG_C * AG_B];
        for (int i = 0; i < AG_C * AG_B; i++) x[i] = ag_rand(&seed);
        ag_step_stateful(req, step, x, perm, out);
        for (int i = 0; i < AG_C * AG_B; i++) checksum += out[i] * (i + 1);
        printf("step %2d: beam_idx [%d %d], out[0..3] = %+.6f %+.6f %+.6f %+.6f\n", step, perm[0], perm[1], out[0],
               out[1], out[2], out[3]);
    }
    printf("checksum %.9g\n", checksum);

    int32_t type;
    PolyclShape shape;
    size_t size;
    AG_CHECK(polycl_infer_request_state_info(req, "k_cache", &type, &shape, &size));
    printf("k_cache state: ne [%lld, %lld, %lld, %lld], %zu bytes\n", (long long)shape.ne[0], (long long)shape.ne[1],
           (long long)shape.ne[2], (long long)shape.ne[3], size);
    if (shape.ne[1] != steps) {
        fprintf(stderr, "k_cache holds %lld rows after %d steps\n", (long long)shape.ne[1], steps);
        return 1;
    }
    AG_CHECK(polycl_infer_request_reset_state(req));
    AG_CHECK(polycl_infer_request_state_info(req, "k_cache", &type, &shape, &size));
    if (shape.ne[1] != 0 || size != 0) {
        fprintf(stderr, "reset left %lld rows\n", (long long)shape.ne[1]);
        return 1;
    }
    printf("after reset: k_cache has 0 rows\n");
    polycl_infer_request_free(req);
    polycl_compiled_model_free(compiled);
    polycl_model_free(model);
    polycl_frontend_free(fe);
    return 0;
}
