/*
 * A small graph builder over polycl's decoder callbacks, and the example
 * graph built with it: one attention layer whose K/V caches are written with
 * SET_ROWS, as a ggml model writes its KV cache.
 *
 *   x [C, T, 1, B]                     (shapes in ggml ne order, T dynamic)
 *   q/k/v = MUL_MAT(w*, x) [H*D, T, 1, B] -> RESHAPE [D, H, T, B] -> PERMUTE [D, T, H, B]
 *   k_cache_out = SET_ROWS(k, idx, k_cache [D, ?, H, B])   (v likewise)
 *   attn = FLASH_ATTN_EXT(q, k_cache_out, v_cache_out) [D, H, T, B]
 *   out = MUL_MAT(wo, RESHAPE(attn) [H*D, T, 1, B]) [C, T, 1, B]
 *
 * B is the beam dim (outermost, where make_stateful's Gather(beam_idx) acts).
 * The graph describes computation only: whether polycl or the host owns the
 * caches is decided by the extensions registered on the frontend.
 *
 * Used by examples/attention_stateless.c, examples/attention_stateful.c and
 * the C tests in ctest/decoder. Header-only; every function is static inline.
 */
#ifndef POLYCL_ATTENTION_GRAPH_H
#define POLYCL_ATTENTION_GRAPH_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "polycl.h"

/* ggml type ids of the pinned ggml. */
enum { AG_F32 = 0, AG_F16 = 1, AG_I32 = 26, AG_I64 = 27 };

#define AG_MAX 32

typedef struct AgNode {
    char op[32];
    unsigned char params[64];
    size_t n_params;
    PolyclSource inputs[10];
    size_t n_inputs;
    PolyclTensorInfo outputs[2];
    char names[2][64];
    size_t n_outputs;
} AgNode;

/* A graph description the callbacks below read. */
typedef struct AgGraph {
    PolyclTensorInfo inputs[AG_MAX];
    char input_names[AG_MAX][64];
    size_t n_inputs;
    PolyclWeightInfo weights[AG_MAX];
    char weight_names[AG_MAX][64];
    size_t n_weights;
    AgNode nodes[AG_MAX];
    size_t n_nodes;
    PolyclSource outputs[AG_MAX];
    size_t n_outputs;
} AgGraph;

