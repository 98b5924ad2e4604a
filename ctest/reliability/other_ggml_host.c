/* Hosts whose ggml is not the pinned one (ctest/wrong_ggml_version.c covers
 * an older version string): each variant exports a different wrong set of
 * ggml-base symbols from this executable, and the plugin must refuse in
 * ggml_backend_init (NULL, every time), say why, and still answer its other
 * exported entry points without crashing.
 *
 *   VARIANT 1: ggml_backend_buffer_init but no ggml_version (predates it)
 *   VARIANT 2: ggml_version() returns NULL
 *   VARIANT 3: a newer ggml, "0.26.0"
 *   VARIANT 4: no ggml symbols at all */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#if VARIANT != 4
void *ggml_backend_buffer_init(void *buft, void *iface, void *ctx, size_t size);
void *ggml_backend_buffer_init(void *buft, void *iface, void *ctx, size_t size) {
    (void)buft; (void)iface; (void)ctx; (void)size;
    return NULL;
}
#endif
#if VARIANT == 2
const char *ggml_version(void);
const char *ggml_version(void) { return NULL; }
#elif VARIANT == 3
const char *ggml_version(void);
const char *ggml_version(void) { return "0.26.0"; }
#endif

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    void *(*init)(void) = (void *(*)(void))dlsym(h, "ggml_backend_init");
    int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
    const char *(*version)(void) = (const char *(*)(void))dlsym(h, "polycl_version");
    if (!init || !score || !version) return 1;
    for (int i = 0; i < 2; i++) {
        if (init() != NULL) {
            fprintf(stderr, "variant %d: ggml_backend_init accepted a wrong host\n", VARIANT);
            return 1;
        }
    }
    int s = score();
    printf("variant %d: refused; score %d; polycl %s\n", VARIANT, s, version());
    return 0;
}
