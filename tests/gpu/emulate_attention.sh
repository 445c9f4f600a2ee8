#!/usr/bin/env bash
# emulate_attention.sh: runs the CUDA attention kernels (kernels/attention.cu) on the CPU, each
# block's threads as POSIX threads (tests/gpu/emulate.h), against the CPU kernels, so their logic
# is checked on machines without a GPU. The kernel file is rewritten for the host (its includes,
# shared memory, and <<<...>>> launches); an optional second argument plants a perl substitution
# in the kernels, to show the check catching a bug.
# usage (from the repository root): emulate_attention.sh BUILD [PLANTED_SUBSTITUTION]
set -eu
BUILD=$1; PLANT=${2:-}
OUT=$BUILD/emulate; mkdir -p "$OUT"
MAX_DH=$(sed -nE 's/^#define ATTN_CUDA_MAX_DH ([0-9]+).*/\1/p' kernels/cuda.h)
perl -0pe 's/#include "cuda.h"\n#include <cuda_runtime.h>\n/#include "..\/..\/core\/real.h"\n#define ATTN_CUDA_MAX_DH '"$MAX_DH"'\n/;
           s/extern __shared__ double smem_d\[\];/double *smem_d = shared_memory;/g;
           s/static __global__/static/g;
           s/(\w+)<<<([^,]+), ([^,]+), [^,]+, stream>>>\((.*?)\);/run_grid(dim3($2), dim3($3), [&] { $1($4); });/gs;
           s/cudaStream_t stream/cudaStream_t/g;'"${PLANT:+ $PLANT}" kernels/attention.cu > "$OUT/attention_host.cpp"
g++ -O1 -std=c++17 -pthread -fopenmp -Wno-unused-function -I tests/gpu -DATTENTION_CU="\"$PWD/$OUT/attention_host.cpp\"" \
  tests/gpu/emulate_attention.cpp "$BUILD/f32/libdit.a" $(pkg-config --libs openblas 2>/dev/null || echo -lopenblas) -lm -o "$OUT/emulate_attention"
"$OUT/emulate_attention"
