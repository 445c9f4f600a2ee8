// device.c: device.h for builds without CUDA: there is no device, copies are host copies.
#ifndef USE_CUDA
#include "device.h"
#include "check.h"
#include <string.h>

int device_count(void) { return 0; }
size_t device_memory(int index) { return (void)index, 0; }
void device_select(int index) { FATAL("device %d: this build has no CUDA (rebuild with nvcc)", index); }
bool device_in_use(void) { return false; }
const char *device_name(void) { return "none"; }
void *device_alloc(size_t bytes) { FATAL("device_alloc(%zu): this build has no CUDA", bytes); }
void device_free(void *ptr) { CHECK(!ptr, "device_free: this build has no CUDA"); }
bool device_pointer(const void *ptr) { return (void)ptr, false; }
void copy_bytes(void *dst, const void *src, size_t bytes) { if (bytes) memmove(dst, src, bytes); }
void zero_bytes(void *ptr, size_t bytes) { if (bytes) memset(ptr, 0, bytes); }
void device_sync(void) {}
void device_set_tf32(bool on) { CHECK(!on, "--tf32: this build has no CUDA"); }
bool device_tf32(void) { return false; }
#endif
