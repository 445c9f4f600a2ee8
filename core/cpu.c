// cpu.c: the vector width and tiles the kernels run with (see cpu.h).
#include "cpu.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static CpuPlan plan;
static char env_error[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int widest_width(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init(); // the ISA flags below count only where the OS saves the registers too
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return 512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 256;
#endif
    return 128;
}

void cpu_tiles_for(long l2, int *bq, int *bk) {
    const long dh = 64, bytes = 4;
    *bq = 128;
    while (l2 > 0 && *bq > 16) {
        long q = *bq, k = 2 * q, set = (2 * q * k + 2 * q * dh + 2 * k * dh) * bytes;
        if (set <= l2 / 2) break;
        *bq /= 2;
    }
    *bk = 2 * *bq;
}

// the CPU's brand string, spaces trimmed, e.g. "AMD EPYC 7763 64-Core Processor"
static void model_name(char *out, size_t len) {
    snprintf(out, len, "unknown CPU");
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned r[12], top = __get_cpuid_max(0x80000000u, NULL);
    if (top < 0x80000004u) return;
    for (unsigned i = 0; i < 3; i++)
        __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char brand[49] = {0};
    memcpy(brand, r, 48);
    char *b = brand, *e = brand + strlen(brand);
    while (*b == ' ') b++;
    while (e > b && e[-1] == ' ') *--e = 0;
    if (*b) snprintf(out, len, "%s", b);
#endif
}

static void detect(void) {
    model_name(plan.model, sizeof plan.model);
    plan.widest = plan.width = widest_width();
    plan.l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (plan.l2 < 0) plan.l2 = 0;
    cpu_tiles_for(plan.l2, &plan.bq, &plan.bk);
    const char *e = getenv("DIT_CPU_WIDTH");
    if (!e || !*e) return;
    char *end;
    long w = strtol(e, &end, 10);
    if (*end || (w != 128 && w != 256 && w != 512))
        snprintf(env_error, sizeof env_error, "DIT_CPU_WIDTH=%s is not a vector width: set 128, "
                 "256 or 512 (bits), or unset it for the CPU's widest (%d)", e, plan.widest);
    else if (w > plan.widest)
        snprintf(env_error, sizeof env_error, "DIT_CPU_WIDTH=%ld is wider than this CPU's vectors "
                 "(%d-bit, %s): set %d or less, or unset it", w, plan.widest,
                 cpu_width_name(plan.widest), plan.widest);
    else plan.width = (int)w;
}

const char *cpu_setup(void) {
    pthread_once(&once, detect);
    return *env_error ? env_error : NULL;
}

const CpuPlan *cpu_plan(void) {
    cpu_setup();
    return &plan;
}

int cpu_width(void) { return cpu_plan()->width; }

void cpu_use(int width, int bq, int bk) {
    cpu_setup();
    if (width > plan.widest) {
        fprintf(stderr, "error: cpu_use: %d-bit vectors asked for on a CPU whose widest are %d-bit\n",
                width, plan.widest);
        abort();
    }
    plan.width = width;
    if (bq > 0) plan.bq = bq, plan.bk = bk;
}

const char *cpu_width_name(int width) {
    return width == 512 ? "AVX-512" : width == 256 ? "AVX2" : "SSE2";
}

const char *cpu_text(char *buf, size_t len) {
    const CpuPlan *p = cpu_plan();
    char widest[80] = "the CPU's widest", cache[64] = "L2 size unknown: the default";
    if (p->width < p->widest)
        snprintf(widest, sizeof widest, "capped by DIT_CPU_WIDTH or a rank's CPU; this has %d",
                 p->widest);
    if (p->l2) snprintf(cache, sizeof cache, "for the %ld KiB L2 cache", p->l2 / 1024);
    snprintf(buf, len, "%s, %s (%d-bit vectors, %s); attention tiles %d x %d (%s)", p->model,
             cpu_width_name(p->width), p->width, widest, p->bq, p->bk, cache);
    return buf;
}
