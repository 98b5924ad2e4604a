/* A mixed graph: one cache made stateful, one skipped, one row write into a
 * computed tensor (not a graph input). Converted with make_stateful and with a
 * C cache-policy callback; extensions run in registration order. */
#include "check.h"

static void mixed(AgGraph *g) {
    memset(g, 0, sizeof *g);
    PolyclShape rows = ag_shape(2, 4, -1, 1, 1), cache = ag_shape(2, 4, -1, 1, 1);
    ag_add_input(g, "data_a", AG_F32, rows);
    ag_add_input(g, "data_b", AG_F32, rows);
    ag_add_input(g, "idx", AG_I64, ag_shape(1, -1, 1, 1, 1));
    ag_add_input(g, "cache_a", AG_F16, cache);
    ag_add_input(g, "cache_b", AG_F16, cache);
    ag_add_input(g, "base", AG_F32, ag_shape(2, 4, 8, 1, 1));
    PolyclSource a[3] = {ag_in(0), ag_in(2), ag_in(3)};
    ag_add_output(g, ag_node(ag_add_node(g, "SET_ROWS", NULL, 0, a, 3, "cache_a_out", AG_F16, cache), 0));
    PolyclSource b[3] = {ag_in(1), ag_in(2), ag_in(4)};
    ag_add_output(g, ag_node(ag_add_node(g, "SET_ROWS", NULL, 0, b, 3, "cache_b_out", AG_F16, cache), 0));
    PolyclSource cp[2] = {ag_in(5), ag_in(5)};
    size_t routing = ag_add_node(g, "CPY", NULL, 0, cp, 2, "routing", AG_F32, ag_shape(2, 4, 8, 1, 1));
    PolyclSource r[3] = {ag_in(0), ag_in(2), ag_node(routing, 0)};
    ag_add_output(g, ag_node(ag_add_node(g, "SET_ROWS", NULL, 0, r, 3, "routed", AG_F32, ag_shape(2, 4, 8, 1, 1)), 0));
}

/* cache_a stateful, cache_b stateless, the routing write as the default made it. */
static void assert_mixed(const PolyclModel *m) {
    CHECK(count_of(polycl_model_variable_count, m) == 1);
    PolyclTensorInfo v;
    AG_CHECK(polycl_model_variable(m, 0, &v));
    CHECK(strcmp(v.name, "cache_a") == 0);
    CHECK(count_of(polycl_model_sink_count, m) == 1);
    CHECK(op_count(m, "ReadValue") == 1 && op_count(m, "Assign") == 1 && op_count(m, "Gather") == 1);
    CHECK(op_count(m, "ScatterRows") == 2);
    CHECK(op_count(m, "SetRows") == 0);
    CHECK(!has_input(m, "cache_a") && has_input(m, "cache_b") && has_input(m, "beam_idx"));
    CHECK(!has_output(m, "cache_a_out") && has_output(m, "cache_b_out") && has_output(m, "routed"));
}

typedef struct Calls {
    int n;
    char names[8][32];
    bool params[8];
    int32_t types[8];
    PolyclCacheChoice a, b, other;
} Calls;

static PolyclCacheChoice policy(void *u, const char *name, int32_t type, const PolyclShape *shape, bool is_parameter) {
    Calls *c = u;
    (void)shape;
    if (c->n < 8) {
        snprintf(c->names[c->n], sizeof c->names[c->n], "%s", name);
        c->params[c->n] = is_parameter;
        c->types[c->n] = type;
    }
    c->n++;
    if (strcmp(name, "cache_a") == 0) return c->a;
    if (strcmp(name, "cache_b") == 0) return c->b;
    return c->other;
}

static PolyclCacheChoice bad_answer(void *u, const char *name, int32_t type, const PolyclShape *shape, bool p) {
    (void)u, (void)name, (void)type, (void)shape, (void)p;
    return (PolyclCacheChoice)7;
}

int main(void) {
    static AgGraph g;
    mixed(&g);
    PolyclModel *m = NULL;

    /* make_stateful skipping cache_b. */
    PolyclFrontend *fe = stateful_frontend("cache_b", -1);
    AG_CHECK(ag_convert(&g, fe, &m));
    assert_mixed(m);
    polycl_model_free(m);
    polycl_frontend_free(fe);

    /* The same through a C callback that sees all three writes. */
    Calls calls = {0};
    calls.a = POLYCL_CACHE_CHOICE_STATEFUL;
    calls.b = POLYCL_CACHE_CHOICE_STATELESS;
    calls.other = POLYCL_CACHE_CHOICE_LEAVE;
    AG_CHECK(polycl_frontend_new(&fe));
    AG_CHECK(polycl_frontend_add_cache_callback(fe, policy, &calls, -1, NULL));
    AG_CHECK(ag_convert(&g, fe, &m));
    assert_mixed(m);
    CHECK(calls.n == 3);
    CHECK(strcmp(calls.names[0], "cache_a") == 0 && calls.params[0] && calls.types[0] == AG_F16);
    CHECK(strcmp(calls.names[1], "cache_b") == 0 && calls.params[1]);
    CHECK(strcmp(calls.names[2], "routing") == 0 && !calls.params[2] && calls.types[2] == AG_F32);
    polycl_model_free(m);
    polycl_frontend_free(fe);

    /* Registration order: a callback that leaves everything, then make_stateful:
     * both caches become variables. */
    memset(&calls, 0, sizeof calls);
    AG_CHECK(polycl_frontend_new(&fe));
    AG_CHECK(polycl_frontend_add_cache_callback(fe, policy, &calls, -1, NULL));
    AG_CHECK(polycl_frontend_add_make_stateful(fe, NULL, 0, -1, NULL));
    AG_CHECK(ag_convert(&g, fe, &m));
    CHECK(calls.n == 3);
    CHECK(count_of(polycl_model_variable_count, m) == 2);
    CHECK(op_count(m, "ScatterRows") == 1);
    polycl_model_free(m);
    polycl_frontend_free(fe);

    /* make_stateful first: the callback then only sees the routing write. */
    memset(&calls, 0, sizeof calls);
    AG_CHECK(polycl_frontend_new(&fe));
    AG_CHECK(polycl_frontend_add_make_stateful(fe, NULL, 0, -1, NULL));
    AG_CHECK(polycl_frontend_add_cache_callback(fe, policy, &calls, -1, NULL));
    AG_CHECK(ag_convert(&g, fe, &m));
    CHECK(calls.n == 1);
    CHECK(strcmp(calls.names[0], "routing") == 0);
    polycl_model_free(m);
    polycl_frontend_free(fe);

    /* Stateful for a write that is not into a graph input, or an unknown answer: errors. */
    memset(&calls, 0, sizeof calls);
    calls.other = POLYCL_CACHE_CHOICE_STATEFUL;
    AG_CHECK(polycl_frontend_new(&fe));
    AG_CHECK(polycl_frontend_add_cache_callback(fe, policy, &calls, -1, NULL));
    CHECK_FAILS(ag_convert(&g, fe, &m), "routing", "not a graph Parameter");
    polycl_frontend_free(fe);
    AG_CHECK(polycl_frontend_new(&fe));
    AG_CHECK(polycl_frontend_add_cache_callback(fe, bad_answer, NULL, -1, NULL));
    CHECK_FAILS(ag_convert(&g, fe, &m), "answered 7");
    polycl_frontend_free(fe);
    return finish("mixed");
}
