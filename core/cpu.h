// cpu.h: the CPU's vector width and cache, read once at start, and what follows from them. One
// binary runs on any x86-64: the kernels' hot loops are compiled three times (SIMD_CLONES), for
// 128-bit vectors (SSE2, every x86-64), 256-bit (AVX2 with FMA) and 512-bit (AVX-512 F, BW, DQ,
// VL), and run the widest the CPU has. DIT_CPU_WIDTH=128|256|512 caps the width (an AVX2 machine
// imitated on an AVX-512 one; the tests run the kernels at each width). Products and sums are
// never contracted into FMAs (-std=c17), so an elementwise loop gives the same values at every
// width; only sums the loops split across lanes (omp simd reductions) round differently.
// The attention tiles follow from the L2 cache (cpu_tiles_for).
#pragma once
#include <stddef.h>

typedef struct {
    char model[64]; // the CPU's name, e.g. "AMD EPYC 7763 64-Core Processor"
    int width;  // bits of the vectors the kernels run: 128, 256 or 512
    int widest; // the CPU's widest of those
    long l2;    // bytes of L2 cache per core; 0 when the system does not say
    int bq, bk; // attention tiles: query rows, key rows
} CpuPlan;

// Reads the CPU and DIT_CPU_WIDTH (once; later calls return the same). NULL, or a sentence that
// says what is wrong with DIT_CPU_WIDTH and what to set (the widest width runs meanwhile).
const char *cpu_setup(void);
const CpuPlan *cpu_plan(void);
int cpu_width(void);
// Runs `width` from now on, and tiles bq x bk (0: keep them): the ranks of a run agree on the
// least of theirs (comm_agree_cpu). The width must be one the CPU has (the tests set each in turn).
void cpu_use(int width, int bq, int bk);
// "AMD EPYC, AVX-512 (512-bit vectors, the CPU's widest); attention tiles 128 x 256 (for the
// 1024 KiB L2 cache)"
const char *cpu_text(char *buf, size_t len);
const char *cpu_width_name(int width); // "SSE2", "AVX2", "AVX-512"
// The largest tiles (bq a power of two from 16 to 128, bk = 2 bq) whose working set with 64-wide
// heads (the scores and their gradient, bq x bk each; the query tile and its accumulator; the key
// and value blocks) fits in half of an L2 cache of l2 bytes; 128 x 256 when l2 is unknown (0).
void cpu_tiles_for(long l2, int *bq, int *bk);

// ---- the clones ---------------------------------------------------------------------------------
// SIMD_BODY void name(params) { ... } holds a loop; SIMD_CLONES(name, (params), (args)) then
// defines name_simd(params), which runs it compiled for cpu_width(). The body must not start
// OpenMP threads: GCC outlines a parallel region before it clones, so the threads would run
// generic code. Call name_simd from the parallel loop instead.
#define SIMD_BODY static inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__)
#define SIMD_CLONES(name, params, args)                                                           \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))) static void          \
        name##_512 params { name args; }                                                        \
    __attribute__((target("avx2,fma"))) static void name##_256 params { name args; }            \
    static void name##_simd params {                                                            \
        int w_ = cpu_width();                                                                   \
        if (w_ == 512) name##_512 args;                                                         \
        else if (w_ == 256) name##_256 args;                                                    \
        else name args;                                                                         \
    }
#else
#define SIMD_CLONES(name, params, args) static void name##_simd params { name args; }
#endif
