/* The seed's regression table (OpenVINO PR #37435), asserted through polycl.h's
 * introspection on the one-cache fixture: no extension, make_stateful, and
 * make_stateful skipping "cache". */
#include "check.h"

static void assert_stateless(const PolyclModel *m) {
    CHECK(count_of(polycl_model_variable_count, m) == 0);
    CHECK(count_of(polycl_model_sink_count, m) == 0);
    CHECK(op_count(m, "ReadValue") == 0);
    CHECK(op_count(m, "Assign") == 0);
    CHECK(op_count(m, "ScatterRows") == 1);
    CHECK(op_count(m, "SetRows") == 0);
    CHECK(count_of(polycl_model_input_count, m) == 3);
    CHECK(has_input(m, "data") && has_input(m, "idx") && has_input(m, "cache"));
    CHECK(count_of(polycl_model_output_count, m) == 1);
    CHECK(has_output(m, "cache_out"));
    CHECK(!has_input(m, "beam_idx"));
}

int main(void) {
    static AgGraph g;
    PolyclShape cache = ag_shape(4, 1, -1, 2, 4);

    /* No extension: the host owns the cache. */
    fixture(&g, cache, 0);
    PolyclModel *m = NULL;
    AG_CHECK(ag_convert(&g, NULL, &m));
    assert_stateless(m);
    polycl_model_free(m);

    /* A frontend with no extensions is the same. */
    PolyclFrontend *fe = NULL;
    AG_CHECK(polycl_frontend_new(&fe));
    AG_CHECK(ag_convert(&g, fe, &m));
    assert_stateless(m);
    polycl_model_free(m);
    polycl_frontend_free(fe);

    /* make_stateful: polycl owns it. */
    fe = stateful_frontend(NULL, -1);
    AG_CHECK(ag_convert(&g, fe, &m));
    CHECK(count_of(polycl_model_variable_count, m) == 1);
    PolyclTensorInfo v;
    AG_CHECK(polycl_model_variable(m, 0, &v));
    CHECK(strcmp(v.name, "cache") == 0);
    CHECK(v.ggml_type == AG_F16);
    CHECK(v.shape.rank == 4);
    CHECK(v.shape.ne[0] == 1 && v.shape.ne[1] == -1 && v.shape.ne[2] == 2 && v.shape.ne[3] == 4);
    CHECK(count_of(polycl_model_sink_count, m) == 1);
    CHECK(op_count(m, "ReadValue") == 1);
    CHECK(op_count(m, "Assign") == 1);
    CHECK(op_count(m, "Gather") == 1);
    CHECK(op_count(m, "ScatterRows") == 0);
    CHECK(op_count(m, "SetRows") == 0);
    CHECK(!has_input(m, "cache"));
    CHECK(!has_output(m, "cache_out"));
    CHECK(count_of(polycl_model_output_count, m) == 0);
    CHECK(count_of(polycl_model_input_count, m) == 3);
    CHECK(has_input(m, "data") && has_input(m, "idx") && has_input(m, "beam_idx"));
    for (size_t i = 0; i < count_of(polycl_model_input_count, m); i++) {
        PolyclTensorInfo in;
        AG_CHECK(polycl_model_input(m, i, &in));
        if (strcmp(in.name, "beam_idx") == 0) {
            CHECK(in.ggml_type == AG_I32);
            CHECK(in.shape.rank == 1 && in.shape.ne[0] == -1);
        }
    }
    polycl_model_free(m);
    polycl_frontend_free(fe);

    /* make_stateful skipping "cache": the same as no extension. */
    fe = stateful_frontend("cache", -1);
    AG_CHECK(ag_convert(&g, fe, &m));
    assert_stateless(m);
    polycl_model_free(m);
    polycl_frontend_free(fe);
    return finish("regression_table");
}
