// optim.c: see optim.h.
#include "optim.h"
#include "../core/check.h"
#include "../core/device.h"
#include "../kernels/run.h"
#include <math.h>
#include <stdlib.h>

AdamW adamw_default(double lr) {
    return (AdamW){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
}

double adamw_squares(const ParamStore *ps, ExactSum *squares) {
    const real *g = ps->slice;
    if (!ps->exact_mem) return RUN(ps->device, sum_squares, g, ps->chunk);
    real *host = ps->device ? xmalloc(ps->chunk * sizeof(real) + 1) : NULL; // the sums are the host's
    if (host) copy_bytes(host, g, ps->chunk * sizeof(real)), g = host;
    // each thread adds the squares of its share into a sum of its own, merged after: exact sums
    // do not depend on the order of their terms, so the bits do not depend on the threads
    enum { PART = 1024, MOST = 8 };
    int parts = kernel_threads() < MOST ? kernel_threads() : MOST;
    int64_t mem[MOST][EXACT_LIMBS + 2];
    ExactSum sums[MOST];
    for (int t = 0; t < parts; t++) sums[t] = exact_view(mem[t], 1);
#pragma omp parallel for if (ps->chunk > PAR_MIN)
    for (int t = 0; t < parts; t++) {
        real sq[PART];
        size_t hi = ps->chunk * (t + 1) / parts;
        for (size_t i = ps->chunk * t / parts; i < hi; i += PART) {
            int k = hi - i < PART ? (int)(hi - i) : PART;
            for (int j = 0; j < k; j++) sq[j] = g[i + j] * g[i + j];
            exact_add_terms(&sums[t], 0, sq, 1, k, 1);
        }
    }
    for (int t = 0; t < parts; t++) exact_merge(squares, 0, &sums[t]);
    free(host);
    return 0;
}

void adamw_update_slice(AdamW *opt, ParamStore *ps, double norm) {
    double scale = (opt->clip_norm > 0 && norm > opt->clip_norm) ? opt->clip_norm / norm : 1;
    opt->step++;
    for (int u = 0; u < ps->units; u++) { // the slice's piece of each unit
        const PsUnit *U = &ps->unit[u];
        RUN(ps->device, adamw_update, ps_piece(ps, u), ps->slice + U->slice, ps->m + U->slice, ps->v + U->slice, U->piece, (real)opt->lr,
            (real)opt->beta1, (real)opt->beta2, (real)opt->eps, (real)opt->weight_decay, (real)scale,
            opt->step);
    }
}

double adamw_step(AdamW *opt, ParamStore *ps) {
    int64_t mem[EXACT_LIMBS + 2];
    ExactSum squares = exact_view(mem, 1);
    double sum = adamw_squares(ps, &squares);
    if (ps->exact_mem) exact_result_double(&sum, &squares, 0, 1);
    double norm = sqrt(sum);
    adamw_update_slice(opt, ps, norm);
    return norm;
}

double ema_decay(double target, int step) { return fmin(target, (1.0 + step) / (10.0 + step)); }
