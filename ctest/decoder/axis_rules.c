/* make_stateful's append-axis rules: each rejected cache is a clear error that
 * names it; an explicit axis makes a static cache convertible. */
#include "check.h"

static PolyclStatus convert(PolyclShape cache, int32_t axis, PolyclModel **m) {
    static AgGraph g;
    fixture(&g, cache, 0);
    PolyclFrontend *fe = stateful_frontend(NULL, axis);
    PolyclStatus s = ag_convert(&g, fe, m);
    polycl_frontend_free(fe);
    return s;
}

int main(void) {
    PolyclModel *m = NULL;
    CHECK_FAILS(convert(ag_shape(4, -1, -1, 2, 4), -1, &m), "cache 'cache'", "more than one dynamic axis");
    CHECK_FAILS(convert(ag_shape(4, 1, 16, 2, 4), -1, &m), "cache 'cache'", "fully static", "explicit append_axis");
    CHECK_FAILS(convert(ag_shape(-1, 0, 0, 0, 0), -1, &m), "cache 'cache'", "static cache rank");
    /* An explicit axis does not make a dynamic non-token dim acceptable. */
    CHECK_FAILS(convert(ag_shape(4, -1, -1, 2, 4), 1, &m), "cache 'cache'", "static non-token");
    CHECK_FAILS(convert(ag_shape(4, 1, 16, 2, 4), 4, &m), "cache 'cache'", "out of range");
    CHECK(m == NULL);

    /* An explicit axis on a static cache works: the variable grows on it. */
    AG_CHECK(convert(ag_shape(4, 1, 16, 2, 4), 1, &m));
    PolyclTensorInfo v;
    AG_CHECK(polycl_model_variable(m, 0, &v));
    CHECK(strcmp(v.name, "cache") == 0);
    CHECK(v.shape.ne[0] == 1 && v.shape.ne[1] == -1 && v.shape.ne[2] == 2 && v.shape.ne[3] == 4);
    CHECK(op_count(m, "ReadValue") == 1 && op_count(m, "ScatterRows") == 0);
    polycl_model_free(m);
    return finish("axis_rules");
}
