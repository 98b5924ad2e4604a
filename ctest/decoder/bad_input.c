/* Bad input through the C API: NULL handles and pointers, unknown op names,
 * inputs that name missing nodes, cycles, shape mismatches, wrong op_params
 * sizes, failing callbacks. Each is an error status with a message, never a
 * crash. */
#include "check.h"

/* A valid two-node graph to break one field at a time. */
static void base(AgGraph *g) {
    memset(g, 0, sizeof *g);
    ag_add_input(g, "x", AG_F32, ag_shape(2, 8, -1, 1, 1));
    static float w[8 * 4];
    ag_add_weight(g, "w", AG_F32, ag_shape(2, 8, 4, 1, 1), w, sizeof w);
    PolyclSource mm[2] = {ag_w(0), ag_in(0)};
    size_t a = ag_add_node(g, "MUL_MAT", NULL, 0, mm, 2, "y", AG_F32, ag_shape(2, 4, -1, 1, 1));
    const float sc[2] = {2.0f, 0.0f};
    PolyclSource s[1] = {ag_node(a, 0)};
    size_t b = ag_add_node(g, "SCALE", sc, sizeof sc, s, 1, "z", AG_F32, ag_shape(2, 4, -1, 1, 1));
    ag_add_output(g, ag_node(b, 0));
}

static bool false_input(void *u, size_t i, PolyclTensorInfo *out) {
    (void)u, (void)i, (void)out;
    return false;
}

