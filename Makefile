# deftc build. `make` builds everything into build/; `make test` runs the CPU tests;
# `make test-gpu` the GPU tests; `make run` the main job; `make help` lists the targets.
#
#   CUDA=0            CPU-only build (default: CUDA on when nvcc is found)
#   CUDA_ARCH=sm_90   GPU target (sm_80 for A100, sm_89 for L4/RTX 40xx, sm_90 for H100/H200;
#                     `nvidia-smi --query-gpu=compute_cap --format=csv` prints it as 9.0)
#   CUDA_HOME=...     toolkit location (default /usr/local/cuda)
#   STB_INCLUDE=...   where stb_image.h lives (default /usr/include/stb, Debian's libstb-dev)
#   WERROR=1          warnings are errors (CI)
#   DEBUG=1           -O0 -g, and device-side line info

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
ifeq ($(origin CUDA), undefined)
  CUDA := $(if $(NVCC),1,0)
endif
CUDA_ARCH ?= sm_90
STB_INCLUDE ?= /usr/include/stb
BUILD ?= build
WERROR ?= 0
DEBUG ?= 0

CC ?= cc
ifeq ($(CC),cc)
  CC := gcc
endif

OPT := $(if $(filter 1,$(DEBUG)),-O0 -g,-O3 -g)
INCLUDES := -Icore -Ikernels -Ilayers -Idata -Itrain -Itests -I$(STB_INCLUDE)
WARN := -Wall -Wextra $(if $(filter 1,$(WERROR)),-Werror,)
CFLAGS := -std=gnu11 $(OPT) $(WARN) -fPIC -pthread -MMD -MP $(INCLUDES)
LDLIBS := -lm -lpthread

ifeq ($(CUDA),1)
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc was not found; install the CUDA toolkit, set CUDA_HOME, or build with CUDA=0)
  endif
  CUDA_LIBDIR := $(CUDA_HOME)/lib64
  CFLAGS += -DDT_CUDA -I$(CUDA_HOME)/include
  NVCCFLAGS := -std=c++17 $(if $(filter 1,$(DEBUG)),-O0 -g -G,-O3 -lineinfo) -arch=$(CUDA_ARCH) \
               -DDT_CUDA $(INCLUDES) -Xcompiler -fPIC,-Wall,-Wextra -MMD -MP \
               $(if $(filter 1,$(WERROR)),-Werror all-warnings,)
  # cudart is linked statically (no runtime version to match on the target machine);
  # cuBLAS and cuRAND come from the toolkit's shared libraries.
  LDLIBS += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas -lcurand -lcudart_static -ldl -lrt -lstdc++
endif

# Objects depend on the build configuration, so switching CUDA=0/1, the arch or the flags
# rebuilds what it must instead of linking stale objects.
CONFIG := $(BUILD)/.config
$(shell mkdir -p $(BUILD) && echo 'CUDA=$(CUDA) ARCH=$(CUDA_ARCH) DEBUG=$(DEBUG) WERROR=$(WERROR) CC=$(CC) STB=$(STB_INCLUDE)' > $(CONFIG).new && \
  (cmp -s $(CONFIG).new $(CONFIG) || mv $(CONFIG).new $(CONFIG)); rm -f $(CONFIG).new)

