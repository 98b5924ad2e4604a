// What a chain of dependent kernels costs on the GPU by command-queue mode:
// does an out-of-order queue, with each kernel waiting on its predecessor's
// event, start kernels sooner after their predecessor than an in-order
// queue does (docs/perf.md steps 15 and 38: ~2.6 us of GPU gap a launch)?
// Each kernel of a chain reads the value its predecessor wrote and writes
// the next (a one-group chain, `tiny`), or also streams a slice of a weight-
// sized buffer over a full grid (`stream`). Modes: in-order queue without
// events (polycl today); out-of-order queue, each kernel waiting on the one
// before (its event); out-of-order queue without waits (independent kernels:
// the bound; the chain's values are then not checked). The GPU's span is
// the first kernel's START to the last one's END (profiling events on those
// two only, besides the waits' events).
// Build: cc -O2 queue-modes.c -lOpenCL. Usage: queue-modes [chain length]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *SRC =
    "kernel void tiny(global int *v, int k) {\n"
    "  if (get_global_id(0) == 0) v[k + 1] = v[k] + 1; }\n"
    "kernel void stream(global int *v, int k, const global int4 *w, long n4) {\n"
    "  int4 s = 0; for (long i = get_global_id(0); i < n4; i += get_global_size(0)) s ^= w[i];\n"
    "  if (get_global_id(0) == 0) v[k + 1] = v[k] + 1 + ((s.x ^ s.y ^ s.z ^ s.w) == 0x7fffffff); }\n";

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void check(cl_int e, const char *what) {
    if (e != CL_SUCCESS) {
        fprintf(stderr, "%s failed: %d\n", what, e);
        exit(1);
    }
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 1000;
    cl_platform_id p;
    cl_device_id d;
    cl_int e;
    check(clGetPlatformIDs(1, &p, NULL), "clGetPlatformIDs");
    check(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL), "clGetDeviceIDs");
    cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    check(e, "clCreateContext");
    cl_program pr = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
    check(clBuildProgram(pr, 1, &d, "", NULL, NULL), "clBuildProgram");
    const long wbytes = 8L << 20; // 8 MB a stream kernel, from a 1 GiB buffer (past L2)
    const long wall = 1L << 30;
    cl_mem v = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(int) * (n + 1), NULL, &e);
    cl_mem w = clCreateBuffer(ctx, CL_MEM_READ_ONLY, wall, NULL, &e);
    check(e, "clCreateBuffer");
    const cl_command_queue_properties props[] = {
        CL_QUEUE_PROFILING_ENABLE,
        CL_QUEUE_PROFILING_ENABLE | CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE,
        CL_QUEUE_PROFILING_ENABLE | CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE,
    };
    const char *modes[] = {"in-order, no events", "out-of-order, waits on the one before",
                           "out-of-order, no waits (independent)"};
    cl_event *ev = malloc(sizeof(cl_event) * n);
    for (int kind = 0; kind < 2; ++kind) {
        cl_kernel k = clCreateKernel(pr, kind ? "stream" : "tiny", &e);
        check(e, "clCreateKernel");
        clSetKernelArg(k, 0, sizeof(cl_mem), &v);
        const size_t local = kind ? 256 : 32, global = kind ? 132 * 2048 : 32;
        const long n4 = wbytes / 16;
        for (int m = 0; m < 3; ++m) {
            cl_command_queue q = clCreateCommandQueue(ctx, d, props[m], &e);
            check(e, "clCreateCommandQueue");
            double best_span = 1e30, best_host = 0;
            int ok = 1;
            for (int rep = 0; rep < 3; ++rep) {
                int zero = 0;
                clEnqueueWriteBuffer(q, v, CL_TRUE, 0, sizeof(int), &zero, 0, NULL, NULL);
                clFinish(q);
                const double t0 = now_us();
                for (int i = 0; i < n; ++i) {
                    clSetKernelArg(k, 1, sizeof(int), &i);
                    cl_mem sub = NULL;
                    if (kind) {
                        cl_buffer_region reg = {(size_t)((long)i * wbytes % wall), (size_t)wbytes};
                        sub = clCreateSubBuffer(w, 0, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
                        check(e, "clCreateSubBuffer");
                        clSetKernelArg(k, 2, sizeof(cl_mem), &sub);
                        clSetKernelArg(k, 3, sizeof(long), &n4);
                    }
                    const int timed = i == 0 || i == n - 1 || m == 1;
                    const cl_event *wait = m == 1 && i > 0 ? &ev[i - 1] : NULL;
                    check(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, wait ? 1 : 0, wait,
                                                 timed ? &ev[i] : NULL),
                          "clEnqueueNDRangeKernel");
                    // NVIDIA's kernel does not keep its argument alive: release after the enqueue.
                    if (sub) clReleaseMemObject(sub);
                    if (i % 16 == 15) clFlush(q);
                }
                const double t1 = now_us();
                clFinish(q);
                cl_ulong s, f;
                clGetEventProfilingInfo(ev[0], CL_PROFILING_COMMAND_START, 8, &s, NULL);
                clGetEventProfilingInfo(ev[n - 1], CL_PROFILING_COMMAND_END, 8, &f, NULL);
                const double span = (f - s) / 1e3 / n;
                if (span < best_span) {
                    best_span = span;
                    best_host = (t1 - t0) / n;
                }
                for (int i = 0; i < n; ++i)
                    if (i == 0 || i == n - 1 || m == 1) clReleaseEvent(ev[i]);
                int last = -1;
                clEnqueueReadBuffer(q, v, CL_TRUE, sizeof(int) * n, sizeof(int), &last, 0, NULL, NULL);
                if (m < 2 && last != n) ok = 0;
            }
            printf("%-6s %-40s GPU span %6.2f us a kernel, host enqueue %5.2f us a kernel%s\n",
                   kind ? "stream" : "tiny", modes[m], best_span, best_host,
                   m == 2 ? "" : (ok ? "" : "  WRONG CHAIN"));
            clReleaseCommandQueue(q);
        }
        clReleaseKernel(k);
    }
    return 0;
}
