// device.cu: device count, memory and synchronization helpers declared in cuda.h.
#include "cuda.h"
#include <cuda_runtime.h>

int cuda_device_count(void) {
    int n = 0;
    // no driver or no device is an answer here, not an error: clear it so that the next
    // cudaGetLastError() does not report it
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

void cuda_free(void *ptr) {
    if (ptr) CUDA_CHECK(cudaFree(ptr));
}

void cuda_to_device(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void cuda_to_host(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void cuda_sync(void) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGetLastError());
}
