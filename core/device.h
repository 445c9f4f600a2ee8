// device.h: the GPU as the host code sees it, without CUDA headers. A process either works on
// one device (after device_select) or on none; until device_select these are plain host
// operations (memcpy, memset) and never touch the CUDA runtime, so CPU runs of a CUDA build work
// where there is no driver. Copies and zeroing take host or device memory in any combination
// (unified addressing) and are ordered with the kernels, which all run on the default stream.
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int device_count(void);          // 0 when built without CUDA, or with no driver or no device
size_t device_memory(int index); // bytes of memory device `index` has (any process's); 0: none
// Work on device `index` from now on (CUDA's cudaSetDevice); aborts when there is none.
void device_select(int index);
bool device_in_use(void);        // device_select has been called
const char *device_name(void);   // of the selected device, e.g. "NVIDIA H200"
void *device_alloc(size_t bytes); // device memory, never NULL (aborts naming the size)
void device_free(void *ptr);      // NULL is fine
bool device_pointer(const void *ptr); // ptr is device memory
// memmove and memset for host or device memory, in any combination: host paths use them too
void copy_bytes(void *dst, const void *src, size_t bytes);
void zero_bytes(void *ptr, size_t bytes);
void device_sync(void); // waits for the device, then reports any error of its kernels
// TF32 tensor cores for float32 (--tf32), off unless asked for: cuBLAS's GEMMs in TF32, and the
// attention in one TF32 product instead of 3xTF32 (kernels/attention_mma.cu)
void device_set_tf32(bool on);
bool device_tf32(void);

#ifdef __cplusplus
}
#endif
