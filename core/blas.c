// blas.c: see blas.h.
#include "blas.h"
#include <cblas.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

// OpenBLAS built with DYNAMIC_ARCH (Debian's) exports these internals, which are not its public
// API: quit forgets the chosen kernels and init chooses again, reading OPENBLAS_CORETYPE. Weak, so
// that another build still links (blas_use_core then says it cannot switch); tests/test_core.c
// fails when an OpenBLAS drops them or they stop switching. The supported route, OPENBLAS_CORETYPE
// set before the library loads, would need every program to execute itself again before MPI
// starts, and would hand the setting to the runs that verify and bugs start.
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

static const struct { const char *core; int level; } cores[] = {
    {"Cooperlake", BLAS_ISA_AVX512_BF16}, {"SkylakeX", BLAS_ISA_AVX512}, {"Haswell", BLAS_ISA_AVX2},
    {"Zen", BLAS_ISA_AVX2}, {"Excavator", BLAS_ISA_AVX2}, {"SandyBridge", BLAS_ISA_AVX},
    {"Bulldozer", BLAS_ISA_AVX}, {"Piledriver", BLAS_ISA_AVX}, {"Steamroller", BLAS_ISA_AVX},
    {"Prescott", BLAS_ISA_SSE3}, {"Core2", BLAS_ISA_SSE3}, {"Penryn", BLAS_ISA_SSE3},
    {"Dunnington", BLAS_ISA_SSE3}, {"Nehalem", BLAS_ISA_SSE3}, {"Atom", BLAS_ISA_SSE3},
    {"Nano", BLAS_ISA_SSE3}, {"Barcelona", BLAS_ISA_SSE3}, {"Bobcat", BLAS_ISA_SSE3},
    {"Opteron", BLAS_ISA_SSE3}, {"Opteron(SSE3)", BLAS_ISA_SSE3}, {"Katmai", BLAS_ISA_SSE3},
    {"Coppermine", BLAS_ISA_SSE3}, {"Northwood", BLAS_ISA_SSE3}, {"Banias", BLAS_ISA_SSE3},
    {"Athlon", BLAS_ISA_SSE3},
};

int blas_core_level(const char *core) {
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(core, cores[i].core)) return cores[i].level;
    return BLAS_ISA_NEW;
}

const char *blas_core_for(int level) {
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (cores[i].level <= level) return cores[i].core; // the first, best kernels of that level
    return "Prescott";
}

int blas_cpu_level(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    if (avx512 && __builtin_cpu_supports("avx512bf16")) return BLAS_ISA_AVX512_BF16;
    if (avx512) return BLAS_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return BLAS_ISA_AVX2;
    if (__builtin_cpu_supports("avx")) return BLAS_ISA_AVX;
    return BLAS_ISA_SSE3;
#else
    return BLAS_ISA_NEW; // other architectures: OpenBLAS's own choice
#endif
}

const char *blas_choice(const char *detected, int cpu_level, bool user_set) {
    if (user_set || cpu_level == BLAS_ISA_NEW || blas_core_level(detected) >= cpu_level) return NULL;
    return blas_core_for(cpu_level);
}

bool blas_use_core(const char *core) {
    if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) return false;
    setenv("OPENBLAS_CORETYPE", core, 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    return true;
}

// OpenBLAS's bf16 GEMM, where the library was built with it (BUILD_BFLOAT16; Debian's 0.3.21 is not)
extern void cblas_sbgemm(OPENBLAS_CONST enum CBLAS_ORDER, OPENBLAS_CONST enum CBLAS_TRANSPOSE,
                         OPENBLAS_CONST enum CBLAS_TRANSPOSE, OPENBLAS_CONST blasint, OPENBLAS_CONST blasint,
                         OPENBLAS_CONST blasint, OPENBLAS_CONST float, OPENBLAS_CONST bfloat16 *,
                         OPENBLAS_CONST blasint, OPENBLAS_CONST bfloat16 *, OPENBLAS_CONST blasint,
                         OPENBLAS_CONST float, float *, OPENBLAS_CONST blasint) __attribute__((weak));

const char *blas_bf16_text(char *buf, size_t len) {
    bool avx512 = false, amx = false;
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d; // CPUID leaf 7: AMX-BF16 is bit 22 of EDX in subleaf 0, AVX512-BF16 bit 5
    // of EAX in subleaf 1 (as the kernel's flags amx_bf16 and avx512_bf16)
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) amx = d >> 22 & 1;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) avx512 = a >> 5 & 1;
#endif
    const char *has = avx512 && amx ? "AVX512-BF16 and AMX-BF16" : avx512 ? "AVX512-BF16" : amx ? "AMX-BF16" : NULL;
    if (!has) return snprintf(buf, len, "float32 GEMMs of bf16-rounded operands (this CPU has no bf16 instructions)"), buf;
    snprintf(buf, len, "float32 GEMMs of bf16-rounded operands; this CPU's %s unused: %s", has,
             cblas_sbgemm ? "this OpenBLAS has sbgemm, which this program does not call"
                          : "this OpenBLAS was built without its bf16 GEMM (sbgemm)");
    return buf;
}

const char *blas_setup(void) {
    static char line[256];
    if (line[0]) return line;
    char detected[64], why[128] = "as OpenBLAS detected";
    snprintf(detected, sizeof detected, "%s", openblas_get_corename());
    bool user_set = getenv("OPENBLAS_CORETYPE");
    const char *want = blas_choice(detected, blas_cpu_level(), user_set);
    if (user_set) snprintf(why, sizeof why, "set by OPENBLAS_CORETYPE");
    else if (want && blas_use_core(want))
        snprintf(why, sizeof why, "chosen by CPU features; OpenBLAS detected %s", detected);
    else if (want) snprintf(why, sizeof why, "this OpenBLAS cannot switch to the CPU's %s kernels", want);
    snprintf(line, sizeof line, "%s%s kernels (%s)", &OPENBLAS_VERSION[1],
             openblas_get_corename(), why);
    return line;
}
