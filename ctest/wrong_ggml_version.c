/* A host that exports ggml-base's symbols but is another ggml version: the
 * plugin must return NULL from ggml_backend_init and say why. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

/* Exported from this executable (ENABLE_EXPORTS), found by dlsym(RTLD_DEFAULT). */
const char *ggml_version(void) { return "0.9.1"; }
void *ggml_backend_buffer_init(void *buft, void *iface, void *ctx, size_t size);
void *ggml_backend_buffer_init(void *buft, void *iface, void *ctx, size_t size) {
    (void)buft; (void)iface; (void)ctx; (void)size;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    void *(*init)(void) = (void *(*)(void))dlsym(h, "ggml_backend_init");
    if (!init) return 1;
    if (init() != NULL) {
        fprintf(stderr, "ggml_backend_init accepted ggml 0.9.1\n");
        return 1;
    }
    printf("ok: refused\n");
    return 0;
}
