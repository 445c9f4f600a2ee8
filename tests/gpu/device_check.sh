#!/usr/bin/env bash
# device_check.sh: the GPU checks, for a machine with an NVIDIA GPU but without this project's
# build dependencies. `pack` (here, after `make` with nvcc and `make bench`'s kernel benchmark)
# copies the test and benchmark binaries and the shared libraries they need into .device/;
# `run` (on the GPU machine, from the repository root) runs the device-vs-CPU tests in float32 and
# float64 and the kernel benchmark, and prints a summary table last.
set -u
case "${1:-}" in
pack)
  rm -rf .device && mkdir -p .device/lib
  cp build/f32/test_all .device/test_all_f32 && cp build/f64/test_all .device/test_all_f64
  cp build/f32/bench_kernels .device/
  for lib in $(ldd build/f32/test_all build/f32/bench_kernels | awk '/=> \// {print $3}' | sort -u); do
    case "$lib" in */libc.so*|*/libm.so*|*/ld-linux*|*/libpthread*|*/libdl.so*|*/librt.so*|*/libcudart*|*/libstdc++*|*/libgcc_s*) ;;
    *) cp -L "$lib" .device/lib/ ;; esac
  done
  grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
  du -sh .device ;;
run)
  export LD_LIBRARY_PATH=$PWD/.device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  nvidia-smi -L
  out=${OUT:-/tmp}
  for b in f32 f64; do
    echo "== device vs CPU, $b =="
    CK_RUN_SUITE=cuda .device/test_all_$b 2>&1 | tee "$out/cuda_$b.log"
  done
  echo "== all unit tests on that machine, f32 =="; .device/test_all_f32 > "$out/unit_f32.log" 2>&1; tail -1 "$out/unit_f32.log"
  echo "== kernel benchmark =="; .device/bench_kernels 0.5 | tee "$out/bench.log"
  echo "== PyTorch's attention on the same shapes =="
  python3 tests/gpu/sdpa_bench.py 2>&1 | tee "$out/sdpa.log" || echo "sdpa_bench: no PyTorch with CUDA here"
  echo; echo "== summary =="
  for b in f32 f64; do grep -h "normalized error" "$out/cuda_$b.log" | sed "s/^/$b /"; grep -h "Checks" "$out/cuda_$b.log" | sed "s/^/$b /"; done
  grep -h "^attention" "$out/bench.log" "$out/sdpa.log" ;;
*) echo "usage: tests/gpu/device_check.sh pack|run"; exit 2 ;;
esac