int main(void) {
    static AgGraph g;
    PolyclModel *m = NULL;
    base(&g);
    AG_CHECK(ag_convert(&g, NULL, &m));

    /* NULL handles and output pointers. */
    PolyclDecoderCallbacks cb = ag_callbacks(&g);
    PolyclDecoder *dec = NULL;
    PolyclFrontend *fe = NULL;
    size_t n = 0;
    bool found = false;
    PolyclTensorInfo info;
    const char *text = NULL;
    CHECK_FAILS(polycl_decoder_new(NULL, &dec), "callbacks is NULL");
    CHECK_FAILS(polycl_decoder_new(&cb, NULL), "out_decoder is NULL");
    CHECK_FAILS(polycl_frontend_new(NULL), "NULL");
    CHECK_FAILS(polycl_frontend_convert(NULL, NULL, &m), "decoder is NULL");
    AG_CHECK(polycl_decoder_new(&cb, &dec));
    CHECK_FAILS(polycl_frontend_convert(NULL, dec, NULL), "out_model is NULL");
    CHECK_FAILS(polycl_frontend_add_make_stateful(NULL, NULL, 0, -1, NULL), "frontend is NULL");
    AG_CHECK(polycl_frontend_new(&fe));
    CHECK_FAILS(polycl_frontend_add_make_stateful(fe, NULL, 2, -1, NULL), "skip_caches is NULL");
    CHECK_FAILS(polycl_frontend_add_cache_callback(fe, NULL, NULL, -1, NULL), "callback is NULL");
    CHECK_FAILS(polycl_frontend_add_cache_callback(NULL, NULL, NULL, -1, NULL), "frontend is NULL");
    CHECK_FAILS(polycl_model_op_count(NULL, "MulMat", &n), "model is NULL");
    CHECK_FAILS(polycl_model_op_count(m, NULL, &n), "kind is NULL");
    CHECK_FAILS(polycl_model_op_count(m, "MulMat", NULL), "out_count is NULL");
    CHECK_FAILS(polycl_model_sink_count(NULL, &n), "model is NULL");
    CHECK_FAILS(polycl_model_variable_count(m, NULL), "out_count is NULL");
    CHECK_FAILS(polycl_model_input(m, 99, &info), "index 99");
    CHECK_FAILS(polycl_model_output(NULL, 0, &info), "model is NULL");
    CHECK_FAILS(polycl_model_has_input(m, NULL, &found), "name is NULL");
    CHECK_FAILS(polycl_model_has_output(m, "z", NULL), "out_found is NULL");
    CHECK_FAILS(polycl_model_dump(NULL, &text), "model is NULL");
    CHECK_FAILS(polycl_model_compile(NULL, NULL, 0, NULL), "model is NULL");
    CHECK_FAILS(polycl_model_compile(m, NULL, 2, NULL), "NULL");
    int32_t bad_dev = 99;
    PolyclCompiledModel *cm = NULL;
    CHECK_FAILS(polycl_model_compile(m, &bad_dev, 1, &cm), "device 99");
    CHECK_FAILS(polycl_infer_request_new(NULL, 0, NULL), "compiled is NULL");
    CHECK_FAILS(polycl_infer_request_set_input(NULL, "x", NULL, NULL, 0), "request is NULL");
    CHECK_FAILS(polycl_infer_request_infer(NULL), "request is NULL");
    CHECK_FAILS(polycl_infer_request_output_info(NULL, "z", NULL, NULL, NULL), "request is NULL");
    CHECK_FAILS(polycl_infer_request_get_output(NULL, "z", NULL, 0), "request is NULL");
    CHECK_FAILS(polycl_infer_request_reset_state(NULL), "request is NULL");
    CHECK_FAILS(polycl_infer_request_state_info(NULL, "k", NULL, NULL, NULL), "request is NULL");
    CHECK_FAILS(polycl_infer_request_get_state(NULL, "k", NULL, 0), "request is NULL");
    polycl_decoder_free(NULL);
    polycl_frontend_free(NULL);
    polycl_model_free(NULL);
    polycl_compiled_model_free(NULL);
    polycl_infer_request_free(NULL);

    /* Missing or failing callbacks. */
    PolyclDecoderCallbacks broken = cb;
    broken.node = NULL;
    CHECK_FAILS(polycl_decoder_new(&broken, &dec), "required");
    broken = cb;
    broken.weight = NULL;
    PolyclDecoder *d2 = NULL;
    AG_CHECK(polycl_decoder_new(&broken, &d2));
    CHECK_FAILS(polycl_frontend_convert(NULL, d2, &m), "n_weights and weight");
    polycl_decoder_free(d2);
    broken = cb;
    broken.input = false_input;
    AG_CHECK(polycl_decoder_new(&broken, &d2));
    CHECK_FAILS(polycl_frontend_convert(NULL, d2, &m), "input(0) returned false");
    polycl_decoder_free(d2);

    /* Graph descriptions that break the contract, one field at a time. */
#define BROKEN(edit, ...)                               \
    do {                                                \
        base(&g);                                       \
        edit;                                           \
        PolyclModel *bm_ = NULL;                        \
        CHECK_FAILS(ag_convert(&g, NULL, &bm_), __VA_ARGS__); \
        CHECK(bm_ == NULL);                             \
    } while (0)
    BROKEN(snprintf(g.nodes[1].op, sizeof g.nodes[1].op, "FROBNICATE"), "unknown op name 'FROBNICATE'");
    BROKEN(snprintf(g.nodes[1].op, sizeof g.nodes[1].op, "NONE"), "NONE is not a node op");
    BROKEN(snprintf(g.nodes[1].op, sizeof g.nodes[1].op, "ARGSORT"), "ARGSORT");
    BROKEN(g.nodes[1].inputs[0] = ag_node(7, 0), "names node 7");
    BROKEN(g.nodes[0].inputs[1] = ag_in(9), "graph input 9");
    BROKEN(g.nodes[0].inputs[0] = ag_w(3), "weight 3");
    BROKEN(g.nodes[1].inputs[0] = ag_node(0, 2), "port 2");
    /* A cycle: node 0 reads node 1, which reads node 0. */
    BROKEN(g.nodes[0].inputs[1] = ag_node(1, 0), "names node 1", "not an earlier node");
    BROKEN(g.nodes[1].inputs[0] = ag_node(1, 0), "names node 1");
    BROKEN(g.outputs[0] = ag_node(5, 0), "graph output 0", "node 5");
    BROKEN(g.outputs[0] = ag_none(), "names nothing");
    BROKEN(g.nodes[0].inputs[0].kind = 9, "source kind 9");
    /* Shape mismatches: a matmul whose inner dims differ, a declared shape that lies. */
    BROKEN(g.inputs[0].shape.ne[0] = 6, "MUL_MAT", "types/shapes");
    BROKEN(g.nodes[1].outputs[0].shape.ne[0] = 5, "SCALE", "types/shapes");
    BROKEN(g.weights[0].size = 12, "weight 'w'", "12 bytes");
    BROKEN(g.weights[0].data = NULL, "NULL");
    BROKEN(g.inputs[0].ggml_type = 77, "type 77");
    BROKEN(g.inputs[0].shape.rank = 0, "rank 0");
    BROKEN(g.inputs[0].shape.ne[1] = -7, "-7");
    BROKEN(g.nodes[1].outputs[0].name = "x", "'x' is used twice");
    BROKEN(g.nodes[1].outputs[0].name = NULL, "name of output 0 of node 1");
    BROKEN(g.nodes[1].n_outputs = 0, "0 outputs");
    BROKEN(g.nodes[1].n_inputs = 11, "11 inputs");
    /* Wrong op_params sizes. */
    BROKEN(g.nodes[1].n_params = 4, "SCALE", "op_params of 4 bytes", "expected 8");
    BROKEN(g.nodes[0].n_params = 6, "op_params of 6 bytes");
    BROKEN(g.nodes[1].n_params = 100, "op_params of 100 bytes");
    {
        const int32_t axes[4] = {0, 0, 1, 3};
        base(&g);
        PolyclSource p[1] = {ag_node(0, 0)};
        ag_add_node(&g, "PERMUTE", axes, sizeof axes, p, 1, "p", AG_F32, ag_shape(2, 4, -1, 1, 1));
        PolyclModel *bm = NULL;
        CHECK_FAILS(ag_convert(&g, NULL, &bm), "not a permutation");
    }

    /* Infer requests that are asked the wrong things. */
    PolyclCompiledModel *c = NULL;
    AG_CHECK(polycl_model_compile(m, NULL, 0, &c));
    PolyclInferRequest *r = NULL;
    CHECK_FAILS(polycl_infer_request_new(c, 5, &r), "device slot 5");
    AG_CHECK(polycl_infer_request_new(c, 0, &r));
    int32_t type;
    PolyclShape shape;
    size_t size;
    CHECK_FAILS(polycl_infer_request_output_info(r, "z", &type, &shape, &size), "no infer");
    CHECK_FAILS(polycl_infer_request_infer(r), "input 'x' was not set");
    float x[8 * 3] = {0};
    PolyclShape xs = ag_shape(2, 8, 3, 1, 1);
    CHECK_FAILS(polycl_infer_request_set_input(r, "nope", &xs, x, sizeof x), "no input named 'nope'");
    CHECK_FAILS(polycl_infer_request_set_input(r, "x", &xs, x, 7), "7 bytes");
    CHECK_FAILS(polycl_infer_request_set_input(r, "x", NULL, x, sizeof x), "shape is NULL");
    CHECK_FAILS(polycl_infer_request_set_input(r, "x", &xs, NULL, sizeof x), "data is NULL");
    PolyclShape wrong = ag_shape(2, 6, 4, 1, 1);
    CHECK_FAILS(polycl_infer_request_set_input(r, "x", &wrong, x, sizeof x), "declared dims");
    PolyclShape unknown = ag_shape(2, 8, -1, 1, 1);
    CHECK_FAILS(polycl_infer_request_set_input(r, "x", &unknown, x, sizeof x), "must be known");
    AG_CHECK(polycl_infer_request_set_input(r, "x", &xs, x, sizeof x));
    AG_CHECK(polycl_infer_request_infer(r));
    AG_CHECK(polycl_infer_request_output_info(r, "z", &type, &shape, &size));
    CHECK(type == AG_F32 && shape.ne[0] == 4 && shape.ne[1] == 3 && size == 4 * 3 * 4);
    float z[12];
    CHECK_FAILS(polycl_infer_request_get_output(r, "z", z, 8), "size 8");
    CHECK_FAILS(polycl_infer_request_get_output(r, "nope", z, sizeof z), "no output named 'nope'");
    CHECK_FAILS(polycl_infer_request_get_output(r, "z", NULL, sizeof z), "dst is NULL");
    CHECK_FAILS(polycl_infer_request_state_info(r, "cache", &type, &shape, &size), "no variable 'cache'");
    AG_CHECK(polycl_infer_request_get_output(r, "z", z, sizeof z));

    polycl_infer_request_free(r);
    polycl_compiled_model_free(c);
    polycl_model_free(m);
    polycl_decoder_free(dec);
    polycl_frontend_free(fe);
    return finish("bad_input");
}
