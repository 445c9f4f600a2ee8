# Makefile: builds the library, the tests and the program in float32 (build/f32) and float64
# (build/f64), detects optional parts by compiling probes, and says what it found. CPU-only
# builds (USE_CUDA=0) go to build-cpu/ so the two never mix objects.
#   make            build (float32) into train/train and print what was found
#   make test       build and run the unit, MPI, CLI and parity tests in float32 and float64
#   make asan       the unit, MPI and CLI tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make soak       kill 32 runs at spread-out moments and resume each (make test kills 8)
#   make fuzz       libFuzzer targets for the file and flag readers, FUZZ_SECONDS each (make test: 2)
#   make field      the field's models under their own context parallelism, every row, into
#                   docs/results/field.md (make test runs the quick rows)
#   make deps       install the Debian packages that are missing (deps-build: only those to build and train)
# Overrides: USE_CUDA=0/1, NVCC=path, CC=compiler.

CC      ?= gcc
CFLAGS  ?= -O3 -g
# -fno-trapping-math and -fno-math-errno (no code here reads floating-point exception flags or a
# math function's errno) let the elementwise, softmax and AdamW loops vectorize; values are unchanged
override CFLAGS += -std=c17 -Wall -Wextra -D_GNU_SOURCE -MMD -MP -fno-trapping-math -fno-math-errno
# OpenMP threads the loops that are not GEMMs; OpenBLAS is its OpenMP build, so a GEMM called
# inside a parallel loop runs on its caller's thread and both share one thread pool
ARCH      := $(shell $(CC) -print-multiarch)
BLAS_DIR  := /usr/lib/$(ARCH)/openblas-openmp
BLAS_FLAGS := -I/usr/include/$(ARCH)/openblas-openmp -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas
override CFLAGS += -fopenmp -I/usr/include/$(ARCH)/openblas-openmp
LDLIBS  := -fopenmp -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas -lstb -ljpeg -lgif -ljansson -lm
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm)
DEB_PACKAGES := build-essential pkg-config libopenblas-openmp-dev check libopenmpi-dev openmpi-bin libstb-dev libjpeg-dev libgif-dev libjansson-dev
PARITY_PACKAGES := python3-torch python3-numpy python3-venv python3-pil
# PyTorch 2 and the Python packages Debian lacks come from PyPI into a virtual environment that also
# sees Debian's (numpy, and torch 1.13 where PyPI is not reachable); make deps makes it
# (tests/parity/install_pypi.sh: torch without the CUDA libraries the toolkit here has), the tests
# use it when it is there
VENV := build/venv
PYPI_TORCH := 2.15.0
PYPI_PACKAGES := yunchang==0.6.4 diffusers==0.42.1 safetensors nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
PYPI_CHECK := import importlib.metadata as m; assert m.version("torch") == "$(PYPI_TORCH)"; [m.version(p.split("=")[0]) for p in "$(PYPI_PACKAGES)".split()]

# ---- probes: compile a tiny program (source in $(1), flags in $(2)); 1 if it builds ------------
H := \#
probe = $(shell printf '%s\n' $(1) 'int main(void){return 0;}' | $(CC) -x c - -o /dev/null $(2) >/dev/null 2>&1 && echo 1 || echo 0)
BLAS_SRC   := $(H)include <cblas.h>
BLAS_USE   := void f(float *a){cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1,a,1,a,1,0,a,1);}
HAVE_BLAS  := $(call probe,'$(BLAS_SRC)' '$(BLAS_USE)',$(BLAS_FLAGS))
HAVE_CHECK := $(call probe,'$(H)include <check.h>',$(CHECK_LIBS))
HAVE_MPI   := $(shell command -v mpicc >/dev/null && printf '$(H)include <mpi.h>\nint main(void){return 0;}\n' | mpicc -x c - -o /dev/null >/dev/null 2>&1 && echo 1 || echo 0)
NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# nvcc may be a wrapper script elsewhere on PATH: ask it where its toolkit is rather than guess
CUDA_HOME  ?= $(if $(NVCC),$(realpath $(shell $(NVCC) -dryrun -x cu /dev/null 2>&1 | sed -n 's/^$(H)\$$ TOP=//p')))
CUDA_LIB   := $(patsubst %/libcudart.so,%,$(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart.so $(CUDA_HOME)/lib/libcudart.so)))
CUDA_FLAGS := -I$(CUDA_HOME)/include -L$(CUDA_LIB) -lcudart -lcublas
HAVE_NVCC  := $(if $(NVCC),1,0)
HAVE_CUDA  := $(if $(and $(NVCC),$(CUDA_LIB)),$(call probe,'$(H)include <cuda_runtime.h>' '$(H)include <cublas_v2.h>' 'void f(void){cublasHandle_t h; cublasCreate(&h); cudaFree(0);}',$(CUDA_FLAGS)),0)
HAVE_NCCL  := $(if $(HAVE_CUDA:0=),$(call probe,'$(H)include <nccl.h>',$(CUDA_FLAGS) -lnccl),0)
USE_CUDA   ?= $(HAVE_CUDA)
BUILD      := build$(if $(filter 1,$(USE_CUDA)),,-cpu)
mark = $(if $(filter 1,$(1)),✓,✗)

