/* The ggml vtables of the plugin under bad input, forced panics and device
 * faults. Each mode is one ctest (some with POLYCL_FAULT or
 * POLYCL_MEM_LIMIT_MB in their environment):
 *
 *   vtables PLUGIN null-args        NULL (and foreign objects) at every pointer argument
 *   vtables PLUGIN bounds           set/get/memset outside a tensor's or buffer's bytes
 *   vtables PLUGIN unsupported-type a tensor type polycl does not support, computed
 *   vtables PLUGIN fault            the first compute fails (POLYCL_FAULT=build or queue@N),
 *                                   a compute on a fresh backend works
 *   vtables PLUGIN mem-limit        allocations beyond POLYCL_MEM_LIMIT_MB are refused
 *   vtables PLUGIN panic-KIND       every entry of KIND panics once (POLYCL_FAULT lists them):
 *                                   the entry answers its default or a failure status,
 *                                   the process goes on, and the entry works again
 *
 * Failures of void entries (set_tensor, memset_tensor, clear, synchronize, ...)
 * must make the next graph_compute of a backend on that device fail once. */
#include "common.h"

static Plugin P;
static float REF[SM];

/* A backend whose next compute must report an earlier void failure once. */
static void expect_reported(ggml_backend_t be, const char *what) {
    int ok;
    enum ggml_status st = small_run(be, P.buft, REF, &ok);
    CHECK(st == GGML_STATUS_FAILED, "%s: next compute gave %d, not FAILED", what, st);
    st = small_run(be, P.buft, REF, &ok);
    CHECK(st == GGML_STATUS_SUCCESS && ok, "%s: the compute after it gave %d (match %d)", what, st, ok);
}

static void expect_clean(ggml_backend_t be, const char *what) {
    int ok;
    enum ggml_status st = small_run(be, P.buft, REF, &ok);
    CHECK(st == GGML_STATUS_SUCCESS && ok, "%s: compute gave %d (match %d)", what, st, ok);
}

