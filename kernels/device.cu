// device.cu: core/device.h on the CUDA runtime. Nothing here touches CUDA before device_select,
// so that --device cpu runs of this build work on machines without a driver.
#include "cuda.h"
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

static bool selected;
static char name[256];

int device_count(void) {
    int n = 0;
    // no driver or no device is an answer here, not an error: clear it so that the next
    // cudaGetLastError() does not report it
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

size_t device_memory(int index) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, index) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return p.totalGlobalMem;
}

void device_select(int index) {
    CUDA_CHECK(cudaSetDevice(index));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    snprintf(name, sizeof name, "%s", p.name);
    selected = true;
}

bool device_in_use(void) { return selected; }
const char *device_name(void) { return selected ? name : "none"; }

void *device_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        FATAL("cannot take %zu bytes (%.2f GiB) of device memory (%s): lower the batch size or the "
              "image size, or spread the sequence over more ranks", bytes, bytes / 1073741824.0,
              cudaGetErrorString(e));
    return p;
}

void device_free(void *ptr) {
    if (ptr) CUDA_CHECK(cudaFree(ptr));
}

bool device_pointer(const void *ptr) {
    if (!selected || !ptr) return false;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void copy_bytes(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (!selected) memmove(dst, src, bytes);
    else CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void zero_bytes(void *ptr, size_t bytes) {
    if (!bytes) return;
    if (device_pointer(ptr)) CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, 0));
    else memset(ptr, 0, bytes);
}

void device_sync(void) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGetLastError());
}
