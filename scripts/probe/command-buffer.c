// Whether a recorded command buffer (cl_khr_command_buffer) runs a decode-
// shaped chain of kernels faster than the same kernels enqueued one by one:
// prints the device's command-buffer extensions, then the wall time per step
// of a chain of dependent kernels, enqueued and replayed, for empty kernels
// and for kernels that each stream a few MB (a matvec's shape).
// Build: cc -O2 command-buffer.c -lOpenCL   Run: ./a.out [kernels per step]
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *SRC =
    "kernel void empty(global int *a) { if (get_global_id(0) == 1 << 30) a[0] = 1; }\n"
    // Each group sums a slice of x (uint4 loads) and adds it to y[group]:
    // the next kernel of the chain reads y, so the chain is dependent.
    "kernel void stream(const global uint4 *x, global uint *y, uint n4) {\n"
    "  local uint s[256]; const uint l = get_local_id(0), g = get_group_id(0);\n"
    "  const uint per = n4 / get_num_groups(0); uint t = y[g];\n"
    "  for (uint i = g * per + l; i < (g + 1) * per; i += 256) { uint4 v = x[i]; t += v.x ^ v.y ^ v.z ^ v.w; }\n"
    "  s[l] = t; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (uint k = 128; k > 0; k >>= 1) { if (l < k) s[l] += s[l + k]; barrier(CLK_LOCAL_MEM_FENCE); }\n"
    "  if (l == 0) y[g] = s[0]; }\n";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

#define GET(p, name) ((name##_fn)clGetExtensionFunctionAddressForPlatform(p, #name))

