// attention_stateless: the host owns the KV cache.
//
//   attention_stateless [STEPS] [--permute]
//
// Describes examples/attention_graph.h's attention layer through polycl's
// decoder callbacks, converts it with no extension (every SET_ROWS is lowered
// to a scatter: k_cache/v_cache stay inputs and k_cache_out/v_cache_out are
// outputs), compiles it for POLYCL0 and runs STEPS decode steps of one token
// per beam, feeding the updated caches back each step. With --permute the host
// reorders its caches between steps as beam search would (the schedule of
// ag_beam_order). Prints each step's first outputs and a checksum.
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
    PolyclModel *model = NULL;
    AG_CHECK(ag_convert(&a.g, NULL, &model));
    size_t n_in, n_out, n_scatter;
    AG_CHECK(polycl_model_input_count(model, &n_in));
    AG_CHECK(polycl_model_output_count(model, &n_out));
    AG_CHECK(polycl_model_op_count(model, "ScatterRows", &n_scatter));
    printf("stateless model: %zu inputs, %zu outputs, %zu scatters\n", n_in, n_out, n_scatter);
    PolyclCompiledModel *compiled = NULL;
    AG_CHECK(polycl_model_compile(model, NULL, 0, &compiled));
    PolyclInferRequest *req = NULL;
    AG_CHECK(polycl_infer_request_new(compiled, 0, &req));

    AgCache cache = {NULL, NULL, 0};
    uint64_t seed = 42;
    double checksum = 0;
    for (int step = 0; step < steps; step++) {
        int32_t perm[AG_B];
        ag_beam_order(step, permute, perm);
        ag_cache_permute(&cache, perm);
        float x[AG_C * AG_B], out[AG_C * AG_B];
        for (int i = 0; i < AG_C * AG_B; i++) x[i] = ag_rand(&seed);
        ag_step_stateless(req, &cache, x, out);
        for (int i = 0; i < AG_C * AG_B; i++) checksum += out[i] * (i + 1);
        printf("step %2d: cache rows %lld, out[0..3] = %+.6f %+.6f %+.6f %+.6f\n", step, (long long)cache.n, out[0],
               out[1], out[2], out[3]);
    }
    printf("checksum %.9g\n", checksum);
    free(cache.k);
    free(cache.v);
    polycl_infer_request_free(req);
    polycl_compiled_model_free(compiled);
    polycl_model_free(model);
    return 0;
}