static int null_args(void) {
    ggml_backend_reg_t reg = P.reg;
    ggml_backend_dev_t dev = P.dev;
    ggml_backend_buffer_type_t buft = P.buft;
    ggml_backend_t cpu = cpu_backend();
    ggml_backend_dev_t cpu_dev = ggml_backend_get_device(cpu);
    ggml_backend_buffer_type_t cpu_buft = ggml_backend_get_default_buffer_type(cpu);

    /* Registry: the reg argument is not read; an index past the end is NULL. */
    CHECK(strcmp(reg->iface.get_name(NULL), "POLYCL") == 0, "reg get_name(NULL)");
    CHECK(reg->iface.get_device_count(NULL) >= 1, "reg get_device_count(NULL)");
    CHECK(reg->iface.get_device(NULL, 0) == dev, "reg get_device(NULL, 0)");
    CHECK(reg->iface.get_device(reg, 999) == NULL, "reg get_device(999)");
    CHECK(reg->iface.get_proc_address(reg, NULL) == NULL, "get_proc_address(NULL name)");
    CHECK(reg->iface.get_proc_address(NULL, "no_such_function") == NULL, "get_proc_address(unknown)");
    void (*set_threads)(ggml_backend_t, int) =
        (void (*)(ggml_backend_t, int))reg->iface.get_proc_address(reg, "ggml_backend_set_n_threads");
    CHECK(set_threads != NULL, "set_n_threads proc");
    if (set_threads) set_threads(NULL, 4);

    /* Device entries with NULL or a foreign (CPU) device. */
    ggml_backend_dev_t bad[2] = {NULL, cpu_dev};
    for (int i = 0; i < 2; i++) {
        ggml_backend_dev_t d = bad[i];
        CHECK(dev->iface.get_name(d) == NULL, "device get_name(%s)", i ? "cpu" : "NULL");
        CHECK(dev->iface.get_description(d) == NULL, "device get_description");
        size_t f = 7, t = 7;
        dev->iface.get_memory(d, &f, &t);
        CHECK(f == 0 && t == 0, "device get_memory(bad) wrote %zu %zu", f, t);
        (void)dev->iface.get_type(d);
        struct ggml_backend_dev_props props;
        memset(&props, 0x5a, sizeof props);
        dev->iface.get_props(d, &props);
        CHECK(props.memory_total == 0x5a5a5a5a5a5a5a5aull, "device get_props(bad) wrote props");
        CHECK(dev->iface.init_backend(d, NULL) == NULL, "init_backend(bad)");
        CHECK(dev->iface.get_buffer_type(d) == NULL, "get_buffer_type(bad)");
        CHECK(dev->iface.supports_buft(d, buft) == false, "supports_buft(bad dev)");
    }
    dev->iface.get_memory(dev, NULL, NULL);
    dev->iface.get_props(dev, NULL);
    CHECK(dev->iface.supports_op(dev, NULL) == false, "supports_op(NULL op)");
    CHECK(dev->iface.supports_buft(dev, NULL) == false, "supports_buft(NULL)");
    CHECK(dev->iface.supports_buft(dev, cpu_buft) == false, "supports_buft(cpu buft)");

    /* Buffer type entries. */
    ggml_backend_buffer_type_t badt[2] = {NULL, cpu_buft};
    for (int i = 0; i < 2; i++) {
        CHECK(buft->iface.get_name(badt[i]) == NULL, "buft get_name(bad)");
        CHECK(buft->iface.alloc_buffer(badt[i], 64) == NULL, "alloc_buffer(bad)");
        CHECK(buft->iface.get_max_size(badt[i]) == 0, "get_max_size(bad)");
        CHECK(buft->iface.get_alignment(badt[i]) == 128, "get_alignment(bad)");
    }

    /* Backend and buffer entries: each void failure on POLYCL0 is reported by
     * the next compute of a backend on it, once. */
    ggml_backend_t be = backend_on(dev);
    Small s;
    REQUIRE(small_build(&s, buft), "alloc");
    small_fill(&s);
    ggml_backend_buffer_t b = s.buf;
    struct ggml_backend_buffer_i bi = b->iface;
    float tmp[SK];
    CHECK(bi.get_base(NULL) == NULL, "get_base(NULL)");
    bi.free_buffer(NULL);
    bi.clear(NULL, 0);
    expect_clean(be, "after free_buffer(NULL)/clear(NULL) (no device to charge)");
    bi.memset_tensor(b, NULL, 0, 0, 4);
    expect_reported(be, "memset_tensor(buffer, NULL tensor)");
    bi.memset_tensor(NULL, s.x, 0, 0, 4);
    expect_reported(be, "memset_tensor(NULL buffer, tensor)");
    bi.set_tensor(b, NULL, tmp, 0, 4);
    expect_reported(be, "set_tensor(NULL tensor)");
    bi.set_tensor(b, s.x, NULL, 0, 4);
    expect_reported(be, "set_tensor(NULL data)");
    bi.set_tensor(NULL, s.x, tmp, 0, 4);
    expect_reported(be, "set_tensor(NULL buffer)");
    bi.get_tensor(b, NULL, tmp, 0, 4);
    expect_reported(be, "get_tensor(NULL tensor)");
    bi.get_tensor(b, s.x, NULL, 0, 4);
    expect_reported(be, "get_tensor(NULL data)");
    bi.get_tensor(NULL, s.x, tmp, 0, 4);
    expect_reported(be, "get_tensor(NULL buffer)");
    CHECK(bi.cpy_tensor(NULL, s.x, s.x) == false, "cpy_tensor(NULL buffer)");
    CHECK(bi.cpy_tensor(b, NULL, s.x) == false, "cpy_tensor(NULL src)");
    CHECK(bi.cpy_tensor(b, s.x, NULL) == false, "cpy_tensor(NULL dst)");
    /* Zero-size transfers with NULL data are no-ops, not failures. */
    bi.set_tensor(b, s.x, NULL, 0, 0);
    bi.get_tensor(b, s.x, NULL, 0, 0);
    expect_clean(be, "after zero-size transfers");

    /* A failure charged before a backend existed is not that backend's. */
    bi.set_tensor(b, s.x, NULL, 0, 4);
    ggml_backend_t be2 = backend_on(dev);
    expect_clean(be2, "fresh backend after a failure");
    expect_reported(be, "older backend after the same failure");

    struct ggml_backend_i ii = be->iface;
    CHECK(ii.get_name(NULL) == NULL, "backend get_name(NULL)");
    ii.free(NULL);
    ii.synchronize(NULL);
    CHECK(ii.graph_compute(NULL, s.gf) == GGML_STATUS_FAILED, "graph_compute(NULL backend)");
    CHECK(ii.graph_compute(be, NULL) == GGML_STATUS_FAILED, "graph_compute(NULL graph)");
    CHECK(ii.graph_compute(cpu, s.gf) == GGML_STATUS_FAILED, "our graph_compute on the CPU backend");
    /* A graph whose node list cannot be walked. */
    struct ggml_tensor **nodes = s.gf->nodes;
    s.gf->nodes = NULL;
    CHECK(ii.graph_compute(be, s.gf) == GGML_STATUS_FAILED, "graph with a NULL node array");
    s.gf->nodes = nodes;
    struct ggml_tensor *keep = nodes[0];
    nodes[0] = NULL;
    CHECK(ii.graph_compute(be, s.gf) == GGML_STATUS_FAILED, "graph with a NULL node");
    nodes[0] = keep;
    /* A tensor whose data is not in any polycl buffer (host memory). */
    void *data = s.x->data;
    s.x->data = tmp;
    CHECK(ii.graph_compute(be, s.gf) == GGML_STATUS_FAILED, "graph reading host memory");
    s.x->data = NULL;
    CHECK(ii.graph_compute(be, s.gf) == GGML_STATUS_FAILED, "graph reading a tensor without data");
    s.x->data = data;
    /* supports_op with a foreign device or odd tensors does not crash. */
    CHECK(dev->iface.supports_op(NULL, s.out) == false, "supports_op(NULL dev)");
    CHECK(dev->iface.supports_op(dev, s.out) == true, "supports_op(softmax)");
    expect_clean(be, "after the refused graphs");

    small_free(&s);
    ggml_backend_free(be);
    ggml_backend_free(be2);
    ggml_backend_free(cpu);
    return finish("null-args");
}

