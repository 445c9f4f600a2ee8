// cuda_runtime_api.h for the emulated device (see cuda_runtime.h here): the types and the error
// calls that cuda.h and the launchers use, and the device memory guard (device.c here).
#pragma once
typedef void *cudaStream_t;
typedef int cudaError_t;
#define cudaSuccess 0
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated error" : "no error"; }
#ifdef __cplusplus
extern "C" {
#endif
void emulated_device_open(void); // device memory readable and writable until the matching close
void emulated_device_close(void);
#ifdef __cplusplus
}
#endif
