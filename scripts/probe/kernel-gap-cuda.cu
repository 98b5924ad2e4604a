// kernel-gap.c's cases on CUDA, for the same GPU's floor there: a ~3 ms spin
// kernel, then K empty kernels (stream launches, then one CUDA graph of them),
// (time of spin + K - spin alone) / K, medians of 30, us a kernel.
// Build: nvcc -O2 -arch=sm_90 kernel-gap-cuda.cu (stage=probe PROBE=kernel-gap-cuda)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>

#define K 200
__global__ void spin(int *a, unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    if (threadIdx.x == 0 && blockIdx.x == 0) a[0] = (int)(t - t0);
}
__global__ void empty(int *a) { if (blockIdx.x * blockDim.x + threadIdx.x == 1 << 30) a[0] = 1; }

static double now() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main() {
    int *a;
    cudaMalloc(&a, 1 << 20);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const int groups[] = {1, 132, 1536};
    for (int gi = 0; gi < 3; ++gi) {
        const int g = groups[gi];
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        for (int i = 0; i < K; ++i) empty<<<g, 128, 0, s>>>(a);
        cudaStreamEndCapture(s, &graph);
        cudaGraphInstantiate(&exec, graph, 0);
        for (int mode = 0; mode < 2; ++mode) {
            double t[30], base[30];
            for (int r = 0; r < 30; ++r) {
                double t0 = now();
                spin<<<1, 128, 0, s>>>(a, 3000000ull);
                cudaStreamSynchronize(s);
                base[r] = now() - t0;
                t0 = now();
                spin<<<1, 128, 0, s>>>(a, 3000000ull);
                if (mode == 0) for (int i = 0; i < K; ++i) empty<<<g, 128, 0, s>>>(a);
                else cudaGraphLaunch(exec, s);
                cudaStreamSynchronize(s);
                t[r] = now() - t0;
            }
            std::sort(t, t + 30);
            std::sort(base, base + 30);
            printf("CUDA empty, %4d groups of 128, %s: %.2f us a kernel\n", g, mode ? "graph" : "stream",
                   (t[15] - base[15]) / K);
        }
    }
    printf("%s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