static int bounds(void) {
    ggml_backend_t be = backend_on(P.dev);
    Small s;
    REQUIRE(small_build(&s, P.buft), "alloc");
    small_fill(&s);
    struct ggml_backend_buffer_i bi = s.buf->iface;
    size_t n = ggml_nbytes(s.x), bsize = ggml_backend_buffer_get_size(s.buf);
    float x0[SK], x1[SK], junk[SK * 2];
    for (int i = 0; i < SK * 2; i++) junk[i] = 1e30f;
    ggml_backend_tensor_get(s.x, x0, 0, n);
    struct { size_t off, size; const char *what; } cases[] = {
        {0, n + 4, "4 bytes past the tensor"},
        {n, 4, "at the tensor's end"},
        {n - 4, 8, "straddling the tensor's end"},
        {bsize, 4, "past the buffer's end"},
        {SIZE_MAX - 2, 4, "offset + size overflows"},
        {4, SIZE_MAX, "size overflows"},
    };
    /* polycl must refuse each range before touching `junk` (which holds only
     * 2*SK floats): a huge size is never used to read or write it. */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bi.set_tensor(s.buf, s.x, junk, cases[i].off, cases[i].size);
        expect_reported(be, cases[i].what);
        bi.get_tensor(s.buf, s.x, junk, cases[i].off, cases[i].size);
        expect_reported(be, cases[i].what);
        bi.memset_tensor(s.buf, s.x, 0xff, cases[i].off, cases[i].size);
        expect_reported(be, cases[i].what);
    }
    ggml_backend_tensor_get(s.x, x1, 0, n);
    CHECK(memcmp(x0, x1, n) == 0, "a refused write changed the tensor");
    /* The bias tensor right after x in the buffer is untouched too. */
    float b[SM];
    ggml_backend_tensor_get(s.b, b, 0, sizeof b);
    CHECK(b[0] != 1e30f && b[0] == b[0], "a neighbour was overwritten");
    small_free(&s);
    ggml_backend_free(be);
    return finish("bounds");
}

