/* Threads on the ggml path, repeated RUNS times:
 *  - two backends on two devices (POCL_DEVICES="pthread pthread" gives two;
 *    with one device both use it) computing from two threads at once;
 *  - four threads computing different graphs on ONE backend at once, so its
 *    plan cache and the device's program cache are hit concurrently.
 * Every result must equal ggml's CPU backend.
 *
 *   threads PLUGIN [RUNS] */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "common.h"

static Plugin P;
static float REF[SM];
static pthread_barrier_t BAR;

typedef struct {
    ggml_backend_t be;
    ggml_backend_buffer_type_t buft;
    int iters;
    int bad;
} Job;

static void *worker(void *arg) {
    Job *j = (Job *)arg;
    pthread_barrier_wait(&BAR);
    for (int i = 0; i < j->iters; i++) {
        int ok;
        enum ggml_status st = small_run(j->be, j->buft, REF, &ok);
        if (st != GGML_STATUS_SUCCESS || !ok) {
            fprintf(stderr, "iteration %d: status %d, match %d\n", i, st, ok);
            j->bad++;
        }
    }
    return NULL;
}

static void run_jobs(Job *jobs, int n) {
    pthread_t t[8];
    pthread_barrier_init(&BAR, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) REQUIRE(pthread_create(&t[i], NULL, worker, &jobs[i]) == 0, "pthread_create");
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&BAR);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int runs = argc > 2 ? atoi(argv[2]) : 10;
    setvbuf(stdout, NULL, _IONBF, 0);
    ggml_backend_load_all_from_path(GGML_BIN_DIR);
    small_reference(REF);
    P = plugin_open(argv[1]);
    size_t n_dev = P.reg->iface.get_device_count(P.reg);
    REQUIRE(n_dev >= 1, "no device");
    ggml_backend_dev_t d0 = P.reg->iface.get_device(P.reg, 0);
    ggml_backend_dev_t d1 = P.reg->iface.get_device(P.reg, n_dev > 1 ? 1 : 0);
    printf("%zu device(s): threads on %s and %s\n", n_dev, d0->iface.get_name(d0), d1->iface.get_name(d1));
    for (int r = 0; r < runs; r++) {
        /* Two backends, two devices, two threads. */
        Job two[2] = {
            {backend_on(d0), d0->iface.get_buffer_type(d0), 6, 0},
            {backend_on(d1), d1->iface.get_buffer_type(d1), 6, 0},
        };
        run_jobs(two, 2);
        for (int i = 0; i < 2; i++) {
            CHECK(two[i].bad == 0, "run %d, device thread %d: %d bad computes", r, i, two[i].bad);
            ggml_backend_free(two[i].be);
        }
        /* Four threads on one backend (each graph its own tensors). */
        ggml_backend_t shared = backend_on(d0);
        Job four[4];
        for (int i = 0; i < 4; i++) {
            four[i].be = shared;
            four[i].buft = d0->iface.get_buffer_type(d0);
            four[i].iters = 4;
            four[i].bad = 0;
        }
        run_jobs(four, 4);
        for (int i = 0; i < 4; i++) CHECK(four[i].bad == 0, "run %d, shared thread %d: %d bad", r, i, four[i].bad);
        ggml_backend_free(shared);
    }
    return finish("threads");
}