int main(int argc, char **argv) {
    const int chain = argc > 1 ? atoi(argv[1]) : 228;
    cl_platform_id p;
    cl_device_id d;
    cl_int e;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    char name[256];
    static char ext[65536];
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, sizeof ext, ext, NULL);
    printf("device: %s\nextensions: %s\n", name, ext);
    const int has_cb = strstr(ext, "cl_khr_command_buffer") != NULL;
    cl_device_command_buffer_capabilities_khr caps = 0;
    if (has_cb) {
        cl_command_queue_properties req = 0;
        clGetDeviceInfo(d, CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR, sizeof caps, &caps, NULL);
        clGetDeviceInfo(d, CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR, sizeof req, &req, NULL);
        size_t sz = 0;
        clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS_WITH_VERSION, 0, NULL, &sz);
        cl_name_version *nv = malloc(sz);
        clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS_WITH_VERSION, sz, nv, NULL);
        for (size_t i = 0; i < sz / sizeof *nv; ++i)
            if (strstr(nv[i].name, "command_buffer"))
                printf("%s version %u.%u.%u\n", nv[i].name, CL_VERSION_MAJOR(nv[i].version),
                       CL_VERSION_MINOR(nv[i].version), CL_VERSION_PATCH(nv[i].version));
        printf("command buffer capabilities 0x%llx, required queue properties 0x%llx\n",
               (unsigned long long)caps, (unsigned long long)req);
    } else {
        printf("no cl_khr_command_buffer: only the enqueued chains are timed\n");
    }
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, d, NULL, &e);
    cl_program pr = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
    if (clBuildProgram(pr, 1, &d, "", NULL, NULL)) {
        char log[8192];
        clGetProgramBuildInfo(pr, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        printf("build failed: %s\n", log);
        return 1;
    }
    // 1 GiB of "weights" so consecutive streaming kernels miss L2.
    const size_t total = (size_t)1 << 30;
    cl_mem w = clCreateBuffer(ctx, CL_MEM_READ_WRITE, total, NULL, &e);
    cl_mem y = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &e);
    unsigned char zero = 0;
    clEnqueueFillBuffer(q, w, &zero, 1, 0, total, 0, NULL, NULL);
    clEnqueueFillBuffer(q, y, &zero, 1, 0, 1 << 20, 0, NULL, NULL);
    clFinish(q);
    struct {
        const char *name;
        size_t mb, groups;
    } cases[] = {{"empty, 512 groups of 128", 0, 512}, {"stream 1 MB, 64 groups", 1, 64},
                 {"stream 9 MB, 528 groups", 9, 528}, {"stream 25 MB, 528 groups", 25, 528}};
    clCreateCommandBufferKHR_fn create = has_cb ? GET(p, clCreateCommandBufferKHR) : NULL;
    clCommandNDRangeKernelKHR_fn record = has_cb ? GET(p, clCommandNDRangeKernelKHR) : NULL;
    clFinalizeCommandBufferKHR_fn finalize = has_cb ? GET(p, clFinalizeCommandBufferKHR) : NULL;
    clEnqueueCommandBufferKHR_fn replay = has_cb ? GET(p, clEnqueueCommandBufferKHR) : NULL;
    clReleaseCommandBufferKHR_fn release = has_cb ? GET(p, clReleaseCommandBufferKHR) : NULL;
    const int steps = 50;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        // One kernel object per launch, as the plan binds them.
        cl_kernel *k = malloc(sizeof(cl_kernel) * chain);
        const size_t slice = cases[c].mb << 20;
        const size_t per_step = slice * chain;
        for (int i = 0; i < chain; ++i) {
            if (cases[c].mb == 0) {
                k[i] = clCreateKernel(pr, "empty", &e);
                clSetKernelArg(k[i], 0, sizeof(cl_mem), &y);
            } else {
                k[i] = clCreateKernel(pr, "stream", &e);
                cl_buffer_region r = {((slice * i) % (total - slice)) & ~(size_t)4095, slice};
                cl_mem sub = clCreateSubBuffer(w, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &e);
                cl_uint n4 = (cl_uint)(slice / 16);
                clSetKernelArg(k[i], 0, sizeof(cl_mem), &sub);
                clSetKernelArg(k[i], 1, sizeof(cl_mem), &y);
                clSetKernelArg(k[i], 2, sizeof n4, &n4);
            }
        }
        const size_t local = cases[c].mb ? 256 : 128, global = cases[c].groups * local;
        for (int s = 0; s < 3; ++s)
            for (int i = 0; i < chain; ++i) clEnqueueNDRangeKernel(q, k[i], 1, NULL, &global, &local, 0, NULL, NULL);
        clFinish(q);
        double t0 = now();
        for (int s = 0; s < steps; ++s)
            for (int i = 0; i < chain; ++i) clEnqueueNDRangeKernel(q, k[i], 1, NULL, &global, &local, 0, NULL, NULL);
        clFinish(q);
        const double enq = (now() - t0) / steps;
        double t3 = now();
        for (int s = 0; s < steps; ++s) {
            for (int i = 0; i < chain; ++i) clEnqueueNDRangeKernel(q, k[i], 1, NULL, &global, &local, 0, NULL, NULL);
            clFinish(q);
        }
        const double enq_sync = (now() - t3) / steps;
        printf("%-28s chain of %d: enqueued %8.1f us/step (%5.2f us/kernel", cases[c].name, chain, enq, enq / chain);
        if (cases[c].mb) printf(", %6.0f GB/s", per_step / enq / 1e3);
        printf("), one step at a time %8.1f us\n", enq_sync);
        if (has_cb) {
            // Without simultaneous use, a replay while the last is pending is
            // refused; the one-step-at-a-time row is then the one that counts.
            cl_command_buffer_properties_khr props[] = {
                CL_COMMAND_BUFFER_FLAGS_KHR,
                caps & CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR ? CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR : 0, 0};
            cl_command_buffer_khr cb = create(1, &q, props, &e);
            if (e) {
                printf("  clCreateCommandBufferKHR: %d\n", e);
                continue;
            }
            for (int i = 0; i < chain && !e; ++i) e = record(cb, NULL, NULL, k[i], 1, NULL, &global, &local, 0, NULL, NULL, NULL);
            if (!e) e = finalize(cb);
            if (e) {
                printf("  record/finalize: %d\n", e);
                continue;
            }
            for (int s = 0; s < 3; ++s) replay(1, &q, cb, 0, NULL, NULL);
            clFinish(q);
            double t1 = now();
            for (int s = 0; s < steps; ++s) e |= replay(1, &q, cb, 0, NULL, NULL);
            clFinish(q);
            const double rep = (now() - t1) / steps;
            double t2 = now();
            for (int s = 0; s < steps; ++s) {
                e |= replay(1, &q, cb, 0, NULL, NULL);
                clFinish(q);
            }
            const double rep_sync = (now() - t2) / steps;
            printf("%28s replayed %8.1f us/step (%5.2f us/kernel, ratio %.2f), one step at a time %8.1f us, err %d\n",
                   "", rep, rep / chain, enq / rep, rep_sync, e);
            release(cb);
        }
        for (int i = 0; i < chain; ++i) clReleaseKernel(k[i]);
        free(k);
    }
    return 0;
}
