#!/usr/bin/env bash
# device_check.sh: the GPU checks, for a machine with an NVIDIA GPU but without this project's
# build dependencies (no Open MPI, OpenBLAS, Check, jansson, stb or libjpeg there).
#
# pack (here, after `make -j2 build/f32/test_all build/f64/test_all build/f32/bench_kernels
#   build/f64/bin/train train/train`): copies into .device/ (ignored through .git/info/exclude)
#   the test and benchmark binaries, train/train as train_f32 and build/f64/bin/train as
#   train_f64, every shared library they need in .device/lib, and a relocatable copy of Open MPI
#   in .device/mpi/ with Debian's layout under /usr (bin/, lib/x86_64-linux-gnu/openmpi/lib with
#   the plugins in openmpi3/, lib/x86_64-linux-gnu/pmix2/, share/openmpi/) and /etc/openmpi as
#   etc/openmpi; OPAL_PREFIX, OPAL_SYSCONFDIR and the PMIX_* directories point Open MPI there.
#   Not carried: the C library family, libstdc++, libgcc_s and the CUDA libraries (cudart,
#   cuBLAS 54 MB, cuBLASLt 542 MB and NCCL 218 MB would not fit the 64 MiB the working tree may
#   weigh); `run` takes them from the machine: /usr/local/cuda, else the PyTorch wheels'
#   site-packages/nvidia/*/lib (nvidia-cuda-runtime, nvidia-cublas, nvidia-nccl-cu13).
#   Binaries and libraries are stripped, those over 8 MiB (OpenBLAS, the float32 binaries) gzipped
#   (`run` and `env` unpack the libraries into /tmp, the binaries in place); .device/MANIFEST.txt
#   lists every file. Prints the size of .device and of all that travels.
#
# selftest (here, after pack): runs a copy of .device from elsewhere with the system's Open MPI,
#   PMIx and the carried libraries hidden (a private mount namespace), under strace when installed:
#   2 ranks, a singleton, verify (which starts mpirun itself), ompi_info and the unit binary; fails
#   if any file of the system's Open MPI or PMIx is opened.
#
# run [STEP...] (on the GPU machine, from the repository root; results in $OUT, default
#   /tmp/device_check_out): sets the environment (`env` below), prints `nvidia-smi -L`, then runs
#   each step under a timeout, its output tee'd to $OUT/<log>, never stopping on a failure:
#     mpi    a 2-rank CPU run of train_f32 under the relocated mpirun (Open MPI works alone)
#     unit   the device-vs-CPU suites, CK_RUN_SUITE=cuda test_all_f32 and _f64    -> unit.log
#     cli    tests/gpu/device_cli.sh with train_f32, then train_f64                -> cli.log
#     bugs   train_f32 bugs --ranks 2 --steps 30 --device cuda                    -> bugs.log
#     bench  bench_kernels and tests/gpu/sdpa_bench.py (PyTorch's attention)      -> bench.log
#            set side by side by tests/gpu/attention_table.py (ratio to PyTorch)  -> gpu.md
#     step   tests/gpu/step_bench.sh: DiT-S/2 and DiT-B/2 steps against PyTorch -> step_bench.log
#   and last a summary (each step's result and time, the pass/fail lines, the tables), also in
#   $OUT/summary.txt. Default: every step, in that order, within DEVICE_CHECK_BUDGET seconds
#   (default 480; a step that would start with under 15 s left is skipped, the step benchmark
#   gets what the others left, at most 300 s). $OUT holds at most 8 files (the tool's limit):
#   setup.log, the five logs, summary.txt and gpu.md (copy it to docs/results/gpu.md). PYTHON: the Python with PyTorch
#   (default python3).
#
# From the device tool (it sends the repository and the ignored folders named in carry, and runs
# the command in the repository root with $OUT set):
#   carry [".device"], timeout_s 600, command: bash tests/gpu/device_check.sh run
#   only some steps:                           bash tests/gpu/device_check.sh run step
#
# env [DIR] prints the export lines of that environment for DIR (default $PWD/.device), for
#   `eval "$(bash tests/gpu/device_check.sh env)"` before running .device/train_f32 by hand.
set -u
ARCH=x86_64-linux-gnu
DEV=.device

