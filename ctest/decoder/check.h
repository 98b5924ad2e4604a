/* Helpers of the decoder C tests: checks that count failures, and the
 * one-cache fixture of the seed's regression table, built through the
 * decoder callbacks of examples/attention_graph.h. */
#ifndef POLYCL_DECODER_CHECK_H
#define POLYCL_DECODER_CHECK_H

#include "attention_graph.h"

static int failures = 0;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                       \
        }                                                                     \
    } while (0)

/* The call fails with a message containing every one of the fragments. */
#define CHECK_FAILS(call, ...)                                                                \
    do {                                                                                      \
        PolyclStatus s_ = (call);                                                             \
        const char *frags_[] = {__VA_ARGS__};                                                 \
        const char *msg_ = polycl_last_error();                                               \
        if (s_ == POLYCL_STATUS_OK || msg_ == NULL || msg_[0] == 0) {                         \
            fprintf(stderr, "%s:%d: %s: expected an error with a message, got status %d '%s'\n", \
                    __FILE__, __LINE__, #call, (int)s_, msg_ ? msg_ : "(null)");              \
            failures++;                                                                       \
        } else {                                                                              \
            for (size_t f_ = 0; f_ < sizeof frags_ / sizeof frags_[0]; f_++)                  \
                if (!strstr(msg_, frags_[f_])) {                                              \
                    fprintf(stderr, "%s:%d: %s: message '%s' lacks '%s'\n", __FILE__, __LINE__, \
                            #call, msg_, frags_[f_]);                                         \
                    failures++;                                                               \
                }                                                                             \
        }                                                                                     \
    } while (0)

static inline size_t op_count(const PolyclModel *m, const char *kind) {
    size_t n = 0;
    AG_CHECK(polycl_model_op_count(m, kind, &n));
    return n;
}

static inline size_t count_of(PolyclStatus (*f)(const PolyclModel *, size_t *), const PolyclModel *m) {
    size_t n = 0;
    AG_CHECK(f(m, &n));
    return n;
}

static inline bool has_input(const PolyclModel *m, const char *name) {
    bool b = false;
    AG_CHECK(polycl_model_has_input(m, name, &b));
    return b;
}

static inline bool has_output(const PolyclModel *m, const char *name) {
    bool b = false;
    AG_CHECK(polycl_model_has_output(m, name, &b));
    return b;
}

/* Fixture K, shapes in ggml ne order: SET_ROWS of data f32 [1,?,2,4] at rows
 * idx i64 [?] into cache (f16 [1,?,2,4] unless `cache_shape` says otherwise),
 * output cache_out. With `extra_beam`, the graph also reads an input named
 * beam_idx (i32 [?]) in a GET_ROWS of its own. */
static inline void fixture(AgGraph *g, PolyclShape cache_shape, int extra_beam) {
    memset(g, 0, sizeof *g);
    PolyclShape row_shape = cache_shape.rank < 0 ? ag_shape(4, 1, -1, 2, 4) : cache_shape;
    PolyclShape data_shape = row_shape;
    data_shape.ne[1] = -1;
    ag_add_input(g, "data", AG_F32, data_shape);
    ag_add_input(g, "idx", AG_I64, ag_shape(1, -1, 1, 1, 1));
    ag_add_input(g, "cache", AG_F16, cache_shape);
    PolyclSource in[3] = {ag_in(0), ag_in(1), ag_in(2)};
    size_t n = ag_add_node(g, "SET_ROWS", NULL, 0, in, 3, "cache_out", AG_F16, row_shape);
    ag_add_output(g, ag_node(n, 0));
    if (extra_beam) {
        size_t b = ag_add_input(g, "beam_idx", AG_I32, ag_shape(1, -1, 1, 1, 1));
        size_t tbl = ag_add_input(g, "table", AG_F32, ag_shape(2, 4, 3, 1, 1));
        PolyclSource gi[2] = {ag_in(tbl), ag_in(b)};
        size_t gr = ag_add_node(g, "GET_ROWS", NULL, 0, gi, 2, "picked", AG_F32, ag_shape(2, 4, -1, 1, 1));
        ag_add_output(g, ag_node(gr, 0));
    }
}

static inline PolyclFrontend *stateful_frontend(const char *skip, int32_t axis) {
    PolyclFrontend *fe = NULL;
    AG_CHECK(polycl_frontend_new(&fe));
    const char *skips[1] = {skip};
    AG_CHECK(polycl_frontend_add_make_stateful(fe, skip ? skips : NULL, skip ? 1 : 0, axis, NULL));
    return fe;
}

static inline int finish(const char *name) {
    if (failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
