// blas.h: the GEMM library (OpenBLAS, its OpenMP build) set up for this CPU at start. OpenBLAS
// picks its kernels by CPU model, and a model it does not know falls back to its oldest x86-64
// kernels: 0.3.21 runs Prescott kernels on Intel's family 6 model 207, about 3x slower sgemm.
// blas_setup chooses the kernels by the instruction sets the CPU has instead, whenever OpenBLAS's
// own choice uses fewer of them, unless the user set OPENBLAS_CORETYPE.
#pragma once
#include <stdbool.h>
#include <stddef.h>

// Call before any BLAS call (program start); returns a line for logs, e.g. "OpenBLAS 0.3.21,
// SkylakeX kernels (chosen by CPU features; OpenBLAS detected Prescott)". Idempotent.
const char *blas_setup(void);

// The kernels for a CPU whose best instruction set is `level` (BLAS_ISA_*), and the level that
// OpenBLAS kernels of a given name use (unknown names count as new: they are left alone).
enum { BLAS_ISA_SSE3, BLAS_ISA_AVX, BLAS_ISA_AVX2, BLAS_ISA_AVX512, BLAS_ISA_AVX512_BF16, BLAS_ISA_NEW = 99 };
const char *blas_core_for(int level);
int blas_core_level(const char *core);
int blas_cpu_level(void); // this CPU's
// The kernels to switch to when OpenBLAS detected `detected` on a CPU of `cpu_level`, or NULL to
// keep them (they are as good, the CPU is unknown, or the user set OPENBLAS_CORETYPE).
const char *blas_choice(const char *detected, int cpu_level, bool user_set);
// Makes OpenBLAS run the named kernels from now on; false if this OpenBLAS cannot switch.
bool blas_use_core(const char *core);
// What runs --precision bf16's products on this CPU, for logs: float32 GEMMs of bf16-rounded
// operands, and the bf16 instructions the CPU has (AVX512-BF16, AMX-BF16) that they leave unused,
// and why: OpenBLAS's bf16 GEMM (sbgemm) is missing from Debian's build, or not called here.
const char *blas_bf16_text(char *buf, size_t len);