# Library sources: everything in the library folders except programs (*_main.c).
LIB_C := $(filter-out %_main.c,$(wildcard core/*.c kernels/*.c layers/*.c data/*.c train/*.c))
LIB_CU := $(if $(filter 1,$(CUDA)),$(wildcard core/*.cu kernels/*.cu layers/*.cu),)
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/obj/%.o) $(LIB_CU:%.cu=$(BUILD)/obj/%.cu.o)
TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/*.c))
PROGRAMS := $(patsubst %_main.c,$(BUILD)/%,$(notdir $(wildcard train/*_main.c data/*_main.c)))
# The kernel lab (bench/lab/, CUDA only): variants validated then timed; built with everything
# so that it never rots.
LAB := $(if $(filter 1,$(CUDA)),$(BUILD)/deform_lab,)

.PHONY: all lib test test-gpu clean help data bench-loader run reproduce lab
# Keep the programs' objects (make would delete them as intermediates and rebuild them).
.SECONDARY:

# The main job: the all-deformable ResNet-18 (deft) on the sample dataset, on the GPU.
# On a machine without a GPU: make run RUN_CONFIG=configs/sample_cpu.cfg
RUN_CONFIG ?= configs/sample_deft.cfg

# The sample dataset (procedurally drawn shapes, see docs/data.md).
DATA ?= data_sample
all: lib $(PROGRAMS) $(LAB) $(BUILD)/test

lab: $(LAB)

lib: $(BUILD)/libdeftc.a $(BUILD)/libdeftc.so

$(BUILD)/obj/%.o: %.c $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(CONFIG)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/libdeftc.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/libdeftc.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS)

$(BUILD)/%: $(BUILD)/obj/train/%_main.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/libdeftc.a $(LDLIBS)

$(BUILD)/%: $(BUILD)/obj/data/%_main.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/libdeftc.a $(LDLIBS)

$(BUILD)/deform_lab: $(BUILD)/obj/bench/lab/deform_lab.cu.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/libdeftc.a $(LDLIBS)

# Tests link the objects directly so that every test file's constructor is kept.
$(BUILD)/test: $(TEST_OBJ) $(BUILD)/libdeftc.a
	$(CC) -o $@ $(TEST_OBJ) $(BUILD)/libdeftc.a $(LDLIBS)

test: $(BUILD)/test $(BUILD)/libdeftc.so
	$(BUILD)/test
	@if command -v python3 >/dev/null; then python3 tests/api/test_deftc_torch_cpu.py $(BUILD)/libdeftc.so; \
	else echo "python3 not found: the Python side (python/, tests/api/) was not tested"; fi

test-gpu: $(BUILD)/test
	$(BUILD)/test --gpu

run: all
	@test -d $(DATA)/train || $(BUILD)/mkdata --out $(DATA)
	@mkdir -p runs
	$(BUILD)/train $(RUN_CONFIG) data=$(DATA)

# The normalized training-time table of plain / unfused / deft ResNet-18 and the ablation.
reproduce: all
	BUILD=$(BUILD) bash bench/reproduce.sh

data: $(BUILD)/mkdata
	@if [ -d $(DATA)/train ]; then echo "$(DATA) exists (remove it to regenerate)"; \
	else $(BUILD)/mkdata --out $(DATA); fi

# Loader throughput on ImageNet-like JPEGs (500x375, ~110 KB), generated once.
bench-loader: $(BUILD)/mkdata $(BUILD)/loaderbench
	test -d $(BUILD)/inet-bench || $(BUILD)/mkdata --out $(BUILD)/inet-bench --train 200 --val 0 --width 500 --height 375
	$(BUILD)/loaderbench --data $(BUILD)/inet-bench

clean:
	rm -rf $(BUILD)

help:
	@echo "make run             the main job: all-deformable ResNet-18 (deft) on the sample dataset ($(RUN_CONFIG))"
	@echo "make reproduce       plain / unfused / deft training-time table + ablation (GPU; bench/reproduce.sh)"
	@echo "make                 build library, programs and tests into $(BUILD)/ (CUDA=$(CUDA), CUDA_ARCH=$(CUDA_ARCH))"
	@echo "make test            CPU test suite (what CI runs)"
	@echo "make test-gpu        GPU parity suite (needs a visible CUDA GPU)"
	@echo "make CUDA=0          CPU-only build"
	@echo "make data            generate the sample dataset into $(DATA)/ (build/mkdata --help)"
	@echo "make bench-loader    loader images/s on ImageNet-like JPEGs"
	@echo "make lab             the deformable kernel lab (build/deform_lab: variants validated, then timed; GPU)"

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