static int unsupported_type(void) {
    ggml_backend_t be = backend_on(P.dev);
    /* IQ2_XXS weights: a ggml type polycl has no codec for. */
    struct ggml_init_params ip = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *w = ggml_new_tensor_2d(ctx, GGML_TYPE_IQ2_XXS, 256, 8);
    struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 256, 1);
    struct ggml_tensor *y = ggml_mul_mat(ctx, w, x);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    CHECK(P.dev->iface.supports_op(P.dev, y) == false, "supports_op(IQ2_XXS matmul) said yes");
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, P.buft);
    REQUIRE(buf, "alloc");
    ggml_backend_buffer_clear(buf, 0);
    CHECK(ggml_backend_graph_compute(be, gf) == GGML_STATUS_FAILED, "IQ2_XXS matmul computed");
    /* A type id no ggml has, written over a valid tensor. */
    enum ggml_type keep = x->type;
    x->type = (enum ggml_type)99;
    CHECK(ggml_backend_graph_compute(be, gf) == GGML_STATUS_FAILED, "type 99 computed");
    x->type = keep;
    expect_clean(be, "after the unsupported graphs");
    ggml_backend_t fresh = backend_on(P.dev);
    expect_clean(fresh, "fresh backend after the unsupported graphs");
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(be);
    ggml_backend_free(fresh);
    return finish("unsupported-type");
}

/* POLYCL_FAULT=build or queue@N: the first compute fails; then computes on a
 * fresh backend (and the same one) work and match the CPU. */
static int fault(void) {
    ggml_backend_t be = backend_on(P.dev);
    int ok;
    enum ggml_status st = small_run(be, P.buft, REF, &ok);
    CHECK(st == GGML_STATUS_FAILED, "the faulty compute gave %d", st);
    ggml_backend_free(be);
    ggml_backend_t fresh = backend_on(P.dev);
    expect_clean(fresh, "fresh backend after the fault");
    expect_clean(fresh, "second compute after the fault");
    ggml_backend_free(fresh);
    return finish("fault");
}

/* POLYCL_MEM_LIMIT_MB=1 (or POLYCL_FAULT=alloc: the first allocation). */
static int mem_limit(void) {
    int limit = getenv("POLYCL_MEM_LIMIT_MB") != NULL || getenv("POLYCL_FAULT") != NULL;
    ggml_backend_buffer_t big = P.buft->iface.alloc_buffer(P.buft, (size_t)3 << 20);
    CHECK(big == NULL || !limit, "3 MiB allocated under a 1 MiB limit");
    ggml_backend_buffer_t small = P.buft->iface.alloc_buffer(P.buft, (size_t)256 << 10);
    CHECK(small != NULL, "256 KiB refused");
    if (big) ggml_backend_buffer_free(big);
    if (small) ggml_backend_buffer_free(small);
    /* ggml's allocator sees NULL and reports failure, never aborts. */
    ggml_backend_buffer_t huge = ggml_backend_buft_alloc_buffer(P.buft, (size_t)1 << 52);
    CHECK(huge == NULL, "4 PiB allocated");
    ggml_backend_t be = backend_on(P.dev);
    expect_clean(be, "compute within the budget");
    ggml_backend_free(be);
    return finish("mem-limit");
}

