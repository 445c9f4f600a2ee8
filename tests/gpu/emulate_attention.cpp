// emulate_attention.cpp: the CUDA attention kernels (kernels/attention.cu, rewritten for the CPU by
// emulate_attention.sh and run by emulate.h) against the CPU kernels, on the shapes test_cuda.c
// uses on a device: normalized error max|emulated - cpu| / max|cpu| of the output, log-sum-exp
// and the three gradients (which start non-zero: both sides add into them). Exit 1 over 1e-5.
#include "emulate.h"
#include ATTENTION_CU
extern "C" {
#include "../../core/rng.h"
#include "../../kernels/kernels.h"
}

static real *randn(size_t n, uint64_t stream) {
    real *x = (real *)malloc(n * sizeof(real));
    rng_fill_normal(x, n, 7, stream, 0, 1);
    return x;
}

static real *copy(const real *x, size_t n) {
    return (real *)memcpy(malloc(n * sizeof(real)), x, n * sizeof(real));
}

// equal values (-inf log-sum-exp of fully masked rows too) count as no error
static double error(const real *got, const real *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) num = fmax(num, isfinite(got[i]) ? fabs((double)got[i] - want[i]) : INFINITY);
        if (isfinite(want[i])) den = fmax(den, fabs((double)want[i]));
    }
    return den > 0 ? num / den : num;
}

// masking: 0 none, 1 some keys inside and the last two, 2 every key
static double check(int B, int Tq, int Tk, int H, int dh, int masking, bool with_dq) {
    int D = H * dh;
    size_t nq = (size_t)B * Tq * D, nk = (size_t)B * Tk * D, nl = (size_t)B * H * Tq;
    real *q = randn(nq, 40), *k = randn(nk, 41), *v = randn(nk, 42), *dout = randn(nq, 43);
    real *dq = randn(nq, 44), *dk = randn(nk, 45), *dv = randn(nk, 46);
    real *dq_e = copy(dq, nq), *dk_e = copy(dk, nk), *dv_e = copy(dv, nk);
    real *out = (real *)malloc(nq * sizeof(real)), *out_e = (real *)malloc(nq * sizeof(real));
    real *lse = (real *)malloc(nl * sizeof(real)), *lse_e = (real *)malloc(nl * sizeof(real));
    real *delta = (real *)malloc(attention_cuda_scratch_count(B, H, Tq) * sizeof(real));
    uint8_t *mask = NULL;
    if (masking) {
        mask = (uint8_t *)malloc((size_t)Tk);
        for (int j = 0; j < Tk; j++) mask[j] = masking == 1 && j % 5 != 3 && j < Tk - 2;
    }
    int bq = Tq < ATTN_BQ ? Tq : ATTN_BQ, bk = Tk < ATTN_BK ? Tk : ATTN_BK;
    real *scratch = (real *)malloc(attention_scratch_count(bq, bk, dh, kernel_threads()) * sizeof(real));
    attention_forward(out, lse, scratch, q, k, v, mask, B, Tq, Tk, H, dh, bq, bk);
    attention_forward_cuda(out_e, lse_e, q, k, v, mask, B, Tq, Tk, H, dh, NULL);
    attention_backward(with_dq ? dq : NULL, dk, dv, scratch, dout, out, lse, q, k, v, mask, B, Tq,
                       Tk, H, dh, bq, bk);
    attention_backward_cuda(with_dq ? dq_e : NULL, dk_e, dv_e, delta, dout, out, lse, q, k, v, mask,
                            B, Tq, Tk, H, dh, NULL);
    double e[5] = {error(out_e, out, nq), error(lse_e, lse, nl), error(dq_e, dq, nq),
                   error(dk_e, dk, nk), error(dv_e, dv, nk)}, worst = 0;
    for (double x : e) worst = fmax(worst, x);
    printf("B %d, Tq %3d, Tk %3d, %d heads of %2d, %-10s: out %.1e, lse %.1e, dq %.1e, dk %.1e, dv %.1e\n",
           B, Tq, Tk, H, dh, masking == 0 ? "no mask" : masking == 1 ? "mask" : "all masked",
           e[0], e[1], e[2], e[3], e[4]);
    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv), free(dq_e), free(dk_e);
    free(dv_e), free(out), free(out_e), free(lse), free(lse_e), free(delta), free(mask), free(scratch);
    return worst;
}

int main(void) {
    double worst = check(2, 70, 45, 3, 16, 1, true);
    worst = fmax(worst, check(1, 129, 300, 2, 64, 0, true));
    worst = fmax(worst, check(2, 37, 37, 2, 72, 1, false));
    worst = fmax(worst, check(1, 20, 9, 1, 8, 2, true));
    printf("the CUDA attention kernels, emulated on the CPU: worst normalized error %.1e (tolerance "
           "1e-5) -> %s\n", worst, worst <= 1e-5 ? "ok" : "FAILED");
    return worst <= 1e-5 ? 0 : 1;
}