/* Exits with the thread's last polycl error when a call fails. */
#define AG_CHECK(call)                                                                     \
    do {                                                                                   \
        PolyclStatus ag_s_ = (call);                                                       \
        if (ag_s_ != POLYCL_STATUS_OK) {                                                   \
            fprintf(stderr, "%s:%d: %s: status %d: %s\n", __FILE__, __LINE__, #call, (int)ag_s_, \
                    polycl_last_error());                                                  \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static inline PolyclShape ag_shape(int rank, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    PolyclShape s = {rank, {n0, n1, n2, n3}};
    return s;
}

static inline PolyclSource ag_in(size_t i) {
    PolyclSource s = {POLYCL_SOURCE_KIND_INPUT, i, 0};
    return s;
}
static inline PolyclSource ag_w(size_t i) {
    PolyclSource s = {POLYCL_SOURCE_KIND_WEIGHT, i, 0};
    return s;
}
static inline PolyclSource ag_node(size_t i, uint32_t port) {
    PolyclSource s = {POLYCL_SOURCE_KIND_NODE, i, port};
    return s;
}
static inline PolyclSource ag_none(void) {
    PolyclSource s = {POLYCL_SOURCE_KIND_NONE, 0, 0};
    return s;
}

static inline size_t ag_add_input(AgGraph *g, const char *name, int32_t type, PolyclShape shape) {
    size_t i = g->n_inputs++;
    snprintf(g->input_names[i], sizeof g->input_names[i], "%s", name);
    g->inputs[i].name = g->input_names[i];
    g->inputs[i].ggml_type = type;
    g->inputs[i].shape = shape;
    return i;
}

static inline size_t ag_add_weight(AgGraph *g, const char *name, int32_t type, PolyclShape shape, const void *data,
                            size_t size) {
    size_t i = g->n_weights++;
    snprintf(g->weight_names[i], sizeof g->weight_names[i], "%s", name);
    g->weights[i].name = g->weight_names[i];
    g->weights[i].ggml_type = type;
    g->weights[i].shape = shape;
    g->weights[i].data = data;
    g->weights[i].size = size;
    return i;
}

/* Adds a one-output node; returns its index. `params` may be NULL. */
static inline size_t ag_add_node(AgGraph *g, const char *op, const void *params, size_t n_params, const PolyclSource *inputs,
                          size_t n_inputs, const char *name, int32_t type, PolyclShape shape) {
    size_t i = g->n_nodes++;
    AgNode *n = &g->nodes[i];
    memset(n, 0, sizeof *n);
    snprintf(n->op, sizeof n->op, "%s", op);
    if (params) memcpy(n->params, params, n_params);
    n->n_params = n_params;
    memcpy(n->inputs, inputs, n_inputs * sizeof *inputs);
    n->n_inputs = n_inputs;
    snprintf(n->names[0], sizeof n->names[0], "%s", name);
    n->outputs[0].name = n->names[0];
    n->outputs[0].ggml_type = type;
    n->outputs[0].shape = shape;
    n->n_outputs = 1;
    return i;
}

/* Gives node `i` a second output port (TOP_K's indices). */
static inline void ag_add_port(AgGraph *g, size_t i, const char *name, int32_t type, PolyclShape shape) {
    AgNode *n = &g->nodes[i];
    snprintf(n->names[1], sizeof n->names[1], "%s", name);
    n->outputs[1].name = n->names[1];
    n->outputs[1].ggml_type = type;
    n->outputs[1].shape = shape;
    n->n_outputs = 2;
}

static inline void ag_add_output(AgGraph *g, PolyclSource s) { g->outputs[g->n_outputs++] = s; }

static inline size_t ag_cb_n_inputs(void *u) { return ((AgGraph *)u)->n_inputs; }
static inline bool ag_cb_input(void *u, size_t i, PolyclTensorInfo *out) {
    AgGraph *g = u;
    if (i >= g->n_inputs) return false;
    *out = g->inputs[i];
    return true;
}
static inline size_t ag_cb_n_weights(void *u) { return ((AgGraph *)u)->n_weights; }
static inline bool ag_cb_weight(void *u, size_t i, PolyclWeightInfo *out) {
    AgGraph *g = u;
    if (i >= g->n_weights) return false;
    *out = g->weights[i];
    return true;
}
static inline size_t ag_cb_n_nodes(void *u) { return ((AgGraph *)u)->n_nodes; }
static inline bool ag_cb_node(void *u, size_t i, PolyclNodeInfo *out) {
    AgGraph *g = u;
    if (i >= g->n_nodes) return false;
    AgNode *n = &g->nodes[i];
    out->op = n->op;
    out->op_params = n->params;
    out->op_params_size = n->n_params;
    out->inputs = n->inputs;
    out->n_inputs = n->n_inputs;
    out->outputs = n->outputs;
    out->n_outputs = n->n_outputs;
    return true;
}
static inline size_t ag_cb_n_outputs(void *u) { return ((AgGraph *)u)->n_outputs; }
static inline bool ag_cb_output(void *u, size_t i, PolyclSource *out) {
    AgGraph *g = u;
    if (i >= g->n_outputs) return false;
    *out = g->outputs[i];
    return true;
}

static inline PolyclDecoderCallbacks ag_callbacks(AgGraph *g) {
    PolyclDecoderCallbacks cb = {g,           ag_cb_n_inputs, ag_cb_input,     ag_cb_n_weights, ag_cb_weight,
                                 ag_cb_n_nodes, ag_cb_node,   ag_cb_n_outputs, ag_cb_output};
    return cb;
}

/* Converts `g` with the frontend's extensions (`fe` may be NULL). */
static inline PolyclStatus ag_convert(AgGraph *g, const PolyclFrontend *fe, PolyclModel **out) {
    PolyclDecoderCallbacks cb = ag_callbacks(g);
    PolyclDecoder *dec = NULL;
    PolyclStatus s = polycl_decoder_new(&cb, &dec);
    if (s != POLYCL_STATUS_OK) return s;
    s = polycl_frontend_convert(fe, dec, out);
    polycl_decoder_free(dec);
    return s;
}

/* ---- the attention example ---- */

enum { AG_D = 4, AG_H = 2, AG_B = 2, AG_C = 8, AG_HD = AG_H * AG_D };

typedef struct AgAttention {
    AgGraph g;
    float wq[AG_C * AG_HD], wk[AG_C * AG_HD], wv[AG_C * AG_HD], wo[AG_HD * AG_C];
} AgAttention;

/* A deterministic generator in [-1, 1). */
static inline float ag_rand(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(*state >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

static inline void ag_attention(AgAttention *a) {
    memset(a, 0, sizeof *a);
    AgGraph *g = &a->g;
    uint64_t seed = 7;
    float *ws[4] = {a->wq, a->wk, a->wv, a->wo};
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < AG_C * AG_HD; i++) ws[w][i] = 0.5f * ag_rand(&seed);
    ag_add_input(g, "x", AG_F32, ag_shape(4, AG_C, -1, 1, AG_B));
    ag_add_input(g, "idx", AG_I64, ag_shape(1, -1, 1, 1, 1));
    ag_add_input(g, "k_cache", AG_F16, ag_shape(4, AG_D, -1, AG_H, AG_B));
    ag_add_input(g, "v_cache", AG_F16, ag_shape(4, AG_D, -1, AG_H, AG_B));
    ag_add_weight(g, "wq", AG_F32, ag_shape(2, AG_C, AG_HD, 1, 1), a->wq, sizeof a->wq);
    ag_add_weight(g, "wk", AG_F32, ag_shape(2, AG_C, AG_HD, 1, 1), a->wk, sizeof a->wk);
    ag_add_weight(g, "wv", AG_F32, ag_shape(2, AG_C, AG_HD, 1, 1), a->wv, sizeof a->wv);
    ag_add_weight(g, "wo", AG_F32, ag_shape(2, AG_HD, AG_C, 1, 1), a->wo, sizeof a->wo);
    const int32_t perm[4] = {0, 2, 1, 3};
    const char *names[3] = {"q", "k", "v"};
    size_t heads[3];
    for (size_t i = 0; i < 3; i++) {
        char name[32];
        PolyclSource mm_in[2] = {ag_w(i), ag_in(0)};
        size_t mm = ag_add_node(g, "MUL_MAT", NULL, 0, mm_in, 2, names[i], AG_F32, ag_shape(4, AG_HD, -1, 1, AG_B));
        PolyclSource r_in[1] = {ag_node(mm, 0)};
        snprintf(name, sizeof name, "%s_heads", names[i]);
        size_t r = ag_add_node(g, "RESHAPE", NULL, 0, r_in, 1, name, AG_F32, ag_shape(4, AG_D, AG_H, -1, AG_B));
        PolyclSource p_in[1] = {ag_node(r, 0)};
        snprintf(name, sizeof name, "%s_p", names[i]);
        heads[i] = ag_add_node(g, "PERMUTE", perm, sizeof perm, p_in, 1, name, AG_F32, ag_shape(4, AG_D, -1, AG_H, AG_B));
    }
    PolyclSource k_in[3] = {ag_node(heads[1], 0), ag_in(1), ag_in(2)};
    size_t kc = ag_add_node(g, "SET_ROWS", NULL, 0, k_in, 3, "k_cache_out", AG_F16, ag_shape(4, AG_D, -1, AG_H, AG_B));
    PolyclSource v_in[3] = {ag_node(heads[2], 0), ag_in(1), ag_in(3)};
    size_t vc = ag_add_node(g, "SET_ROWS", NULL, 0, v_in, 3, "v_cache_out", AG_F16, ag_shape(4, AG_D, -1, AG_H, AG_B));
    const float fa[3] = {1.0f / sqrtf((float)AG_D), 0.0f, 0.0f};
    PolyclSource fa_in[3] = {ag_node(heads[0], 0), ag_node(kc, 0), ag_node(vc, 0)};
    size_t at = ag_add_node(g, "FLASH_ATTN_EXT", fa, sizeof fa, fa_in, 3, "attn", AG_F32, ag_shape(4, AG_D, AG_H, -1, AG_B));
    PolyclSource fl_in[1] = {ag_node(at, 0)};
    size_t fl = ag_add_node(g, "RESHAPE", NULL, 0, fl_in, 1, "attn_flat", AG_F32, ag_shape(4, AG_HD, -1, 1, AG_B));
    PolyclSource o_in[2] = {ag_w(3), ag_node(fl, 0)};
    size_t o = ag_add_node(g, "MUL_MAT", NULL, 0, o_in, 2, "out", AG_F32, ag_shape(4, AG_C, -1, 1, AG_B));
    ag_add_output(g, ag_node(o, 0));
    ag_add_output(g, ag_node(kc, 0));
    ag_add_output(g, ag_node(vc, 0));
}

/* Bytes of one f16 cache row (D elements). */
#define AG_ROW (AG_D * 2)

/* A host-owned cache: [D, n, H, B] f16, contiguous. */
typedef struct AgCache {
    unsigned char *k, *v;
    int64_t n;
} AgCache;

/* Beam b of the cache takes beam perm[b] (what Gather(beam_idx) does in-graph). */
static inline void ag_cache_permute(AgCache *c, const int32_t *perm) {
    size_t per_beam = (size_t)(AG_ROW * c->n * AG_H);
    if (per_beam == 0) return;
    unsigned char *bufs[2] = {c->k, c->v};
    for (int w = 0; w < 2; w++) {
        unsigned char *tmp = malloc(per_beam * AG_B);
        for (int b = 0; b < AG_B; b++) memcpy(tmp + b * per_beam, bufs[w] + (size_t)perm[b] * per_beam, per_beam);
        memcpy(bufs[w], tmp, per_beam * AG_B);
        free(tmp);
    }
}

/* The cache with one zero row per (head, beam) appended: the rows SET_ROWS fills. */
static inline unsigned char *ag_cache_grow(const unsigned char *c, int64_t n) {
    unsigned char *out = calloc((size_t)((n + 1) * AG_H * AG_B * AG_ROW), 1);
    for (int64_t hb = 0; hb < AG_H * AG_B; hb++)
        if (n) memcpy(out + hb * (n + 1) * AG_ROW, c + hb * n * AG_ROW, (size_t)(n * AG_ROW));
    return out;
}

/* Reads output `name` into a fresh buffer of exactly `expect` bytes (exits otherwise). */
static inline void *ag_output(PolyclInferRequest *r, const char *name, size_t expect) {
    int32_t type;
    PolyclShape shape;
    size_t size;
    AG_CHECK(polycl_infer_request_output_info(r, name, &type, &shape, &size));
    if (size != expect) {
        fprintf(stderr, "output %s has %zu bytes, expected %zu\n", name, size, expect);
        exit(1);
    }
    void *buf = malloc(size ? size : 1);
    AG_CHECK(polycl_infer_request_get_output(r, name, buf, size));
    return buf;
}

/* One decode step of the stateless model: the host passes its caches (grown by
 * one row) and keeps the updated ones. Writes out[C*B]. */
static inline void ag_step_stateless(PolyclInferRequest *r, AgCache *c, const float *x, float *out) {
    int64_t idx = c->n;
    PolyclShape xs = ag_shape(4, AG_C, 1, 1, AG_B), is = ag_shape(1, 1, 1, 1, 1);
    PolyclShape cs = ag_shape(4, AG_D, c->n + 1, AG_H, AG_B);
    size_t cbytes = (size_t)((c->n + 1) * AG_H * AG_B * AG_ROW);
    unsigned char *k = ag_cache_grow(c->k, c->n), *v = ag_cache_grow(c->v, c->n);
    AG_CHECK(polycl_infer_request_set_input(r, "x", &xs, x, sizeof(float) * AG_C * AG_B));
    AG_CHECK(polycl_infer_request_set_input(r, "idx", &is, &idx, sizeof idx));
    AG_CHECK(polycl_infer_request_set_input(r, "k_cache", &cs, k, cbytes));
    AG_CHECK(polycl_infer_request_set_input(r, "v_cache", &cs, v, cbytes));
    AG_CHECK(polycl_infer_request_infer(r));
    free(k);
    free(v);
    free(c->k);
    free(c->v);
    c->k = ag_output(r, "k_cache_out", cbytes);
    c->v = ag_output(r, "v_cache_out", cbytes);
    c->n += 1;
    float *o = ag_output(r, "out", sizeof(float) * AG_C * AG_B);
    memcpy(out, o, sizeof(float) * AG_C * AG_B);
    free(o);
}

/* One decode step of the stateful model: polycl keeps the caches; `beam_idx`
 * reorders them first. idx is still an input of the graph but unused. */
static inline void ag_step_stateful(PolyclInferRequest *r, int64_t n_past, const float *x, const int32_t *beam_idx,
                             float *out) {
    PolyclShape xs = ag_shape(4, AG_C, 1, 1, AG_B), is = ag_shape(1, 1, 1, 1, 1), bs = ag_shape(1, AG_B, 1, 1, 1);
    AG_CHECK(polycl_infer_request_set_input(r, "x", &xs, x, sizeof(float) * AG_C * AG_B));
    AG_CHECK(polycl_infer_request_set_input(r, "idx", &is, &n_past, sizeof n_past));
    AG_CHECK(polycl_infer_request_set_input(r, "beam_idx", &bs, beam_idx, sizeof(int32_t) * AG_B));
    AG_CHECK(polycl_infer_request_infer(r));
    float *o = ag_output(r, "out", sizeof(float) * AG_C * AG_B);
    memcpy(out, o, sizeof(float) * AG_C * AG_B);
    free(o);
}

/* The beam order of decode step `step` in the examples' reordering schedule. */
static inline void ag_beam_order(int step, int permute, int32_t *perm) {
    for (int b = 0; b < AG_B; b++) perm[b] = b;
    if (!permute) return;
    if (step % 3 == 1) {
        perm[0] = 1;
        perm[1] = 1;
    } else if (step % 2 == 0) {
        perm[0] = 1;
        perm[1] = 0;
    }
}

#endif /* POLYCL_ATTENTION_GRAPH_H */