/* Every entry of one kind, with POLYCL_FAULT making each panic once. */
static int panic_kind(const char *kind) {
    ggml_backend_dev_t dev = P.dev;
    ggml_backend_buffer_type_t buft = P.buft;
    if (strcmp(kind, "plugin") == 0) {
        /* ggml_backend_init panicked once inside plugin_open (NULL, then the
         * retry worked); ggml_backend_score answers 0 once. */
        int (*score)(void) = (int (*)(void))dlsym(P.lib, "ggml_backend_score");
        CHECK(P.init_refused, "ggml_backend_init under panic did not answer NULL");
        CHECK(score() == 0, "score under panic");
        CHECK(score() == 1, "score after");
    } else if (strcmp(kind, "reg") == 0) {
        ggml_backend_reg_t reg = P.reg;
        CHECK(strcmp(reg->iface.get_name(reg), "POLYCL") == 0, "reg get_name default");
        CHECK(reg->iface.get_device_count(reg) == 0, "reg get_device_count under panic");
        CHECK(reg->iface.get_device(reg, 0) == NULL, "reg get_device under panic");
        CHECK(reg->iface.get_proc_address(reg, "ggml_backend_set_n_threads") == NULL, "proc under panic");
        CHECK(reg->iface.get_device_count(reg) >= 1, "reg get_device_count after");
        CHECK(reg->iface.get_device(reg, 0) != NULL, "reg get_device after");
        CHECK(reg->iface.get_proc_address(reg, "ggml_backend_set_n_threads") != NULL, "proc after");
    } else if (strcmp(kind, "device") == 0) {
        CHECK(dev->iface.get_buffer_type(dev) == NULL, "get_buffer_type under panic");
        buft = dev->iface.get_buffer_type(dev);
        REQUIRE(buft, "get_buffer_type after");
        P.buft = buft;
        size_t f = 1, t = 1;
        struct ggml_backend_dev_props props;
        memset(&props, 0, sizeof props);
        Small s;
        CHECK(dev->iface.get_name(dev) == NULL, "get_name under panic");
        CHECK(dev->iface.get_description(dev) == NULL, "get_description under panic");
        dev->iface.get_memory(dev, &f, &t);
        (void)dev->iface.get_type(dev);
        dev->iface.get_props(dev, &props);
        CHECK(props.name == NULL, "get_props under panic wrote props");
        CHECK(dev->iface.init_backend(dev, NULL) == NULL, "init_backend under panic");
        CHECK(dev->iface.supports_buft(dev, buft) == false, "supports_buft under panic");
        REQUIRE(small_build(&s, buft), "alloc");
        CHECK(dev->iface.supports_op(dev, s.out) == false, "supports_op under panic");
        /* Everything works again. */
        CHECK(strcmp(dev->iface.get_name(dev), "POLYCL0") == 0, "get_name after");
        CHECK(dev->iface.get_description(dev) != NULL, "get_description after");
        dev->iface.get_memory(dev, &f, &t);
        CHECK(t > 0, "get_memory after");
        dev->iface.get_props(dev, &props);
        CHECK(props.name != NULL, "get_props after");
        CHECK(dev->iface.get_buffer_type(dev) == buft, "get_buffer_type after");
        CHECK(dev->iface.supports_buft(dev, buft), "supports_buft after");
        CHECK(dev->iface.supports_op(dev, s.out), "supports_op after");
        small_free(&s);
        ggml_backend_t be = backend_on(dev);
        expect_clean(be, "compute after device panics");
        ggml_backend_free(be);
    } else if (strcmp(kind, "buffer_type") == 0) {
        CHECK(buft->iface.get_name(buft) == NULL, "buft get_name under panic");
        CHECK(buft->iface.alloc_buffer(buft, 1024) == NULL, "alloc_buffer under panic");
        CHECK(buft->iface.get_alignment(buft) == 128, "get_alignment under panic");
        CHECK(buft->iface.get_max_size(buft) == 0, "get_max_size under panic");
        CHECK(buft->iface.get_name(buft) != NULL, "buft get_name after");
        CHECK(buft->iface.get_max_size(buft) > 0, "get_max_size after");
        ggml_backend_t be = backend_on(dev);
        expect_clean(be, "compute after buffer type panics");
        ggml_backend_free(be);
    } else if (strcmp(kind, "buffer") == 0) {
        /* Every buffer entry's first call panics: make those calls first, on
         * raw buffers, before any ggml helper spends them. */
        ggml_backend_t be = backend_on(dev);
        ggml_backend_buffer_t b1 = buft->iface.alloc_buffer(buft, 4096);
        ggml_backend_buffer_t b2 = buft->iface.alloc_buffer(buft, 4096);
        REQUIRE(b1 && b2, "alloc");
        struct ggml_backend_buffer_i bi = b1->iface;
        CHECK(bi.get_base(b1) == NULL, "get_base under panic");
        void *base = bi.get_base(b1);
        CHECK(base != NULL, "get_base after");
        struct ggml_tensor t;
        memset(&t, 0, sizeof t);
        t.type = GGML_TYPE_F32;
        t.ne[0] = 16; t.ne[1] = t.ne[2] = t.ne[3] = 1;
        t.nb[0] = 4; t.nb[1] = t.nb[2] = t.nb[3] = 64;
        t.data = base;
        t.buffer = b1;
        struct ggml_tensor t2 = t;
        t2.data = bi.get_base(b2);
        t2.buffer = b2;
        float v[16], back[16];
        for (int i = 0; i < 16; i++) v[i] = (float)i;
        bi.set_tensor(b1, &t, v, 0, sizeof v);
        bi.get_tensor(b1, &t, back, 0, sizeof back);
        bi.memset_tensor(b1, &t, 0, 0, 4);
        bi.clear(b1, 0);
        CHECK(bi.cpy_tensor(b2, &t, &t2) == false, "cpy_tensor under panic");
        bi.free_buffer(b2); /* panics: nothing is freed, nothing crashes */
        /* The void failures above are reported by the next compute, once. */
        expect_reported(be, "buffer entry panics");
        /* Everything works again. */
        bi.set_tensor(b1, &t, v, 0, sizeof v);
        CHECK(bi.cpy_tensor(b2, &t, &t2) == true, "cpy_tensor after");
        memset(back, 0, sizeof back);
        bi.get_tensor(b2, &t2, back, 0, sizeof back);
        CHECK(memcmp(v, back, sizeof v) == 0, "set/cpy/get after their panics");
        ggml_backend_buffer_free(b1);
        ggml_backend_buffer_free(b2);
        expect_clean(be, "compute after buffer panics");
        ggml_backend_free(be);
    } else if (strcmp(kind, "backend") == 0) {
        ggml_backend_t be = backend_on(dev);
        struct ggml_backend_i ii = be->iface;
        CHECK(ii.get_name(be) == NULL, "backend get_name under panic");
        CHECK(strcmp(ii.get_name(be), "POLYCL0") == 0, "backend get_name after");
        ii.synchronize(be);
        void (*set_threads)(ggml_backend_t, int) =
            (void (*)(ggml_backend_t, int))P.reg->iface.get_proc_address(P.reg, "ggml_backend_set_n_threads");
        set_threads(be, 2);
        int ok;
        enum ggml_status st = small_run(be, buft, REF, &ok);
        CHECK(st == GGML_STATUS_FAILED, "graph_compute under panic gave %d", st);
        /* The panicking synchronize is reported by the next compute. */
        expect_reported(be, "synchronize panic");
        ii.free(be); /* panics: nothing is freed, the process goes on */
        ii.free(be); /* and the free works (LeakSanitizer checks it) */
        ggml_backend_t be2 = backend_on(dev);
        expect_clean(be2, "fresh backend after backend panics");
        ggml_backend_free(be2);
    } else {
        fprintf(stderr, "unknown panic kind %s\n", kind);
        return 2;
    }
    char what[64];
    snprintf(what, sizeof what, "panic-%s", kind);
    return finish(what);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: vtables PLUGIN MODE\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    ggml_backend_load_all_from_path(GGML_BIN_DIR);
    small_reference(REF);
    P = plugin_open(argv[1]);
    const char *mode = argv[2];
    /* panic-reg and panic-device reach their objects through the faulty
     * entries themselves. */
    if (strcmp(mode, "panic-device") == 0) P.dev = P.reg->iface.get_device(P.reg, 0);
    else if (strcmp(mode, "panic-reg") != 0) plugin_devices(&P);
    if (strcmp(mode, "null-args") == 0) return null_args();
    if (strcmp(mode, "bounds") == 0) return bounds();
    if (strcmp(mode, "unsupported-type") == 0) return unsupported_type();
    if (strcmp(mode, "fault") == 0) return fault();
    if (strcmp(mode, "mem-limit") == 0) return mem_limit();
    if (strncmp(mode, "panic-", 6) == 0) return panic_kind(mode + 6);
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
