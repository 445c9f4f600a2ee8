#!/usr/bin/env bash
# emulate.sh: the device-vs-CPU suite of tests/test_cuda.c, run against every kernel file
# (kernels/*.cu) rewritten for an emulated device on the CPU (tests/gpu/emulate/), in float32 and
# float64: the kernels' indexing, tiles, barriers and shuffles are checked on machines without a
# GPU or without nvcc. An optional perl substitution is planted in the kernels first, to show a
# planted bug failing the suite. Needs g++ and the CPU build's libdit.a in BUILD/f32 and BUILD/f64.
# usage (from the repository root): tests/gpu/emulate.sh BUILD [PLANTED_SUBSTITUTION]
set -eu
BUILD=$1; PLANT=${2:-}
E=tests/gpu/emulate
for v in f32 f64; do
  OUT=$BUILD/emulate/$v; rm -rf "$OUT"; mkdir -p "$OUT"
  DEF=$([ $v = f64 ] && echo -DREAL_F64 || true)
  FLAGS="-O1 -g -pthread -fopenmp -D_GNU_SOURCE -DUSE_CUDA $DEF -I $E -I kernels"
  objs=""
  for cu in kernels/*.cu; do
    [ "$cu" = kernels/device.cu ] && continue # the emulator's own: $E/device.c
    name=$(basename "$cu" .cu)
    perl "$E/emulate.pl" "$cu" | { [ -n "$PLANT" ] && perl -0pe "$PLANT" || cat; } > "$OUT/$name.cpp"
    g++ -std=c++17 $FLAGS -Wno-unused-function -c "$OUT/$name.cpp" -o "$OUT/$name.o"
    objs="$objs $OUT/$name.o"
  done
  for c in $E/device.c $E/main.c tests/test_cuda.c; do
    gcc -std=c17 $FLAGS -c "$c" -o "$OUT/$(basename "$c" .c).o"
    objs="$objs $OUT/$(basename "$c" .c).o"
  done
  g++ -pthread -fopenmp $objs "$BUILD/$v/libdit.a" $(pkg-config --libs check) \
    $(pkg-config --libs openblas 2>/dev/null || echo -lopenblas) -lm -o "$OUT/emulated_cuda"
  echo "== the CUDA kernels on the emulated device, $v =="
  "$OUT/emulated_cuda"
done
