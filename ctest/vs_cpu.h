/* What the programs that compare POLYCL0 against ggml's CPU backend share:
 * opening both backends, and the error measure they are judged by. */
#ifndef POLYCL_CTEST_VS_CPU_H
#define POLYCL_CTEST_VS_CPU_H

#include <stddef.h>
#include <stdio.h>

#include "ggml-backend.h"

/* Loads the host's backends and the plugin at `plugin`, then opens POLYCL0
 * (its device in *dev) and the CPU backend; 0 and a message on failure. */
static int open_polycl_and_cpu(const char *plugin, ggml_backend_dev_t *dev, ggml_backend_t *pc,
                               ggml_backend_t *cpu) {
    ggml_backend_load_all_from_path(GGML_BIN_DIR);
    if (!ggml_backend_load(plugin)) {
        fprintf(stderr, "cannot load %s\n", plugin);
        return 0;
    }
    *dev = ggml_backend_dev_by_name("POLYCL0");
    if (!*dev) {
        fprintf(stderr, "no POLYCL0 device\n");
        return 0;
    }
    *pc = ggml_backend_dev_init(*dev, NULL);
    *cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    if (!*pc || !*cpu) {
        fprintf(stderr, "backend init failed: polycl %p, cpu %p\n", (void *)*pc, (void *)*cpu);
        return 0;
    }
    return 1;
}

/* Normalized mean squared error of `out` against the CPU's `ref`. */
static double nmse(const float *out, const float *ref, size_t n) {
    double err = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        err += (out[i] - ref[i]) * (double)(out[i] - ref[i]);
        sq += ref[i] * (double)ref[i];
    }
    return err / sq;
}

#endif
