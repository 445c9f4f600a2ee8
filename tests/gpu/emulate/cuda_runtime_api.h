// cuda_runtime_api.h for the emulated device (see cuda_runtime.h here): the types and the error
// calls that cuda.h and the launchers use, and what device.c here provides: the device memory
// guard, the copies of device memory that compare a launch's schedules, and the fibers.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

// How many schedules each launch runs under (1: forward only; 2: and reverse; 3: and shuffled),
// from EMULATE_SCHEDULES (default 3); the shuffle's seed from EMULATE_SEED (default 1).
int emulated_schedules(void);
uint64_t emulated_seed(void);
// Device memory, every allocation: saved (before a launch), kept (its result under the first
// schedule), restored to what was saved, and compared with what was kept (false when identical;
// else the first difference, in words, into where).
void emulated_memory_save(void);
void emulated_memory_keep(void);
void emulated_memory_restore(void);
bool emulated_memory_differs(char *where, size_t len);

// Fibers without system calls (a block's threads switch at every barrier): the stack pointer of
// a fiber that will run entry() on the stack ending at stack_top, and a switch that saves the
// running fiber's stack pointer into *from and continues the one whose stack pointer is to.
void *emulated_fiber_start(char *stack_top, void (*entry)(void));
void emulated_fiber_switch(void **from, void *to);
#ifdef __cplusplus
}
#endif