# Restores the libraries that pack gzipped, from DIR/lib into a folder outside the repository
# (so that .device keeps its size here): /tmp/device_libs.<checksum of DIR>; and the binaries it
# gzipped (the float32 ones, whose tensor-core kernels weigh 9 MB) in place, beside their .gz
unpacked() { echo "/tmp/device_libs.$(printf %s "$1" | cksum | cut -d' ' -f1)"; }
unpack() {
  local f u
  u=$(unpacked "$1"); mkdir -p "$u"
  for f in "$1"/lib/*.gz; do
    [ -e "$f" ] || continue
    [ "$u/$(basename "${f%.gz}")" -nt "$f" ] && continue
    gzip -dc "$f" > "$u/.part" && mv "$u/.part" "$u/$(basename "${f%.gz}")"
  done
  for f in "$1"/*.gz; do
    [ -e "$f" ] || continue
    [ "${f%.gz}" -nt "$f" ] && continue
    gzip -dc "$f" > "$1/.part" && chmod +x "$1/.part" && mv "$1/.part" "${f%.gz}"
  done
}
# whether DIR holds the binary NAME, as it is or gzipped
carried() { [ -x "$1/$2" ] || [ -f "$1/$2.gz" ]; }

# the environment that runs the carried binaries and Open MPI from DIR (an absolute path)
device_env() {
  local d=$1 px=$1/mpi/lib/$ARCH/pmix2 u
  u=$(unpacked "$1")
  export OPAL_PREFIX=$d/mpi
  export OPAL_SYSCONFDIR=$d/mpi/etc/openmpi # Debian's sysconfdir is /etc/openmpi, not under the prefix
  # PMIx (Open MPI's launcher library) has its own prefix, with absolute directories on Debian
  export PMIX_PREFIX=$px PMIX_LIBDIR=$px/lib PMIX_DATAROOTDIR=$px/share PMIX_DATADIR=$px/share
  export PMIX_SYSCONFDIR=$px/share PMIX_PKGDATADIR=$px/share/pmix PMIX_PKGLIBDIR=$px/lib/pmix
  export PMIX_MCA_mca_base_component_path=$px/lib/pmix
  export PATH=$d/mpi/bin:${PATH:-/usr/bin:/bin}
  export LD_LIBRARY_PATH=$d/lib:$u:$d/mpi/lib/$ARCH/openmpi/lib:$px/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # hwloc's plugins (PCI, OpenCL, GL) are not carried: none here either, as there
  export HWLOC_PLUGINS_PATH=$d/mpi/lib/$ARCH/hwloc
  # no process_vm_readv (CMA) between ranks: containers and VMs often refuse it
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  # shared memory between ranks in /tmp where there is no writable /dev/shm
  [ -d /dev/shm ] && [ -w /dev/shm ] || export OMPI_MCA_btl_vader_backing_directory=/tmp
}

# the export lines of device_env DIR
env_lines() {
  unpack "$1" && device_env "$1"
  local v
  for v in OPAL_PREFIX OPAL_SYSCONFDIR PMIX_PREFIX PMIX_LIBDIR PMIX_DATAROOTDIR PMIX_DATADIR PMIX_SYSCONFDIR \
           PMIX_PKGDATADIR PMIX_PKGLIBDIR PMIX_MCA_mca_base_component_path PATH LD_LIBRARY_PATH \
           OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM HWLOC_PLUGINS_PATH OMPI_MCA_btl_vader_single_copy_mechanism; do
    printf 'export %s=%q\n' "$v" "${!v}"
  done
}

pack() {
  local bins=(build/f32/test_all build/f64/test_all build/f32/bench_kernels train/train build/f64/bin/train)
  local f
  for f in "${bins[@]}"; do
    [ -x "$f" ] || { echo "pack: no $f; first: make -j2 ${bins[*]}"; exit 1; }
  done
  local mpi=$DEV/mpi olib=$DEV/mpi/lib/$ARCH/openmpi/lib px=$DEV/mpi/lib/$ARCH/pmix2
  rm -rf "$DEV" && mkdir -p "$DEV/lib" "$mpi/bin" "$mpi/share" "$mpi/etc" "$olib/openmpi3" "$px/lib/pmix" "$px/share"
  cp build/f32/test_all "$DEV/test_all_f32" && cp build/f64/test_all "$DEV/test_all_f64"
  cp build/f32/bench_kernels "$DEV/" && cp train/train "$DEV/train_f32" && cp build/f64/bin/train "$DEV/train_f64"
  # Open MPI: the programs (mpirun is a link to orterun; copies, since links may not travel), the
  # plugins, the help and data files, the configuration, and PMIx's plugins and files
  cp /usr/bin/orterun "$mpi/bin/orterun" && cp /usr/bin/orterun "$mpi/bin/mpirun"
  cp /usr/bin/orted /usr/bin/ompi_info "$mpi/bin/" # orted: what a singleton (no mpirun) starts
  cp /usr/lib/$ARCH/openmpi/lib/openmpi3/*.so "$olib/openmpi3/"
  find /usr/lib/$ARCH/openmpi/lib -maxdepth 1 -type f -name '*.so' -exec cp {} "$olib/" \;
  cp -rL /usr/share/openmpi "$mpi/share/" && cp -r /etc/openmpi "$mpi/etc/"
  cp /usr/lib/$ARCH/pmix2/lib/pmix/*.so "$px/lib/pmix/" && cp -r /usr/lib/$ARCH/pmix2/share/. "$px/share/"
  # its plugin path is an absolute /usr/... there; the environment gives the relocated one
  sed -i 's|^mca_base_component_path|# relocated: PMIX_MCA_mca_base_component_path in the environment\n# &|' "$px/share/pmix-mca-params.conf"
  # every library that the binaries, Open MPI's programs and every plugin need (ldd lists the
  # whole closure), except the C library family, the C++ runtime and CUDA's
  local missing
  missing=$(ldd "${bins[@]}" "$mpi"/bin/* "$olib"/*.so "$olib"/openmpi3/*.so "$px"/lib/pmix/*.so 2>/dev/null | awk '/not found/ {print $1}' | sort -u)
  [ -n "$missing" ] && echo "pack: not found here, so not carried: $missing"
  local name path real dest
  ldd "${bins[@]}" "$mpi"/bin/* "$olib"/*.so "$olib"/openmpi3/*.so "$px"/lib/pmix/*.so 2>/dev/null |
    awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|libresolv.so*|libanl.so*|libnsl.so*) continue ;;
      libmvec.so*|libthread_db.so*|libnss_*|ld-linux*|libstdc++.so*|libgcc_s.so*) continue ;;
      libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*) continue ;;
    esac
    real=$(readlink -f "$path")
    case "$real" in
      /usr/lib/$ARCH/pmix2/*) dest=$px/lib ;;
      *) case "$name" in
           libmpi*|libopen-rte*|libopen-pal*|libmca_common_*|liboshmem*|libompitrace*) dest=$olib ;;
           *) dest=$DEV/lib ;;
         esac ;;
    esac
    [ -e "$dest/$name" ] || cp -L "$path" "$dest/$name"
  done
  find "$DEV" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-unneeded {} + 2>/dev/null
  chmod +x "$DEV"/test_all_* "$DEV"/bench_kernels "$DEV"/train_* "$mpi"/bin/*
  # the libraries and binaries over 8 MiB travel gzipped (OpenBLAS: 35 MiB, 10 gzipped; train_f32:
  # 10 MiB, 2.6 gzipped); unpack() restores them
  find "$DEV/lib" -type f -size +8M -exec gzip -9 {} +
  find "$DEV" -maxdepth 1 -type f -perm -u+x -size +8M -exec gzip -9 {} +
  (
    echo "packed $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!tests/gpu' || echo ' (with uncommitted changes)')"
    echo "bytes path"
    (cd "$DEV" && find . -type f -printf '%s %P\n' | sort -k2)
  ) > "$DEV/MANIFEST.txt"
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >> "$exclude"
  local dev_bytes tree_bytes
  dev_bytes=$(du -sb "$DEV" | cut -f1)
  tree_bytes=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
  echo "pack: .device $(awk -v b="$dev_bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB" \
       "($(find "$DEV" -type f | wc -l) files); with the working tree" \
       "$(awk -v b=$((dev_bytes + tree_bytes)) 'BEGIN { printf "%.1f", b / 1048576 }') MiB travel (limit 64 MiB)"
}

# hide DIR COMMAND... (for selftest): in a private mount namespace (unshare -m), hides the system's Open MPI,
# PMIx and hwloc plugins, and every library that DIR carries but zlib (which every system has, and
# this one's Python needs), then runs COMMAND
hide() {
  local r=$1 a=/usr/lib/$ARCH d f n
  shift
  for d in $a/openmpi $a/pmix2 /usr/share/openmpi /etc/openmpi $a/openblas-openmp $a/hwloc; do
    [ -d "$d" ] && mount -t tmpfs none "$d"
  done
  for f in /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info; do [ -e "$f" ] && mount --bind /dev/null "$f"; done
  for n in $(cd "$r" && find lib mpi -name 'lib*.so*' -printf '%f\n' | sed 's/\.gz$//' | grep -v '^libz\.' | sort -u); do
    for f in "$a/$n"*; do [ -e "$f" ] && mount --bind /dev/null "$(readlink -f "$f")"; done
  done
  exec "$@"
}

# Here, after pack: a copy of .device elsewhere runs on its own, with the system's Open MPI and
# the carried libraries hidden (hide) and an empty environment but for device_env's: 2 ranks under
# mpirun, a singleton (which starts orted), verify (which starts mpirun itself), ompi_info, and
# the unit binary; under strace -f where installed, which then must show no file of the system's
# Open MPI or PMIx opened
selftest() {
  carried "$DEV" train_f32 || { echo "selftest: no $DEV/train_f32; pack first"; exit 1; }
  local r trace=""
  r=$(mktemp -d /tmp/device_selftest.XXXXXX)
  cp -r "$DEV/." "$r/"
  env_lines "$r" > "$r/env.sh" && echo "export PATH=$r/mpi/bin:/usr/bin:/bin" >> "$r/env.sh"
  command -v strace > /dev/null && trace="strace -f -qq -e trace=openat,execve -o $r/strace.txt"
  local small="--model DiT-tiny/2 --input-size 8 --samples-per-class 0"
  unshare -m bash "$0" hide "$r" env -i HOME=/root bash -c ". $r/env.sh; set -x
    ompi_info --path all | grep -E 'Prefix|Sysconfdir|Pkglibdir'
    $trace bash -c 'mpirun -np 2 $r/train_f32 --steps 3 $small --out $r/ranks2 &&
      $r/train_f32 --steps 2 $small --out $r/singleton &&
      $r/train_f64 verify --ranks 2 --steps 4 $small --out $r/verify &&
      CK_RUN_SUITE=cuda $r/test_all_f32'" 2>&1 | grep -vE '^(step|GEMM|DiT-tiny)' | cut -c1-200
  local rc=${PIPESTATUS[0]}
  if [ -f "$r/strace.txt" ]; then
    local sys
    sys=$(grep -E 'openat\(AT_FDCWD, "/(usr/lib/'$ARCH'/(openmpi|pmix2|libmpi|libopen-|libpmix)|usr/share/openmpi|etc/openmpi)' "$r/strace.txt" | grep -v ENOENT)
    echo "selftest: $(grep -c openat "$r/strace.txt") openat calls under strace, $(echo -n "$sys" | grep -c .) of them opened a file of the system's Open MPI or PMIx${sys:+:}"
    [ -n "$sys" ] && { echo "$sys" | head; rc=1; }
    echo "selftest: opened outside /tmp, /proc, /sys and /dev:"
    grep -oE 'openat\(AT_FDCWD, "[^"]*", [^)]*\) = [0-9]+' "$r/strace.txt" | grep -oE '"[^"]*"' |
      grep -vE '^"/(tmp|proc|sys|dev)' | sort | uniq -c | sed 's/^/  /'
  fi
  if [ "$rc" = 0 ]; then echo "selftest: passed"; rm -rf "$r" "$(unpacked "$r")"
  else echo "selftest: FAILED (exit $rc); see $r"; fi
  return "$rc"
}

# Adds the directories of the CUDA libraries the binaries need to LD_LIBRARY_PATH: the CUDA
# toolkit's, then, for each still not found, the PyTorch wheels' (site-packages/nvidia/*/lib)
cuda_libs() {
  local d lib roots found
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
  done
  roots=$( (env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "${PYTHON:-python3}" -c 'import nvidia; print(*nvidia.__path__)'
             ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia /usr/local/lib/python3*/dist-packages/nvidia) 2>/dev/null | sort -u)
  for lib in $(ldd "$DEV/train_f32" "$DEV/test_all_f32" 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
    found=$( [ -n "$roots" ] && find $roots -maxdepth 4 -name "$lib" 2>/dev/null | head -1)
    if [ -n "$found" ]; then
      case ":$LD_LIBRARY_PATH:" in *":$(dirname "$found"):"*) ;; *) LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found") ;; esac
    else echo "cuda_libs: $lib is nowhere on this machine (looked in /usr/local/cuda and ${roots:-no PyTorch wheels})"; fi
  done
  export LD_LIBRARY_PATH
}

