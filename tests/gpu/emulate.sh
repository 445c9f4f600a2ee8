#!/usr/bin/env bash
# emulate.sh: every kernel file (kernels/*.cu) rewritten for an emulated device on the CPU
# (tests/gpu/emulate/), in float32 and float64, linked with the library built for CUDA
# (-DUSE_CUDA, the emulator's headers): BUILD/emulate/VARIANT/emulated_cuda runs the device-vs-CPU
# suite of tests/test_cuda.c, and BUILD/emulate/VARIANT/train is the train program whose
# --device cuda runs on the emulated device. So the kernels' indexing, tiles, barriers and
# shuffles, and the device path of the whole program (device arenas, parameters, host-staged
# collectives), are checked on machines without a GPU; the emulated device's memory is closed to
# the host, so a host access to device memory crashes here as it would on a GPU, and every launch
# runs under three schedules of its threads that must agree (tests/gpu/emulate/cuda_runtime.h).
# An optional perl substitution (perl -0pe, on each kernel file) is planted in the kernels first
# (into BUILD/emulate-planted, its train program too), to show a planted bug failing the suite or
# a check of the train program; one that changes no file is an error (exit 2). VARIANTS: f32, f64
# or both (the default).
# usage (from the repository root): tests/gpu/emulate.sh BUILD [PLANTED_SUBSTITUTION [VARIANTS]]
set -eu -o pipefail # a rewrite that fails (emulate.pl) fails the script
BUILD=$1; PLANT=${2:-}; VARIANTS=${3:-f32 f64}
E=tests/gpu/emulate
ARCH=$(gcc -print-multiarch)
# the library's folders (the Makefile's SRC_DIRS)
DIRS="core kernels autograd layers parallel/transport parallel/layouts parallel/mesh data draw run plan study train"
HEADERS=$(for d in $DIRS; do echo $d/*.h; done)
SOURCES=$(for d in $DIRS; do echo $d/*.c; done)
LIBS="-fopenmp -L/usr/lib/$ARCH/openblas-openmp -Wl,-rpath,/usr/lib/$ARCH/openblas-openmp -lopenblas -lstb -ljpeg -lgif -ljansson -lm $(mpicc --showme:link)"
for v in $VARIANTS; do
  OUT=$BUILD/emulate${PLANT:+-planted}/$v; LIB=$BUILD/emulate/$v/lib; mkdir -p "$OUT/cu" "$LIB"
  DEF=$([ $v = f64 ] && echo -DREAL_F64 || true)
  FLAGS="-O1 -g -pthread -fopenmp -D_GNU_SOURCE -DUSE_CUDA $DEF -I $E -I kernels"
  CFLAGS="-std=c17 $FLAGS -I/usr/include/$ARCH/openblas-openmp $(mpicc --showme:compile)"
  # the library's C files, those older than their source or any header (the planted run reuses them)
  newest=$(ls -t $HEADERS kernels/*.cuh tests/*.h $E/*.h | head -1)
  if [ -z "$PLANT" ]; then
    ls $SOURCES tests/test_cuda.c "$E/device.c" "$E/main.c" |
      while read -r c; do o=$LIB/$(echo "$c" | tr / _).o; [ "$o" -nt "$c" ] && [ "$o" -nt "$newest" ] || echo "$c"; done |
      xargs -r -P 2 -I{} sh -c 'gcc '"$CFLAGS"' -c {} -o '"$LIB"'/$(echo {} | tr / _).o'
  fi
  cu_objs="" planted=""
  for cu in kernels/*.cu; do
    [ "$cu" = kernels/device.cu ] && continue # the emulator's own: $E/device.c
    name=$(basename "$cu" .cu) src=$cu
    if [ -n "$PLANT" ]; then
      src=$OUT/cu/$name.cu
      perl -0pe "$PLANT" "$cu" > "$src"
      if cmp -s "$cu" "$src" && [ -f "$LIB/../cu/$name.o" ]; then # unchanged: the plain build's
        cu_objs="$cu_objs $LIB/../cu/$name.o"
        continue
      fi
      cmp -s "$cu" "$src" || planted="$planted $cu"
    fi
    # the plain build's object of a kernel file older than it, every header and the rewriter: kept
    if [ -z "$PLANT" ] && [ "$OUT/cu/$name.o" -nt "$cu" ] && [ "$OUT/cu/$name.o" -nt "$newest" ] &&
       [ "$OUT/cu/$name.o" -nt "$E/emulate.pl" ]; then
      cu_objs="$cu_objs $OUT/cu/$name.o"
      continue
    fi
    perl "$E/emulate.pl" "$src" > "$OUT/cu/$name.cpp"
    g++ -std=c++17 $FLAGS -Wno-unused-function -c "$OUT/cu/$name.cpp" -o "$OUT/cu/$name.o"
    cu_objs="$cu_objs $OUT/cu/$name.o"
  done
  if [ -n "$PLANT" ]; then # a substitution that matches nothing would test nothing
    [ -n "$planted" ] || { echo "emulate.sh: the planted substitution changes no kernel file: $PLANT" >&2; exit 2; }
    echo "planted in:$planted"
  fi
  # the objects of today's sources only: one left by a renamed or removed file would define twice
  lib_objs=$(ls $SOURCES "$E/device.c" | grep -vx train/main.c |
    while read -r c; do echo "$LIB/$(echo "$c" | tr / _).o"; done)
  g++ -pthread $cu_objs $lib_objs "$LIB/tests_test_cuda.c.o" "$LIB/tests_gpu_emulate_main.c.o" \
    $(pkg-config --libs check) $LIBS -o "$OUT/emulated_cuda"
  g++ -pthread $cu_objs $lib_objs "$LIB/train_main.c.o" $LIBS -o "$OUT/train"
  echo "== the CUDA kernels on the emulated device, $v =="
  "$OUT/emulated_cuda"
done
