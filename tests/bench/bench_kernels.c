// bench_kernels.c: CPU kernel throughput, with numbered variants next to the kernel the library
// uses, measured in one run so the ratios hold on a noisy machine. With a GPU (USE_CUDA build and
// a device), the CUDA kernels too. usage: bench_kernels [seconds per case]
#include "../../core/cpu.h"
#include "../../core/rng.h"
#include "../../kernels/kernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef USE_CUDA
#include "../../kernels/cuda.h"
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double budget = 0.3; // seconds per case

// Runs fn until the budget is spent; returns seconds per call.
#define TIME(call)                                                                                 \
    ({                                                                                             \
        call;                                                                                      \
        int reps_ = 0;                                                                             \
        double t0_ = now(), el_;                                                                   \
        do call, reps_++;                                                                          \
        while ((el_ = now() - t0_) < budget);                                                      \
        el_ / reps_;                                                                               \
    })

// ---- GELU variants: 1 = libm tanh of the real type, 2 = tanh from libm's exp, 3 = tanh from the
// library's rexp (core/real.h), whose loop vectorizes (used) ---------------------------------------
static void gelu_v1(real *out, const real *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = (real)0.5 * x[i] * (1 + (real)tanh(0.7978845608028654 * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
}
static void gelu_v2(real *out, const real *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        real a = (real)(2 * 0.7978845608028654 * (x[i] + 0.044715 * x[i] * x[i] * x[i]));
        real e = sizeof(real) == sizeof(float) ? (real)expf((float)a) : (real)exp(a);
        out[i] = (real)0.5 * x[i] * (1 + (1 - 2 / (e + 1)));
    }
}

static void report(const char *name, double sec, double bytes, double flops, double base) {
    printf("%-44s %9.3f ms  %7.2f GB/s  %7.2f GFLOP/s  x%.2f\n", name, sec * 1e3, bytes / sec / 1e9,
           flops / sec / 1e9, base / sec);
}

int main(int argc, char **argv) {
    if (argc > 1) budget = atof(argv[1]);
    size_t n = 1 << 22;
    real *x = malloc(n * sizeof(real)), *y = malloc(n * sizeof(real)), *g = malloc(n * sizeof(real));
    rng_fill_normal(x, n, 1, 1, 0, 1);
    rng_fill_normal(g, n, 1, 2, 0, 1);
    char cpu[256];
    printf("%s CPU kernels (%zu elements for elementwise ops); CPU: %s\n", REAL_NAME, n, cpu_text(cpu, sizeof cpu));
    double b1 = TIME(gelu_v1(y, x, n));
    report("gelu forward, variant 1 (libm tanh)", b1, 2.0 * n * sizeof(real), 0, b1);
    report("gelu forward, variant 2 (libm exp)", TIME(gelu_v2(y, x, n)), 2.0 * n * sizeof(real), 0, b1);
    report("gelu forward, variant 3 (rexp, used)", TIME(gelu_forward(y, x, n)), 2.0 * n * sizeof(real), 0, b1);
    report("gelu backward (used)", TIME(gelu_backward(y, g, x, n)), 3.0 * n * sizeof(real), 0, b1);
    double ln = TIME(layernorm_forward(y, g, g + n / 2, x, (int)(n / 768), 768, 1e-6));
    report("layernorm forward (rows of 768)", ln, 2.0 * n * sizeof(real), 0, ln);
    int N = 2048, C = 256, OC = 1024;
    real *w = malloc((size_t)OC * C * sizeof(real)), *o = malloc((size_t)N * OC * sizeof(real));
    rng_fill_normal(w, (size_t)OC * C, 1, 3, 0, 0.05);
    double lf = TIME(linear_forward(o, x, w, NULL, N, C, OC));
    report("linear forward 2048x256 -> 1024", lf, 4.0 * ((size_t)N * C + (size_t)OC * C + (size_t)N * OC), 2.0 * N * C * OC, lf);
    // fused attention, forward and backward, at three tile sizes; the ratios are to those the
    // layer uses on this machine (core/cpu.h)
    int B = 1, T = 1024, H = 6, dh = 64, D = H * dh;
    static const int tiles[][2] = {{32, 64}, {64, 128}, {128, 256}};
    real *lse = malloc((size_t)B * H * T * sizeof(real)), *d = calloc((size_t)3 * B * T * D, sizeof(real));
    real *sc = malloc(attention_tiled_scratch_count(128, 256, dh, kernel_threads()) * sizeof(real));
    double base = 0, fl = 4.0 * B * H * T * T * dh, times[3]; // forward; backward recomputes S: 2.5x that
    for (int v = 0; v < 3; v++) {
        int bq = tiles[v][0], bk = tiles[v][1];
        const real *q = x, *k = x + (size_t)B * T * D, *vv = x + (size_t)2 * B * T * D;
        double af = TIME(attention_forward_tiled(o, lse, sc, q, k, vv, NULL, NO_SEGMENTS, B, T, T, H,
                                                 dh, bq, bk));
        double ab = TIME(attention_backward_tiled(d, d + (size_t)B * T * D, d + (size_t)2 * B * T * D,
                                                  sc, g, o, lse, q, k, vv, NULL, NO_SEGMENTS, B, T, T,
                                                  H, dh, bq, bk));
        times[v] = af + ab;
        if (bq == attn_bq()) base = times[v];
    }
    if (!base) base = times[2]; // tiles outside the three: against the largest
    for (int v = 0; v < 3; v++) {
        char name[96];
        snprintf(name, sizeof name, "attention fwd+bwd T1024 H6 dh64, variant %d (%dx%d%s)", v + 1,
                 tiles[v][0], tiles[v][1], tiles[v][0] == attn_bq() ? ", used" : "");
        report(name, times[v], 0, 3.5 * fl, base);
    }
    // the same T as a pack of 4 images of T/4 tokens: the key blocks of the other images are
    // skipped, so the time follows the images' attention (goal: at most 0.35x of one image)
    int32_t *ids = malloc((size_t)B * T * sizeof(int32_t));
    for (int t = 0; t < B * T; t++) ids[t] = t % T / (T / 4);
    Segments pack = {ids, T, 0, 0};
    const real *q = x, *k = x + (size_t)B * T * D, *vv = x + (size_t)2 * B * T * D;
    double pf = TIME(attention_forward(o, lse, sc, q, k, vv, NULL, pack, B, T, T, H, dh));
    double pb = TIME(attention_backward(d, d + (size_t)B * T * D, d + (size_t)2 * B * T * D, sc, g, o,
                                        lse, q, k, vv, NULL, pack, B, T, T, H, dh));
    report("attention fwd+bwd T1024 H6 dh64, a pack of 4 images of 256 (vs one image)", pf + pb, 0,
           3.5 * fl / 4, base);
    printf("%-44s %9.2f (goal: at most 0.35)\n", "  its time over one image's", (pf + pb) / base);
    free(lse), free(d), free(sc), free(ids);
#ifdef USE_CUDA
    if (device_count() > 0) {
        device_select(0);
        real *dx = device_alloc(n * sizeof(real)), *dy = device_alloc(n * sizeof(real));
        copy_bytes(dx, x, n * sizeof(real));
        double cpu = TIME(gelu_forward(y, x, n));
        double gpu = TIME((gelu_forward_cuda(dy, dx, n, 0), device_sync()));
        printf("\nCUDA (device vs this CPU, same sizes)\n");
        report("gelu forward, CPU", cpu, 2.0 * n * sizeof(real), 0, cpu);
        report("gelu forward, CUDA", gpu, 2.0 * n * sizeof(real), 0, cpu);
        cpu = TIME(layernorm_forward(y, g, g + n / 2, x, (int)(n / 768), 768, 1e-6));
        real *dm = device_alloc(n * sizeof(real));
        gpu = TIME((layernorm_forward_cuda(dy, dm, dm + n / 2, dx, (int)(n / 768), 768, 1e-6, 0), device_sync()));
        report("layernorm forward, CPU", cpu, 2.0 * n * sizeof(real), 0, cpu);
        report("layernorm forward, CUDA", gpu, 2.0 * n * sizeof(real), 0, cpu);
        device_free(dx), device_free(dy), device_free(dm);
        // fused attention, forward and backward (counted as 2.5 forwards), B 1, 8 heads of 64 and
        // 128, float32 (3xTF32 on tensor cores in the float32 build), --tf32 (one TF32 product)
        // and bf16 products; tests/gpu/sdpa_bench.py times PyTorch's scaled_dot_product_attention
        // on the same, and tests/gpu/attention_table.py sets the two side by side
        const char *precisions[] = {REAL_NAME, "tf32", "bf16"};
        for (int prec = 0; prec < (sizeof(real) == 4 ? 3 : 1); prec++) // tf32, bf16: float32's
            for (int dc = 64; dc <= 128; dc *= 2)
                for (int Tc = 1024; Tc <= 16384; Tc *= 4) {
                    int Hc = 8;
                    size_t m = (size_t)Tc * Hc * dc;
                    real *buf = device_alloc(8 * m * sizeof(real)), *lse_d = device_alloc((size_t)Hc * Tc * sizeof(real));
                    real *sc_d = device_alloc(attention_scratch_count_cuda(1, Tc, Tc, Hc, dc, true) * sizeof(real));
                    real *hb = malloc(m * sizeof(real));
                    for (int part = 0; part < 8; part++) { // q k v dout out dq dk dv: random, then overwritten
                        rng_fill_normal(hb, m, 1, 10 + part, 0, 1);
                        copy_bytes(buf + part * m, hb, m * sizeof(real));
                    }
                    free(hb);
                    device_set_tf32(prec == 1);
                    attention_set_bf16_cuda(prec == 2);
                    double f = TIME((attention_forward_cuda(buf + 4 * m, lse_d, sc_d, buf, buf + m, buf + 2 * m,
                                                            NULL, NO_SEGMENTS, 1, Tc, Tc, Hc, dc, 0), device_sync()));
                    double bw = TIME((attention_backward_cuda(buf + 5 * m, buf + 6 * m, buf + 7 * m, sc_d, buf + 3 * m,
                                                              buf + 4 * m, lse_d, buf, buf + m, buf + 2 * m, NULL,
                                                              NO_SEGMENTS, 1, Tc, Tc, Hc, dc, 0), device_sync()));
                    device_set_tf32(false), attention_set_bf16_cuda(false);
                    double flc = 4.0 * Hc * Tc * (double)Tc * dc;
                    printf("attention CUDA %s T%d H8 dh%d: fwd %.4f ms, bwd %.4f ms, fwd+bwd %.4f ms, %.2f TFLOP/s\n",
                           precisions[prec], Tc, dc, f * 1e3, bw * 1e3, (f + bw) * 1e3, 3.5 * flc / (f + bw) / 1e12);
                    device_free(buf), device_free(lse_d), device_free(sc_d);
                }
    } else printf("\nCUDA: skipped (no GPU on this machine)\n");
#endif
    free(x), free(y), free(g), free(w), free(o);
    return 0;
}
