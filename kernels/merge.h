// merge.h: how attention_merge (CPU and CUDA alike) merges a block's partial attention output and
// log-sum-exp into what a ring step holds: by log-sum-exp, or as one of the catalogue's two merge
// bugs. One formula for both kernels.
#pragma once
#include "../core/real.h"
#include <math.h>

#ifdef __CUDACC__
#define MERGE_FN static __host__ __device__ inline
#else
#define MERGE_FN static inline
#endif

typedef enum {
    MERGE_BY_LSE,     // o = (e^lse o + e^lse_blk o_blk) / (e^lse + e^lse_blk), the max subtracted
    MERGE_AS_MEAN,    // the ring-wrong-merge bug: o = (1 - 1/block) o + o_blk / block, no rescaling
    MERGE_OVERFLOWING // the lse-overflow bug: log(e^lse + e^lse_blk) in real precision, no max
                      // subtracted: inf once an lse passes ~88 (float32) or ~709 (float64)
} MergeHow;
typedef struct AttnMerge {
    MergeHow how;
    int block; // MERGE_AS_MEAN: o_blk is the block-th partial (2, 3, ...)
} AttnMerge;

// the weights of the held output (wa) and the block's (wb), and the new log-sum-exp, for the held
// la and the block's lb (finite: a block whose keys are all masked changes nothing)
MERGE_FN void merge_weights(double la, double lb, AttnMerge m, double *wa, double *wb, double *lnew) {
    double mx = fmax(la, lb);
    *lnew = la == -INFINITY ? lb : mx + log(exp(la - mx) + exp(lb - mx));
    if (m.how == MERGE_OVERFLOWING) *lnew = log((double)((real)exp(la) + (real)exp(lb)));
    *wb = m.how == MERGE_AS_MEAN ? 1.0 / m.block : exp(lb - *lnew);
    *wa = m.how == MERGE_AS_MEAN ? 1 - *wb : la == -INFINITY ? 0 : exp(la - *lnew);
}