# ---- sources -----------------------------------------------------------------------------------
SRC_DIRS := core kernels autograd layers parallel/transport parallel/layouts parallel/mesh data draw run plan study train
LIB_SRC  := $(filter-out train/main.c,$(wildcard $(addsuffix /*.c,$(SRC_DIRS))))
TEST_SRC := $(wildcard tests/test_*.c)
CU_SRC   := $(wildcard kernels/*.cu)
NVFLAGS  := -O2 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
ifeq ($(HAVE_MPI),1)
override CFLAGS += $(shell mpicc --showme:compile)
LDLIBS   += $(shell mpicc --showme:link)
endif
# Every build runs on any x86-64: the kernels' hot loops are compiled for 128-, 256- and 512-bit
# vectors and run the widest the CPU has, chosen at start (core/cpu.h), so a binary copied to
# another machine (tests/gpu/device_check.sh copies the CUDA build to GPU machines) uses its vectors.
ifeq ($(USE_CUDA),1)
override CFLAGS += -DUSE_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_LIB) -Wl,-rpath,$(CUDA_LIB) -lcudart -ldl -lstdc++
ifeq ($(HAVE_NCCL),1)
override CFLAGS += -DUSE_NCCL
LDLIBS   += -lnccl
endif
endif

.PHONY: all test test-run bench soak demo asan asan-run deps deps-build clean found field
all: found train/train $(BUILD)/f32/test_all

# copied whenever it differs from the chosen build's binary, not only when that is newer: after
# make USE_CUDA=0, a plain make puts the CUDA build back
train/train: $(BUILD)/f32/bin/train FORCE
	@cmp -s $< $@ || { echo "cp $< $@"; cp $< $@.tmp && mv -f $@.tmp $@; }
FORCE:

found:
	@echo "found: $(call mark,$(HAVE_NVCC)) nvcc  $(call mark,$(HAVE_CUDA)) CUDA runtime+cuBLAS  $(call mark,$(HAVE_NCCL)) NCCL  $(call mark,$(HAVE_MPI)) MPI  $(call mark,$(HAVE_BLAS)) OpenBLAS  $(call mark,$(HAVE_CHECK)) Check   (building: CUDA=$(USE_CUDA))"
	@test "$(HAVE_BLAS)$(HAVE_CHECK)$(HAVE_MPI)" = 111 || { echo "Open MPI, OpenBLAS and Check are required: run 'make deps' (as root) to install them"; exit 1; }
	@mkdir -p $(BUILD) && printf '$(H)include "core/blas.h"\n$(H)include "core/cpu.h"\n$(H)include <stdio.h>\nint main(void) { char b[256]; printf("GEMM: %%s\\nCPU: %%s\\n", blas_setup(), cpu_text(b, sizeof b)); }\n' | \
	  $(CC) -x c - core/blas.c core/cpu.c -I. $(BLAS_FLAGS) -lpthread -o $(BUILD)/gemm-probe && $(BUILD)/gemm-probe

# ---- one build variant: $(1) = folder, $(2) = extra compile/link flags -------------------------
define variant
$(1)/%.o: %.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $(2) -c $$< -o $$@
# each kernel file's PTX kept in NAME.cu.o.keep/ and ptxas' registers and spills in NAME.cu.o.usage,
# which tests/gpu/ptx_check.sh reads (its other messages are shown)
$(1)/%.cu.o: %.cu
	@mkdir -p $$(dir $$@) $$@.keep
	$$(NVCC) $$(NVFLAGS) $(filter -DREAL_F64,$(2)) -MMD -MP -keep -keep-dir $$@.keep --resource-usage -c $$< -o $$@ \
	  > $$@.usage 2>&1; s=$$$$?; grep -v -e '^ptxas info' -e '^    ' $$@.usage; exit $$$$s
	@find $$@.keep -type f ! -name '*.ptx' -delete
$(1)/libdit.a: $(patsubst %.c,$(1)/%.o,$(LIB_SRC)) $(if $(filter 1,$(USE_CUDA)),$(patsubst %.cu,$(1)/%.cu.o,$(CU_SRC)))
	@rm -f $$@
	ar rcs $$@ $$^
# the fused attention again with a planted bug, which tests/test_attention.c must catch
$(1)/tests/attention_planted.o: kernels/attention.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $(2) -DATTENTION_PLANTED_BUG -Dattention_forward=planted_attention_forward \
	  -Dattention_backward=planted_attention_backward -Dattention_scratch_count=planted_attention_scratch_count \
	  -Dattention_forward_tiled=planted_attention_forward_tiled \
	  -Dattention_backward_tiled=planted_attention_backward_tiled \
	  -Dattention_tiled_scratch_count=planted_attention_tiled_scratch_count \
	  -Dattention_merge=planted_attention_merge -Dattention_progress=planted_attention_progress -c $$< -o $$@
$(1)/test_all: $(patsubst %.c,$(1)/%.o,$(TEST_SRC)) $(1)/tests/attention_planted.o $(1)/libdit.a
	$$(CC) $$(CFLAGS) $(2) $$^ -o $$@ $$(CHECK_LIBS) $$(LDLIBS)
# every failed check aborts the whole MPI job (__wrap__ck_assert_failed in the test file)
$(1)/test_parallel: $(1)/tests/mpi/test_parallel.o $(1)/libdit.a
	$$(CC) $$(CFLAGS) $(2) $$^ -o $$@ -Wl,--wrap=_ck_assert_failed $$(CHECK_LIBS) $$(LDLIBS)
$(1)/bench_kernels: $(1)/tests/bench/bench_kernels.o $(1)/libdit.a
	$$(CC) $$(CFLAGS) $(2) $$^ -o $$@ $$(LDLIBS)
$(1)/bench_gemm: $(1)/tests/bench/bench_gemm.o $(1)/libdit.a
	$$(CC) $$(CFLAGS) $(2) $$^ -o $$@ $$(LDLIBS)
$(1)/bin/train: $(1)/train/main.o $(1)/libdit.a
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $(2) $$^ -o $$@ $$(LDLIBS)
# the train program with a layout compiled only into the test build (tests/layout_all_queries.c):
# its file and its row of parallel/layouts/layouts.c (tests/layout_test.sh)
$(1)/testlayout/layouts.o: parallel/layouts/layouts.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $(2) -DSP_TEST_LAYOUT=sp_all_queries -c $$< -o $$@
$(1)/testlayout/train: $(1)/train/main.o $(1)/testlayout/layouts.o $(1)/tests/layout_all_queries.o $(1)/libdit.a
	$$(CC) $$(CFLAGS) $(2) $$^ -o $$@ $$(LDLIBS)
-include $(patsubst %.c,$(1)/%.d,$(LIB_SRC) $(TEST_SRC) train/main.c tests/mpi/test_parallel.c tests/bench/bench_kernels.c tests/bench/bench_gemm.c) $(patsubst %.cu,$(1)/%.cu.d,$(CU_SRC))
endef

SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
$(eval $(call variant,$(BUILD)/f32,))
$(eval $(call variant,$(BUILD)/f64,-DREAL_F64))
$(eval $(call variant,$(BUILD)/asan-f32,$(SAN)))
$(eval $(call variant,$(BUILD)/asan-f64,-DREAL_F64 $(SAN)))

MPIRUN := mpirun --oversubscribe $(if $(filter 0,$(shell id -u)),--allow-run-as-root)
PYTHON = $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,/usr/bin/python3)
HAVE_TORCH = $(shell $(PYTHON) -c 'import torch, numpy' >/dev/null 2>&1 && echo 1 || echo 0)

# test installs what is missing (the parity test's packages too), demo what building needs; both
# then build with the probes run again
test: deps
	@$(MAKE) --no-print-directory test-run
test-run: found train/train $(BUILD)/f64/bin/train $(BUILD)/f32/testlayout/train $(foreach v,f32 f64,$(BUILD)/$(v)/test_all $(BUILD)/$(v)/test_parallel)
	@tests/run_all.sh $(BUILD) "$(MPIRUN)" $(PYTHON)

# the main job: train with 2 ranks and check against 1 rank (its first 500 steps), with pictures;
# then 200 steps of 2 ranks and 1 rank with --exact, which must be the same to the last bit.
# It runs on the CPU, so it builds only the CPU-only program (on every core unless make was given
# -j), which train/train then is; a plain make puts the CUDA build back
demo: deps-build
	@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc)) USE_CUDA=0 found train/train
	train/train verify --ranks 2 --steps 7000 --reference-steps 500 --out runs/demo
	train/train verify --exact --ranks 2 --steps 200 --batch 8 --samples-per-class 0 --out runs/demo-exact
	@echo "demo: samples in runs/demo/ranks-2/samples.png, both loss curves in runs/demo/loss.png"
	@echo "demo: the default check says 2 ranks and 1 rank agree within float rounding (loss curves within 1e-5);"
	@echo "      --exact says they are the same computation to the last bit, so any difference at all is a bug"

# the long kill test: 32 runs killed at spread-out moments and resumed (about 4 minutes)
soak: found train/train
	tests/kill_test.sh train/train 4

bench: found train/train $(BUILD)/f32/bench_kernels $(BUILD)/f32/bench_gemm $(BUILD)/f32/bin/train $(BUILD)/f64/bin/train
	@tests/bench/record.sh kernels "Kernels" -- $(BUILD)/f32/bench_kernels
	@tests/bench/record.sh step "A training step against PyTorch, and memory at long sequences" -- tests/bench/bench_step.sh train/train $(BUILD)/f32/bench_gemm $(PYTHON)
	@tests/bench/record.sh throughput "Training throughput, default model (DiT-mini/4, 20x20 shapes, 25 tokens), batch 32" -- tests/bench/bench_train.sh train/train 40 $(BUILD)/f32/bench_gemm
	@tests/bench/record.sh plan "The planner against measured steps on a shaped network (TCP over loopback, tc tbf)" -- tests/bench/bench_plan.sh train/train
	@tests/bench/record.sh overlap "The ring's transfers overlapped against blocking, on the shaped network" -- tests/bench/bench_overlap.sh train/train
	@tests/bench/record.sh largest "The largest run that fits 4 ranks of this machine, predicted against measured memory" -- tests/bench/bench_largest.sh train/train
	@tests/bench/record.sh exact "--exact against one rank, 200 steps, float32 and float64" -- sh -c 'for v in f32 f64; do echo "== $$v"; tests/bench/exact_table.sh $(BUILD)/$$v/bin/train 200 || exit 1; done'
	@tests/bench/record.sh mutations "One-line mutations of the movement code: caught by verify --exact, by plain verify, and where locate puts them" -- tests/mutations/survey.sh $(BUILD)
	@tests/bench/record.sh zero "What --zero 3 costs against --zero 1: DiT-B/2 on 4 ranks, runs alternated" -- tests/bench/flag_cost.sh train/train 4 10 "--zero 1" "--zero 3"
	@tests/bench/record.sh check-collectives "What --check-collectives costs a step: the default model (many short collectives) and DiT-B/2, 4 ranks, runs alternated" -- sh -c 'tests/bench/flag_cost.sh train/train 4 40 "" --check-collectives --sp 2 --sp-attention ring && tests/bench/flag_cost.sh train/train 4 10 "" --check-collectives --sp 2 --sp-attention ring --model DiT-B/2 --input-size 64 --batch 4'
	@tests/bench/record.sh precision "--precision bf16 against fp32: memory, bytes sent, the CPU step, the planner, the toy" -- tests/bench/bench_precision.sh train/train
	@tests/bench/record.sh place "Do the caption run's samples follow the place words? Measured centres against the data's" -- tests/bench/place_check.sh train/train $(PYTHON)

# every diffusers model with a _cp_plan under each of its context-parallel layouts, PyTorch's
# context_parallel, and each departure's reproduction and fix: docs/results/field.md, stamped with
# the date and the versions (tests/parity/field.sh)
field: found $(BUILD)/f64/bin/train
	@tests/parity/field.sh $(PYTHON) $(BUILD)/f64/bin/train $(BUILD)/field docs/results/field.md

# sanitizers run the CPU build (ASan and the CUDA runtime do not mix)
asan:
	@$(MAKE) --no-print-directory USE_CUDA=0 asan-run
# sanitizer settings; reports go to stderr and fail the run, or with $(1) set, to files under $(1)
# (the CLI tests swallow program output, so there any file under SAN_LOGS fails the target)
san_env = ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0$(if $(1),:log_path=$(1)/asan) \
  UBSAN_OPTIONS=print_stacktrace=1$(if $(1),:log_path=$(1)/ubsan) \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan-openmpi.supp:print_suppressions=0
SAN_LOGS := $(CURDIR)/$(BUILD)/asan-logs
asan-run: found $(foreach v,f32 f64,$(BUILD)/asan-$(v)/test_all $(BUILD)/asan-$(v)/test_parallel) $(BUILD)/asan-f32/bin/train
	@rm -rf $(SAN_LOGS) && mkdir -p $(SAN_LOGS)
	@for v in f32 f64; do echo "== unit tests, $$v, ASan+UBSan =="; $(call san_env) $(BUILD)/asan-$$v/test_all || exit 1; done
	@for v in f32 f64; do for np in 1 2 3 4; do \
	  echo "== sequence parallel vs one rank, $$v, $$np ranks, ASan+UBSan =="; \
	  $(call san_env) $(MPIRUN) -np $$np $(BUILD)/asan-$$v/test_parallel || exit 1; done; done
	@echo "== the train program under mpirun, ASan+UBSan =="; $(call san_env,$(SAN_LOGS)) tests/cli_tests.sh $(BUILD)/asan-f32/bin/train; \
	status=$$?; if [ -n "$$(ls $(SAN_LOGS))" ]; then cat $$(ls -d $(SAN_LOGS)/* | head -n 2); echo "asan: sanitizer reports above (all in $(SAN_LOGS))"; exit 1; fi; \
	echo "asan: no sanitizer reports (Open MPI's own allocations suppressed by tests/lsan-openmpi.supp)"; exit $$status

# ---- fuzzing: libFuzzer targets (tests/fuzz/fuzz_*.c), built by clang with ASan + UBSan into
# $(BUILD)/fuzz, apart from the other builds (float32, no OpenMP: one thread, pragmas ignored).
# stb_image and stb_image_resize are compiled in, instrumented, in place of -lstb's copies, so
# the image folder target covers the PNG decoder and the resizer too.
#   make fuzz          every target FUZZ_SECONDS (default 60) after its saved crash inputs
#                      (tests/fuzz/regressions/<target>/); seeds in tests/fuzz/seeds/<target>/, the
#                      corpus grows in $(BUILD)/fuzz/corpus/, new crashes in $(BUILD)/fuzz/crashes/
#   make fuzz-seeds    write tests/fuzz/seeds/ again with the program's own writers
FUZZ_CC       ?= $(firstword $(shell command -v clang clang-14 2>/dev/null))
FUZZ_SECONDS  ?= 60
FUZZ_PACKAGES := clang libclang-rt-14-dev
FUZZ_TARGETS  := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_DIR      := $(BUILD)/fuzz
FUZZ_BINS     := $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS   := -O1 -g -std=c17 -Wall -Wextra -Wno-unknown-pragmas -Wno-string-plus-int -D_GNU_SOURCE -MMD -MP \
  -I/usr/include/$(ARCH)/openblas-openmp $(shell mpicc --showme:compile 2>/dev/null) $(FUZZ_SAN)
FUZZ_LIBS     := $(BLAS_FLAGS) -lstb -ljpeg -lgif -ljansson -lm $(shell mpicc --showme:link 2>/dev/null)
# 1 when FUZZ_CC links a libFuzzer target (asked only when needed); else FUZZ_WHY says why not
HAVE_FUZZ = $(if $(FUZZ_CC),$(shell printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' | \
  $(FUZZ_CC) -x c - -fsanitize=fuzzer,address,undefined -o /dev/null >/dev/null 2>&1 && echo 1 || echo 0),0)
FUZZ_WHY = $(if $(FUZZ_CC),$(FUZZ_CC) cannot link -fsanitize=fuzzer: libFuzzer is missing,clang is not installed); \
  'make deps' installs it (apt-get install $(FUZZ_PACKAGES))

.PHONY: fuzz fuzz-run fuzz-build fuzz-why-not fuzz-seeds deps-fuzz
fuzz:
	@if [ "$(HAVE_FUZZ)" = 1 ]; then $(MAKE) --no-print-directory fuzz-run; \
	else echo "fuzz: cannot build the targets ($(FUZZ_WHY))"; exit 1; fi
fuzz-run: fuzz-build
	@tests/fuzz/fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)
fuzz-build: $(FUZZ_BINS)
# empty when the targets can be built, else why not (for make test's skip line)
fuzz-why-not:
	@if [ "$(HAVE_FUZZ)" != 1 ]; then echo "$(FUZZ_WHY)"; fi
$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_EXTRA) -c $< -o $@
# Debian's stb_image, on a PNG whose first IDAT chunk is empty, adds 0 to a NULL pointer and
# copies 0 bytes to it (UB in C, harmless: nothing is read or written; a regression input,
# tests/fuzz/regressions/imagefolder/png-empty-first-idat, keeps the path run)
$(FUZZ_DIR)/obj/tests/fuzz/stb_impl.o: FUZZ_EXTRA := -w -fno-sanitize=pointer-overflow,nonnull-attribute
$(FUZZ_DIR)/libdit.a: $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(LIB_SRC))
	@rm -f $@
	ar rcs $@ $^
$(FUZZ_BINS): $(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_DIR)/obj/tests/fuzz/stb_impl.o $(FUZZ_DIR)/libdit.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer $^ -o $@ $(FUZZ_LIBS)
-include $(patsubst %.c,$(FUZZ_DIR)/obj/%.d,$(LIB_SRC) $(wildcard tests/fuzz/*.c))
fuzz-seeds: $(BUILD)/f32/make_seeds
	rm -rf tests/fuzz/seeds && $(BUILD)/f32/make_seeds tests/fuzz/seeds
$(BUILD)/f32/make_seeds: $(BUILD)/f32/tests/fuzz/make_seeds.o $(BUILD)/f32/libdit.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
-include $(BUILD)/f32/tests/fuzz/make_seeds.d
deps-fuzz:
	@if [ "$(HAVE_FUZZ)" != 1 ]; then \
	  echo "deps: installing $(FUZZ_PACKAGES) for the fuzz targets"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(FUZZ_PACKAGES) \
	    || echo "deps: $(FUZZ_PACKAGES) could not be installed; fuzzing will be skipped"; \
	fi

# deps-build: what building and training need (make demo); deps adds the parity test's packages
deps-build:
	@if [ "$(HAVE_BLAS)$(HAVE_CHECK)$(HAVE_MPI)" = 111 ] && [ -f /usr/include/stb/stb_image.h ] && [ -f /usr/include/jansson.h ] && [ -f /usr/include/jpeglib.h ] && command -v pkg-config >/dev/null; then \
	  echo "deps: everything needed is already installed"; \
	else \
	  echo "deps: installing $(DEB_PACKAGES)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(DEB_PACKAGES); \
	fi
deps: deps-build deps-fuzz
	@if [ "$(HAVE_TORCH)" != 1 ]; then \
	  echo "deps: installing $(PARITY_PACKAGES) for the PyTorch parity test (optional)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(PARITY_PACKAGES) \
	    || echo "deps: $(PARITY_PACKAGES) could not be installed; the parity test will be skipped"; \
	fi
	@if ! $(VENV)/bin/python -c '$(PYPI_CHECK)' >/dev/null 2>&1; then \
	  start=$$(date +%s); \
	  sh tests/parity/install_pypi.sh $(VENV) $(PYPI_TORCH) $(PYPI_PACKAGES) \
	    && echo "deps: torch $(PYPI_TORCH), $(PYPI_PACKAGES) in $(VENV): $$(($$(date +%s) - start)) s, $$(du -sh $(VENV) | cut -f1)" \
	    || echo "deps: PyPI's packages could not all be installed into $(VENV); the tests that need them will be skipped"; \
	fi

clean:
	rm -rf build build-cpu train/train
