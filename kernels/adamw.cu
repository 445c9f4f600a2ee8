// adamw.cu: the AdamW update and the weights' moving average of adamw.c on the device, over one
// flat buffer (grid-stride loops).
// The bias corrections are computed once on the host, as the CPU kernel computes them.
#include "cuda.h"
#include <cuda_runtime.h>
#include <math.h>

// ---- kernels -------------------------------------------------------------------------------------

// a step's hyperparameters; c1 = 1 - beta1^step, c2 = 1 - beta2^step
struct AdamStep {
    real lr, beta1, beta2, eps, weight_decay, grad_scale, c1, c2;
};

// params, grads, m, v are (n)
static __global__ void adamw_kernel(real *params, const real *grads, real *m, real *v, size_t n, AdamStep h) {
    real lr = h.lr, beta1 = h.beta1, beta2 = h.beta2, eps = h.eps, weight_decay = h.weight_decay;
    real grad_scale = h.grad_scale, c1 = h.c1, c2 = h.c2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        real g = grads[i] * grad_scale;
        real mi = beta1 * m[i] + (1 - beta1) * g;
        real vi = beta2 * v[i] + (1 - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        real mhat = mi / c1, vhat = vi / c2;
        params[i] -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params[i]);
    }
}

// ema = decay ema + (1 - decay) params
static __global__ void ema_kernel(real *ema, const real *params, size_t n, double decay) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        ema[i] = (real)(decay * ema[i] + (1 - decay) * params[i]);
}

// ---- launchers -----------------------------------------------------------------------------------

void adamw_update_cuda(real *params, const real *grads, real *m, real *v, size_t n, real lr,
                       real beta1, real beta2, real eps, real weight_decay, real grad_scale,
                       int step, cudaStream_t stream) {
    CHECK(step >= 1, "adamw_update_cuda: step counts from 1, got %d", step);
    if (n == 0) return;
    real c1 = (real)(1 - pow((double)beta1, (double)step));
    real c2 = (real)(1 - pow((double)beta2, (double)step));
    adamw_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(
        params, grads, m, v, n, AdamStep{lr, beta1, beta2, eps, weight_decay, grad_scale, c1, c2});
    CUDA_CHECK(cudaGetLastError());
}

void ema_update_cuda(real *ema, const real *params, size_t n, double decay, cudaStream_t stream) {
    CHECK(decay >= 0 && decay <= 1, "ema_update_cuda: decay %g outside [0, 1]", decay);
    if (n == 0) return;
    ema_kernel<<<cuda_grid(n), CUDA_BLOCK, 0, stream>>>(ema, params, n, decay);
    CUDA_CHECK(cudaGetLastError());
}
