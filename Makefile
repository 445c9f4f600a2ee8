# Makefile: builds the library, the tests and the programs in float32 (build/f32) and float64
# (build/f64), detects optional parts by compiling probes, and says what it found.
#   make            build (float32) and print what was found
#   make test       build and run the unit tests in float32 and float64
#   make asan       the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make deps       install the Debian packages that are missing
# Overrides: USE_CUDA=0/1, USE_MPI=0/1, NVCC=path, CC=compiler.

CC      ?= gcc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c17 -Wall -Wextra -D_GNU_SOURCE -MMD -MP
LDLIBS  := -lopenblas -lstb -lm
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm)
DEB_PACKAGES := build-essential pkg-config libopenblas-dev check libopenmpi-dev openmpi-bin libstb-dev

# ---- probes: compile a tiny program (source in $(1), flags in $(2)); 1 if it builds ------------
H := \#
probe = $(shell printf '%s\n' $(1) 'int main(void){return 0;}' | $(CC) -x c - -o /dev/null $(2) >/dev/null 2>&1 && echo 1 || echo 0)
BLAS_SRC   := $(H)include <cblas.h>
BLAS_USE   := void f(float *a){cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1,a,1,a,1,0,a,1);}
HAVE_BLAS  := $(call probe,'$(BLAS_SRC)' '$(BLAS_USE)',-lopenblas)
HAVE_CHECK := $(call probe,'$(H)include <check.h>',$(CHECK_LIBS))
HAVE_MPI   := $(shell command -v mpicc >/dev/null && printf '$(H)include <mpi.h>\nint main(void){return 0;}\n' | mpicc -x c - -o /dev/null >/dev/null 2>&1 && echo 1 || echo 0)
NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME  := $(patsubst %/bin/nvcc,%,$(NVCC))
HAVE_NVCC  := $(if $(NVCC),1,0)
HAVE_NCCL  := $(if $(NVCC),$(call probe,'$(H)include <nccl.h>',-I$(CUDA_HOME)/include -L$(CUDA_HOME)/lib64 -lnccl),0)
USE_CUDA   ?= $(HAVE_NVCC)
USE_MPI    ?= $(HAVE_MPI)
mark = $(if $(filter 1,$(1)),✓,✗)

# ---- sources -----------------------------------------------------------------------------------
LIB_SRC  := $(filter-out train/main.c,$(wildcard core/*.c autograd/*.c layers/*.c kernels/*.c parallel/*.c train/*.c))
TEST_SRC := $(wildcard tests/test_*.c)
CU_SRC   := $(wildcard kernels/*.cu)
NVFLAGS  := -O2 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
ifeq ($(USE_CUDA),1)
CFLAGS   += -DUSE_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++
endif

.PHONY: all test asan deps clean found
all: found build/f32/test_all

found:
	@echo "found: $(call mark,$(HAVE_NVCC)) nvcc  $(call mark,$(HAVE_NCCL)) NCCL  $(call mark,$(HAVE_MPI)) MPI  $(call mark,$(HAVE_BLAS)) OpenBLAS  $(call mark,$(HAVE_CHECK)) Check   (building: CUDA=$(USE_CUDA) MPI=$(USE_MPI))"
	@test "$(HAVE_BLAS)$(HAVE_CHECK)" = 11 || { echo "OpenBLAS and Check are required: run 'make deps' (as root) to install them"; exit 1; }

# ---- one build variant: $(1) = folder, $(2) = extra compile/link flags -------------------------
define variant
$(1)/%.o: %.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $(2) -c $$< -o $$@
$(1)/%.cu.o: %.cu
	@mkdir -p $$(dir $$@)
	$$(NVCC) $$(NVFLAGS) $(filter -DREAL_F64,$(2)) -c $$< -o $$@
$(1)/libdit.a: $(patsubst %.c,$(1)/%.o,$(LIB_SRC)) $(if $(filter 1,$(USE_CUDA)),$(patsubst %.cu,$(1)/%.cu.o,$(CU_SRC)))
	@rm -f $$@
	ar rcs $$@ $$^
$(1)/test_all: $(patsubst %.c,$(1)/%.o,$(TEST_SRC)) $(1)/libdit.a
	$$(CC) $$(CFLAGS) $(2) $$^ -o $$@ $$(CHECK_LIBS) $$(LDLIBS)
-include $(patsubst %.c,$(1)/%.d,$(LIB_SRC) $(TEST_SRC))
endef

SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
$(eval $(call variant,build/f32,))
$(eval $(call variant,build/f64,-DREAL_F64))
$(eval $(call variant,build/asan-f32,$(SAN)))
$(eval $(call variant,build/asan-f64,-DREAL_F64 $(SAN)))

test: found build/f32/test_all build/f64/test_all
	@echo "== unit tests, float32 =="; build/f32/test_all
	@echo "== unit tests, float64 =="; build/f64/test_all

asan: found build/asan-f32/test_all build/asan-f64/test_all
	@echo "== unit tests, float32, ASan+UBSan =="; ASAN_OPTIONS=detect_leaks=1 build/asan-f32/test_all
	@echo "== unit tests, float64, ASan+UBSan =="; ASAN_OPTIONS=detect_leaks=1 build/asan-f64/test_all

deps:
	@if [ "$(HAVE_BLAS)$(HAVE_CHECK)$(HAVE_MPI)" = 111 ] && [ -f /usr/include/stb/stb_image.h ] && command -v pkg-config >/dev/null; then \
	  echo "deps: everything needed is already installed"; \
	else \
	  echo "deps: installing $(DEB_PACKAGES)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(DEB_PACKAGES); \
	fi

clean:
	rm -rf build
