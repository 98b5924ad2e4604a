// Builds one OpenCL source file on the first device with the given options
// and prints the build status and log: a check that a kernel file compiles
// on a device without running anything. Build: cc build-check.c -lOpenCL
// Usage: build-check FILE.cl "OPTIONS" [BINARY]   (BINARY: where to write the
// program binary, PTX on NVIDIA)
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE.cl OPTIONS\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *src = malloc(n + 1);
    if (!src || fread(src, 1, n, f) != (size_t)n) { fprintf(stderr, "read failed\n"); return 2; }
    src[n] = 0;
    fclose(f);
    cl_platform_id p;
    cl_device_id d;
    cl_int e;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    char name[256] = {0};
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    const char *s = src;
    cl_program pr = clCreateProgramWithSource(ctx, 1, &s, NULL, &e);
    cl_int rc = clBuildProgram(pr, 1, &d, argv[2], NULL, NULL);
    size_t len = 0;
    clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, 0, NULL, &len);
    char *log = malloc(len + 1);
    clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, len, log, NULL);
    log[len] = 0;
    printf("%s: %s build %s\n%s\n", name, argv[1], rc == CL_SUCCESS ? "ok" : "FAILED", log);
    if (rc == CL_SUCCESS && argc > 3) {
        size_t bytes = 0;
        clGetProgramInfo(pr, CL_PROGRAM_BINARY_SIZES, sizeof bytes, &bytes, NULL);
        unsigned char *bin = malloc(bytes);
        clGetProgramInfo(pr, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL);
        FILE *o = fopen(argv[3], "wb");
        if (!o || fwrite(bin, 1, bytes, o) != bytes) { perror(argv[3]); return 1; }
        fclose(o);
    }
    return rc == CL_SUCCESS ? 0 : 1;
}