# step NAME LOG MAX_SECONDS COMMAND...: runs COMMAND under a timeout (MAX_SECONDS, less if the
# budget is shorter), its output tee'd to $OUT/LOG; records the result, never stops the script
step() {
  local name=$1 log=$OUT/$2 max=$3 t left t0 rc result
  shift 3
  left=$((DEADLINE - $(date +%s) - 10)); t=$max
  [ "$left" -lt "$t" ] && t=$left
  if [ "$t" -lt 15 ]; then
    echo "== $name: skipped, out of time ==" | tee -a "$log"
    printf "| %-18s | %-22s | %5s |\n" "$name" "skipped (out of time)" - >> "$WORK/steps.md"; return
  fi
  echo "== $name (at most ${t}s) ==" | tee -a "$log"
  t0=$(date +%s)
  STEP_SECONDS=$t timeout -k 10 "$t" "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  case $rc in 0) result=passed ;; 124|137) result="TIMED OUT (${t}s)" ;; *) result="FAILED (exit $rc)" ;; esac
  echo "== $name: $result ==" | tee -a "$log"
  printf "| %-18s | %-22s | %5s |\n" "$name" "$result" $(($(date +%s) - t0)) >> "$WORK/steps.md"
}

run() {
  local steps=${*:-mpi unit cli bugs bench step} s d
  carried "$DEV" train_f32 || { echo "run: no $DEV/train_f32: run 'tests/gpu/device_check.sh pack' where it builds, and carry .device"; exit 1; }
  OUT=${OUT:-/tmp/device_check_out}; mkdir -p "$OUT"
  rm -f "$OUT"/{setup,unit,cli,bugs,bench,step_bench}.log "$OUT/summary.txt" "$OUT/gpu.md"
  WORK=$(mktemp -d /tmp/device_check.XXXXXX)
  DEADLINE=$(($(date +%s) + ${DEVICE_CHECK_BUDGET:-480}))
  ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  d=$(realpath "$DEV")
  unpack "$d"
  device_env "$d"
  cuda_libs > "$OUT/setup.log" 2>&1; cat "$OUT/setup.log"
  export PYTHONUNBUFFERED=1
  printf "| %-18s | %-22s | %5s |\n| %-18s | %-22s | %5s |\n" step result s --- --- --- > "$WORK/steps.md"
  {
    echo "== setup =="; date -u; uname -r; nproc; grep MemTotal /proc/meminfo
    nvidia-smi -L || echo "nvidia-smi failed"
    echo "python3: $(command -v python3); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "the CUDA libraries train_f32 loads:"
    ldd "$d/train_f32" | grep -E 'cudart|cublas|nccl|not found'
    echo "Open MPI relocated (ompi_info --path all):"
    ompi_info --path all 2>&1 | grep -E 'Prefix|Libdir|Pkglibdir|Sysconfdir|Pkgdatadir' | sort -u
  } 2>&1 | tee -a "$OUT/setup.log"
  for s in $steps; do
    case $s in
      mpi) step "mpi (2 ranks, CPU)" setup.log 60 mpirun -np 2 "$d/train_f32" --steps 3 --model DiT-tiny/2 \
             --input-size 8 --samples-per-class 0 --out "$WORK/mpi" ;;
      unit) for b in f32 f64; do step "unit $b" unit.log 60 env CK_RUN_SUITE=cuda "$d/test_all_$b"; done ;;
      cli) for b in f32 f64; do step "cli $b" cli.log 120 bash tests/gpu/device_cli.sh "$d/train_$b" "$WORK/cli_$b"; done ;;
      bugs) step "bugs" bugs.log 120 "$d/train_f32" bugs --ranks 2 --steps 30 --device cuda --out "$WORK/bugs" ;;
      bench) step "bench_kernels" bench.log 90 "$d/bench_kernels" 0.3
             step "sdpa_bench" bench.log 60 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "${PYTHON:-python3}" tests/gpu/sdpa_bench.py
             "${PYTHON:-python3}" tests/gpu/attention_table.py "$OUT/bench.log" "$OUT/gpu.md" ;;
      step) step "step_bench" step_bench.log 300 env STEP_BENCH_PY_LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" \
              bash tests/gpu/step_bench.sh "$d/train_f32" "$WORK/step" ;;
      *) echo "run: no step '$s' (mpi unit cli bugs bench step)" ;;
    esac
  done
  {
    echo; echo "== summary ($(date -u +%H:%M:%S)) =="
    cat "$WORK/steps.md"
    if [ -f "$OUT/unit.log" ]; then
      echo; echo "-- device vs CPU (unit) --"
      grep -hE "^== unit [a-z0-9]+ \(|normalized error|Checks|skipped|:[FE]:" "$OUT/unit.log" | awk '/^== unit/ { delete seen } !seen[$0]++'
    fi
    if [ -f "$OUT/cli.log" ]; then
      echo; echo "-- train --device cuda against its CPU path (cli; the ok lines in cli.log) --"
      grep -hE "^(== cli [a-z0-9]+ \(|FAILED|device_cli)" "$OUT/cli.log" | cut -c1-300 |
        awk '/^== cli/ { n = 0 } /^FAILED/ && ++n > 8 { more++; next } { print }
             END { if (more) print "(" more " more FAILED lines in cli.log)" }'
    fi
    if [ -f "$WORK/bugs/bugs.md" ]; then echo; echo "-- bug catalogue on the device (bugs) --"; cat "$WORK/bugs/bugs.md"
    elif [ -f "$OUT/bugs.log" ]; then echo; echo "-- bug catalogue on the device (bugs): no table; the log's end --"; tail -5 "$OUT/bugs.log" | cut -c1-300; fi
    if [ -f "$OUT/gpu.md" ]; then echo; echo "-- attention against PyTorch's SDPA (bench; gpu.md, for docs/results/gpu.md) --"; cat "$OUT/gpu.md"
    elif [ -f "$OUT/bench.log" ]; then echo; echo "-- the CUDA kernels and PyTorch's attention (bench) --"; grep -hE "CUDA|torch" "$OUT/bench.log"; fi
    if [ -f "$WORK/step/table.md" ]; then echo; echo "-- training step against PyTorch (step) --"; cat "$WORK/step/table.md"; fi
  } 2>&1 | tee "$OUT/summary.txt"
  rm -rf "$WORK"
}

case "${1:-}" in
  pack) pack ;;
  run) shift; run "$@" ;;
  env) env_lines "$(realpath "${2:-$DEV}")" ;;
  selftest) selftest ;;
  hide) shift; hide "$@" ;; # selftest's, inside unshare -m
  *) echo "usage: tests/gpu/device_check.sh pack | selftest | run [mpi unit cli bugs bench step] | env [DIR]"; exit 2 ;;
esac
