/* dlopens the plugin like a ggml host would, without providing ggml:
 * the exports must be there, ggml_backend_init must refuse (NULL, with a log
 * line) because ggml-base is missing, and the score must reflect OpenCL. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "polycl.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIB --expect-devices|--expect-score-zero\n", argv[0]);
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    const char *names[] = {"ggml_backend_init", "ggml_backend_score", "polycl_version", "polycl_last_error",
                           "polycl_device_count"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!dlsym(h, names[i])) {
            fprintf(stderr, "missing export %s\n", names[i]);
            return 1;
        }
    }
    int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
    void *(*init)(void) = (void *(*)(void))dlsym(h, "ggml_backend_init");
    const char *(*version)(void) = (const char *(*)(void))dlsym(h, "polycl_version");
    PolyclStatus (*count)(int *) = (PolyclStatus(*)(int *))dlsym(h, "polycl_device_count");
    const char *(*last_error)(void) = (const char *(*)(void))dlsym(h, "polycl_last_error");

    printf("polycl %s, score %d\n", version(), score());
    if (init() != NULL) {
        fprintf(stderr, "ggml_backend_init returned a registry without a ggml host\n");
        return 1;
    }
    if (count(NULL) != POLYCL_STATUS_INVALID_ARGUMENT || strlen(last_error()) == 0) {
        fprintf(stderr, "polycl_device_count(NULL) did not fail cleanly\n");
        return 1;
    }
    int n = -1;
    if (count(&n) != POLYCL_STATUS_OK) {
        fprintf(stderr, "polycl_device_count failed: %s\n", last_error());
        return 1;
    }
    if (strcmp(argv[2], "--expect-score-zero") == 0) {
        if (score() != 0 || n != 0) {
            fprintf(stderr, "expected score 0 and no devices, got %d and %d\n", score(), n);
            return 1;
        }
    } else if (score() <= 0 || n <= 0) {
        fprintf(stderr, "expected OpenCL devices, got score %d and %d devices\n", score(), n);
        return 1;
    }
    printf("ok: %d devices\n", n);
    return 0;
}
