// device.c: the helpers of kernels/device.cu for the emulated device: one device, host memory.
#include "../../../kernels/cuda.h"
#include <stdlib.h>
#include <string.h>

int cuda_device_count(void) { return 1; }
void *cuda_alloc(size_t bytes) { return xmalloc(bytes ? bytes : 1); }
void cuda_free(void *ptr) { free(ptr); }
void cuda_to_device(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void cuda_to_host(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void cuda_sync(void) {}
