// run.h: one call for a kernel wherever its tensors live. RUN(on_device, name, args...) calls
// name(args...) from kernels.h, or on the device name_cuda(args..., stream 0) from cuda.h: the
// CUDA launchers take the CPU kernels' arguments in the same order. PICK(on_device, name) is the
// function itself, for those that launch nothing and take no stream (a kernel's scratch size):
// PICK(d, attention_scratch_count)(...). Builds without CUDA have no device tensors, so there it
// is always the CPU kernel.
#pragma once
#include "kernels.h"
#ifdef USE_CUDA
#include "cuda.h"
#define RUN(on_device, kernel, ...) ((on_device) ? kernel##_cuda(__VA_ARGS__, 0) : kernel(__VA_ARGS__))
#define PICK(on_device, fn) ((on_device) ? fn##_cuda : fn)
#else
#define RUN(on_device, kernel, ...) ((void)(on_device), kernel(__VA_ARGS__))
#define PICK(on_device, fn) ((void)(on_device), fn)
#endif
