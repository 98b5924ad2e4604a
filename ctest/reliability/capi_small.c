/* The smallest whole run of polycl.h, for valgrind memcheck (and the
 * AddressSanitizer build): describe z = SCALE(x) + x through the decoder
 * callbacks, convert, compile on POLYCL0, infer STEPS times with new inputs
 * each time, check every value, free everything. Two small kernel programs
 * only, so the OpenCL compiler's work under valgrind stays short.
 *
 *   capi_small [STEPS] */
#include "attention_graph.h"

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    static AgGraph g;
    memset(&g, 0, sizeof g);
    ag_add_input(&g, "x", AG_F32, ag_shape(2, 16, 3, 1, 1));
    const float sc[2] = {2.0f, 0.5f};
    PolyclSource s_in[1] = {ag_in(0)};
    size_t y = ag_add_node(&g, "SCALE", sc, sizeof sc, s_in, 1, "y", AG_F32, ag_shape(2, 16, 3, 1, 1));
    PolyclSource a_in[2] = {ag_node(y, 0), ag_in(0)};
    size_t z = ag_add_node(&g, "ADD", NULL, 0, a_in, 2, "z", AG_F32, ag_shape(2, 16, 3, 1, 1));
    ag_add_output(&g, ag_node(z, 0));
    PolyclModel *model = NULL;
    AG_CHECK(ag_convert(&g, NULL, &model));
    PolyclCompiledModel *compiled = NULL;
    AG_CHECK(polycl_model_compile(model, NULL, 0, &compiled));
    PolyclInferRequest *req = NULL;
    AG_CHECK(polycl_infer_request_new(compiled, 0, &req));
    int bad = 0;
    for (int step = 0; step < steps; step++) {
        int64_t t = 3;
        float x[16 * 3], out[16 * 3];
        for (int i = 0; i < 16 * t; i++) x[i] = (float)(i - 7 * step) / 8.0f;
        PolyclShape shape = ag_shape(2, 16, t, 1, 1);
        AG_CHECK(polycl_infer_request_set_input(req, "x", &shape, x, sizeof(float) * 16 * (size_t)t));
        AG_CHECK(polycl_infer_request_infer(req));
        float *o = (float *)ag_output(req, "z", sizeof(float) * 16 * (size_t)t);
        memcpy(out, o, sizeof(float) * 16 * (size_t)t);
        free(o);
        for (int i = 0; i < 16 * t; i++) {
            float want = (x[i] * 2.0f + 0.5f) + x[i];
            if (fabsf(out[i] - want) > 1e-6f) {
                fprintf(stderr, "step %d, z[%d] = %f, want %f\n", step, i, out[i], want);
                bad++;
            }
        }
    }
    /* Bad input on the way: errors, no crash, nothing leaked. */
    PolyclShape wrong = ag_shape(2, 15, 1, 1, 1);
    float junk[15] = {0};
    if (polycl_infer_request_set_input(req, "x", &wrong, junk, sizeof junk) == POLYCL_STATUS_OK) bad++;
    if (polycl_infer_request_set_input(req, NULL, &wrong, junk, sizeof junk) == POLYCL_STATUS_OK) bad++;
    polycl_infer_request_free(req);
    polycl_compiled_model_free(compiled);
    polycl_model_free(model);
    printf("capi_small: %d steps, %d bad\n", steps, bad);
    return bad ? 1 : 0;
}
