/* beam_idx is reused when the graph already has an input of that name, and is
 * never added when nothing converts. */
#include "check.h"

static size_t inputs_named(const PolyclModel *m, const char *name) {
    size_t n = 0;
    for (size_t i = 0; i < count_of(polycl_model_input_count, m); i++) {
        PolyclTensorInfo in;
        AG_CHECK(polycl_model_input(m, i, &in));
        n += strcmp(in.name, name) == 0;
    }
    return n;
}

int main(void) {
    static AgGraph g;
    PolyclModel *m = NULL;

    /* Reused: still exactly one beam_idx, and the graph's own reader keeps it. */
    fixture(&g, ag_shape(4, 1, -1, 2, 4), 1);
    PolyclFrontend *fe = stateful_frontend(NULL, -1);
    AG_CHECK(ag_convert(&g, fe, &m));
    CHECK(inputs_named(m, "beam_idx") == 1);
    CHECK(op_count(m, "Gather") == 1 && op_count(m, "GetRows") == 1);
    CHECK(has_output(m, "picked"));
    CHECK(count_of(polycl_model_variable_count, m) == 1);
    polycl_model_free(m);

    /* Nothing to convert (the only cache is skipped): no beam_idx appears. */
    polycl_frontend_free(fe);
    fe = stateful_frontend("cache", -1);
    fixture(&g, ag_shape(4, 1, -1, 2, 4), 0);
    AG_CHECK(ag_convert(&g, fe, &m));
    CHECK(inputs_named(m, "beam_idx") == 0);
    CHECK(count_of(polycl_model_variable_count, m) == 0);
    polycl_model_free(m);

    /* Nothing to convert (the write goes into a computed tensor): no beam_idx. */
    polycl_frontend_free(fe);
    fe = stateful_frontend(NULL, -1);
    memset(&g, 0, sizeof g);
    ag_add_input(&g, "data", AG_F32, ag_shape(4, 1, -1, 2, 4));
    ag_add_input(&g, "idx", AG_I64, ag_shape(1, -1, 1, 1, 1));
    ag_add_input(&g, "base", AG_F16, ag_shape(4, 1, -1, 2, 4));
    PolyclSource cp[2] = {ag_in(2), ag_in(2)};
    size_t c = ag_add_node(&g, "CPY", NULL, 0, cp, 2, "scratch", AG_F16, ag_shape(4, 1, -1, 2, 4));
    PolyclSource sr[3] = {ag_in(0), ag_in(1), ag_node(c, 0)};
    size_t w = ag_add_node(&g, "SET_ROWS", NULL, 0, sr, 3, "written", AG_F16, ag_shape(4, 1, -1, 2, 4));
    ag_add_output(&g, ag_node(w, 0));
    AG_CHECK(ag_convert(&g, fe, &m));
    CHECK(inputs_named(m, "beam_idx") == 0);
    CHECK(count_of(polycl_model_variable_count, m) == 0);
    CHECK(op_count(m, "ScatterRows") == 1);
    polycl_model_free(m);
    polycl_frontend_free(fe);
    return finish("beam_idx");
}
