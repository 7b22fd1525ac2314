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
#   SAN=1             AddressSanitizer + UndefinedBehaviorSanitizer build of the CPU code (CUDA=0,
#                     into build-san/ unless BUILD is given): `make test SAN=1` is what CI runs
#                     (SAN=fuzz: the same for libFuzzer targets, with clang; see `make fuzz`)
#   JPEG=0|1          JPEG decoding with libjpeg-turbo, linked statically (default: 1 when its
#                     libjpeg.a and jpeglib.h are found; otherwise stb_image decodes JPEG too)
#   PNG=0|1           PNG decoding with libpng (and zlib), linked statically (default: 1 when
#                     libpng.a, libz.a and png.h are found; otherwise stb_image decodes PNG)
#   NCCL=0|1          several GPUs (gpus=N) through NCCL (default: 1 when nccl.h and libnccl.so
#                     are found in NCCL_HOME, the CUDA toolkit's folders, /usr or /usr/local;
#                     without it the trainer uses one GPU and says so when asked for more)
#   NCCL_HOME=...     where NCCL is (include/nccl.h, lib/ or lib64/libnccl.so)

SAN ?= 0
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
ifeq ($(origin CUDA), undefined)
  CUDA := $(if $(filter 1 fuzz,$(SAN)),0,$(if $(NVCC),1,0))
endif
ifneq ($(filter 11 fuzz1,$(SAN)$(CUDA)),)
  $(error SAN=$(SAN) builds the CPU code only (the CUDA runtime and ASan do not mix): use CUDA=0)
endif
CUDA_ARCH ?= sm_90
STB_INCLUDE ?= /usr/include/stb
BUILD ?= $(if $(filter 1,$(SAN)),build-san,$(if $(filter fuzz,$(SAN)),build-fuzz,build))
WERROR ?= 0
DEBUG ?= 0

CC ?= cc
ifeq ($(CC),cc)
  CC := gcc
endif

OPT := $(if $(filter 1,$(DEBUG)),-O0 -g,-O3 -g)
# Headers are included by their path from the repository root ("ops/conv/conv_plan.h",
# "core/dt_tensor.h"): no flat search path, so that no file can shadow another of its name.
INCLUDES := -I. -I$(STB_INCLUDE)
WARN := -Wall -Wextra -Wpointer-arith $(if $(filter 1,$(WERROR)),-Werror,)
# Sanitizers: UB stops the program (a test that trips it fails); ASan reports and stops too.
SAN_ON := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_FUZZ := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SANFLAGS := $(if $(filter 1,$(SAN)),$(SAN_ON),$(if $(filter fuzz,$(SAN)),$(SAN_FUZZ),))
CFLAGS := -std=gnu11 $(OPT) $(WARN) -fPIC -fvisibility=hidden -pthread -MMD -MP $(INCLUDES) $(SANFLAGS)
LDLIBS := -lm -lpthread $(SANFLAGS)
# The C++ runtime (the CUDA objects', the compiled PyTorch operator's) by soname, the process's
# own libstdc++.so.6, so that one C++ runtime serves a PyTorch process: the H200's CUDA build of
# libdeftc.so carried and exported C++ runtime code of its own (std::ostream::_M_insert<long>),
# and the compiled operator's first error message crashed in it (docs/PERF.md section 24).
CXXRT := -l:libstdc++.so.6

# libjpeg-turbo (optional). Programs and tests link its static library, so they run where it
# is not installed (a machine the binaries are copied to); libdeftc.so links the shared one, because Debian's
# libjpeg.a is not position-independent.
JPEG_LIB ?= $(shell $(CC) -print-file-name=libjpeg.a)
ifeq ($(origin JPEG), undefined)
  JPEG := $(if $(filter /%,$(JPEG_LIB)),$(shell printf '\043include <stdio.h>\n\043include <jpeglib.h>\n' | \
            $(CC) -E -x c - >/dev/null 2>&1 && echo 1),)
  JPEG := $(if $(JPEG),1,0)
endif
ifeq ($(JPEG)$(origin JPEG),0file)
  ifeq ($(filter clean help,$(MAKECMDGOALS)),)
    $(info deftc: libjpeg-turbo not found: stb_image decodes JPEG (slower, not hardened against crafted files); for the fast path: sudo apt-get install libjpeg-dev)
  endif
endif
JPEG_STATIC := $(if $(filter 1,$(JPEG)),$(JPEG_LIB),)
JPEG_SHARED := $(if $(filter 1,$(JPEG)),-ljpeg,)
CFLAGS += $(if $(filter 1,$(JPEG)),-DDT_LIBJPEG,)

# libpng (optional), as libjpeg-turbo: static for programs and tests (with zlib, which it
# needs), shared for libdeftc.so.
PNG_LIB ?= $(shell $(CC) -print-file-name=libpng.a)
ZLIB_LIB ?= $(shell $(CC) -print-file-name=libz.a)
ifeq ($(origin PNG), undefined)
  PNG := $(if $(and $(filter /%,$(PNG_LIB)),$(filter /%,$(ZLIB_LIB))),$(shell printf '\043include <png.h>\n' | \
           $(CC) -E -x c - >/dev/null 2>&1 && echo 1),)
  PNG := $(if $(PNG),1,0)
endif
ifeq ($(PNG)$(origin PNG),0file)
  ifeq ($(filter clean help,$(MAKECMDGOALS)),)
    $(info deftc: libpng not found: stb_image decodes PNG (no CRC checks, 16-bit images through 16 bytes a pixel); for libpng: sudo apt-get install libpng-dev)
  endif
endif
PNG_STATIC := $(if $(filter 1,$(PNG)),$(PNG_LIB) $(ZLIB_LIB),)
PNG_SHARED := $(if $(filter 1,$(PNG)),-lpng -lz,)
CFLAGS += $(if $(filter 1,$(PNG)),-DDT_LIBPNG,)
# What programs, tests and the shared library link for the decoders.
IMG_STATIC := $(JPEG_STATIC) $(PNG_STATIC)
IMG_SHARED := $(JPEG_SHARED) $(PNG_SHARED)

ifeq ($(CUDA),1)
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc was not found; install the CUDA toolkit, set CUDA_HOME, or build with CUDA=0)
  endif
  CUDA_LIBDIR := $(CUDA_HOME)/lib64
  CFLAGS += -DDT_CUDA -I$(CUDA_HOME)/include
  NVCCFLAGS := -std=c++17 $(if $(filter 1,$(DEBUG)),-O0 -g -G,-O3 -lineinfo) -arch=$(CUDA_ARCH) \
               -DDT_CUDA $(INCLUDES) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra -MMD -MP \
               $(if $(filter 1,$(WERROR)),-Werror all-warnings,)
  # The Hopper conv engine (ops/conv/sm90_gemm.cuh: wgmma, TMA, setmaxnreg) needs sm_90a, the
  # arch-specific target: its sources are compiled for it when CUDA_ARCH=sm_90, and DT_SM90A
  # tells the device layer that the build carries it (dt_gpu_has_sm90a). For another arch they
  # compile to empty kernels that the plan never chooses.
  COMMA := ,
  SM90A := $(if $(filter sm_90,$(CUDA_ARCH)),1,0)
  SM90A_FLAGS := $(if $(filter 1,$(SM90A)),-gencode arch=compute_90a$(COMMA)code=sm_90a,-arch=$(CUDA_ARCH))
  CFLAGS += $(if $(filter 1,$(SM90A)),-DDT_SM90A,)
  # cudart is linked statically (no runtime version to match on the target machine);
  # cuBLAS and cuRAND come from the toolkit's shared libraries. The C++ runtime is the system's
  # shared one by its soname (CXXRT, above), never libstdc++.a.
  LDLIBS += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas -lcurand -lcudart_static -ldl -lrt $(CXXRT)
  # NCCL: the first folder holding both include/nccl.h and a libnccl.so (NCCL_HOME first). The
  # library is linked shared, with its folder as rpath; a system-wide NCCL of the same major
  # version (libnccl.so.2) serves on a machine that lacks the build's folder.
  NCCL_CANDIDATES := $(NCCL_HOME) $(CUDA_HOME) /usr/local /usr
  NCCL_FOUND := $(firstword $(foreach d,$(NCCL_CANDIDATES),$(if $(and $(wildcard $(d)/include/nccl.h),\
                  $(wildcard $(d)/lib64/libnccl.so $(d)/lib/libnccl.so $(d)/lib/x86_64-linux-gnu/libnccl.so)),$(d))))
  ifeq ($(origin NCCL), undefined)
    NCCL := $(if $(NCCL_FOUND),1,0)
  endif
  ifeq ($(NCCL),1)
    ifeq ($(NCCL_FOUND),)
      $(error NCCL=1 but no nccl.h + libnccl.so in $(NCCL_CANDIDATES); set NCCL_HOME)
    endif
    NCCL_LIBDIR := $(dir $(firstword $(wildcard $(NCCL_FOUND)/lib64/libnccl.so $(NCCL_FOUND)/lib/libnccl.so $(NCCL_FOUND)/lib/x86_64-linux-gnu/libnccl.so)))
    CFLAGS += -DDT_NCCL -I$(NCCL_FOUND)/include
    NVCCFLAGS += -DDT_NCCL -I$(NCCL_FOUND)/include
    LDLIBS += -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) -lnccl
  else
    ifeq ($(filter clean help,$(MAKECMDGOALS)),)
      $(info deftc: NCCL not found (NCCL_HOME to point at it): training uses one GPU at a time)
    endif
  endif
else
  NCCL := 0
endif

# Objects depend on the build configuration, so switching CUDA=0/1, the arch or the flags
# rebuilds what it must instead of linking stale objects.
CONFIG := $(BUILD)/.config
$(shell mkdir -p $(BUILD) && echo 'CUDA=$(CUDA) ARCH=$(CUDA_ARCH) DEBUG=$(DEBUG) WERROR=$(WERROR) CC=$(CC) STB=$(STB_INCLUDE) SAN=$(SAN) JPEG=$(JPEG) PNG=$(PNG) NCCL=$(NCCL) VIS=hidden' > $(CONFIG).new && \
  (cmp -s $(CONFIG).new $(CONFIG) || mv $(CONFIG).new $(CONFIG)); rm -f $(CONFIG).new)

# Library sources: everything in the library folders (core/, one folder per op family under
# ops/, models/, data/, train/) except programs (*_main.c), the libjpeg-turbo and libpng
# decoders when they are not built in, and one of the GPU decode's two files: the loader's
# nvJPEG decode thread (CUDA throughout) in CUDA builds, its refusing stand-in in CPU-only ones.
GPU_DECODE_OUT := $(if $(filter 1,$(CUDA)),data/dt_gpu_decode_nocuda.c,data/dt_gpu_decode.c)
LIB_C := $(filter-out %_main.c train/train_cli.c $(if $(filter 1,$(JPEG)),,data/dt_jpeg.c) $(if $(filter 1,$(PNG)),,data/dt_png.c) $(GPU_DECODE_OUT),\
           $(wildcard core/*.c ops/*/*.c models/*.c data/*.c train/*.c))
LIB_CU := $(if $(filter 1,$(CUDA)),$(wildcard core/*.cu ops/*/*.cu models/*.cu data/*.cu),)
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/obj/%.o) $(LIB_CU:%.cu=$(BUILD)/obj/%.cu.o)
TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/*.c))
PROGRAMS := $(patsubst %_main.c,$(BUILD)/%,$(notdir $(wildcard train/*_main.c data/*_main.c bench/*_main.c)))
# The benchmark programs' sources (bench/*.c: build/bench and its parts, build/chart) stay out of
# the library; build/bench links its parts (BENCH_OBJ) beside it, build/chart and the tests the
# chart's drawing (CHART_OBJ).
CHART_OBJ := $(BUILD)/obj/bench/chart.o
BENCH_OBJ := $(filter-out $(CHART_OBJ),$(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out %_main.c,$(wildcard bench/*.c))))
# The kernel lab (bench/lab/, CUDA only): variants validated then timed; built with everything
# so that it never rots.
LAB := $(if $(filter 1,$(CUDA)),$(BUILD)/deform_lab $(BUILD)/conv_lab $(BUILD)/depthwise_lab $(BUILD)/bn_lab $(if $(filter 1,$(SM90A)),$(BUILD)/sm90_gemm_lab),)

# Every target that is not a file, in the order `make help` lists them; each has a HELP_ line
# below (make stops when one is missing, so that no target is left out of make help). A line
# goes on under the text with HELP_MORE (printf pads the missing argument to the column).
PHONY := run test all lib torch-op test-gpu data lab bench-loader reproduce dw-chart scaling fuzz fuzz-run clean help
.PHONY: $(PHONY)
# Keep the programs' objects (make would delete them as intermediates and rebuild them).
.SECONDARY:

# The main job: the all-deformable ResNet-18 (deft) on the sample dataset, on the GPU.
# On a machine without a GPU: make run RUN_CONFIG=configs/sample_cpu.cfg
RUN_CONFIG ?= configs/sample_deft.cfg
# extra key=value overrides for make run, e.g. RUN_ARGS="precision=bf16 seed=1"
RUN_ARGS ?=

# The sample dataset (procedurally drawn shapes, see docs/data.md).
DATA ?= data_sample
all: lib $(PROGRAMS) $(LAB) $(BUILD)/test $(BUILD)/model_io

lab: $(LAB)

lib: $(BUILD)/libdeftc.a $(BUILD)/libdeftc.so

# stb_image is the one dependency a fresh Debian/Ubuntu machine lacks, so that `make test` and
# `make run` are the whole set-up: when its header is missing, make installs libstb-dev when it
# runs as root with apt-get (CI, containers), and otherwise stops with the command to run.
# (libjpeg-turbo is optional: without it stb_image decodes JPEG too; see JPEG above.)
$(STB_INCLUDE)/stb_image.h:
	@if [ "$(STB_INCLUDE)" = /usr/include/stb ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "== $@ is missing: installing libstb-dev"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libstb-dev; \
	else \
	  echo "deftc needs stb_image.h, which is not in $(STB_INCLUDE). Install it with"; \
	  echo "    sudo apt-get install libstb-dev"; \
	  echo "(Debian/Ubuntu), or point STB_INCLUDE=DIR at a folder holding stb_image.h and stb_image_write.h."; \
	  exit 1; \
	fi

$(BUILD)/obj/%.o: %.c $(CONFIG) | $(STB_INCLUDE)/stb_image.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# Third-party stb code under the sanitizers, two benign patterns left alone (everything else,
# ASan's bounds included, is checked): stb_image_write's JPEG bit writer shifts signed ints
# left past their range (it only writes our own pixels); stb_image's PNG reader, given an
# empty IDAT chunk, adds 0 to its NULL buffer and memcpy's 0 bytes into it.
STB_SAN_EXEMPT := -fno-sanitize=pointer-overflow,nonnull-attribute
$(BUILD)/obj/data/stb_write_impl.o: CFLAGS += $(if $(filter 1 fuzz,$(SAN)),-fno-sanitize=shift-base,)
$(BUILD)/obj/data/stb_image_impl.o: CFLAGS += $(if $(filter 1 fuzz,$(SAN)),$(STB_SAN_EXEMPT),)

$(BUILD)/obj/%.cu.o: %.cu $(CONFIG)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# The sm_90a objects: the engine's launchers, its lab and the deformable lab's sampling producer
# (see SM90A above).
SM90A_OBJ := $(addprefix $(BUILD)/obj/,ops/conv/conv_sm90.cu.o bench/lab/sm90_gemm_lab.cu.o bench/lab/deform_sampler_sm90.cu.o)
$(SM90A_OBJ): NVCCFLAGS := $(filter-out -arch=%,$(NVCCFLAGS)) $(SM90A_FLAGS)

$(BUILD)/libdeftc.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

# Only the dt_ symbols are exported (core/libdeftc.map says why).
$(BUILD)/libdeftc.so: $(LIB_OBJ) core/libdeftc.map
	$(CC) -shared -Wl,--version-script=core/libdeftc.map -o $@ $(LIB_OBJ) $(IMG_SHARED) $(LDLIBS)

# The compiled PyTorch operator (python/csrc/deftc_torch_op.cpp), built against the PyTorch that
# TORCH_PYTHON imports (its headers, pybind11 and Python's, and its libraries, found through
# torch.utils.cpp_extension; the Python symbols come from the process that loads it) and linked
# with libdeftc.so beside it ($$ORIGIN), where python/deftc_torch.py looks for it. It has to be
# rebuilt for another PyTorch version. Not part of `all`: PyTorch is optional (CI has none).
TORCH_PYTHON ?= python3
TORCH_FLAGS_PY := import sysconfig, torch, torch.utils.cpp_extension as c; \
  print(' '.join(['-isystem ' + p for p in c.include_paths() + [sysconfig.get_paths()['include']]] + \
  ['-D_GLIBCXX_USE_CXX11_ABI=%d' % torch._C._GLIBCXX_USE_CXX11_ABI] + \
  ['-L%s -Wl,-rpath,%s' % (p, p) for p in c.library_paths()] + ['-lc10 -ltorch_cpu']))
torch-op: $(BUILD)/deftc_torch_op.so

$(BUILD)/deftc_torch_op.so: python/csrc/deftc_torch_op.cpp ops/deform/dt_deform_api.h core/dt_dtype.h core/dt_api.h $(BUILD)/libdeftc.so
	@flags="$$($(TORCH_PYTHON) -c "$(TORCH_FLAGS_PY)")" || { echo "make torch-op: $(TORCH_PYTHON) cannot import torch: install PyTorch, or set TORCH_PYTHON to a Python that has it"; exit 1; }; \
	cmd="$(CXX) -std=c++20 $(OPT) -Wall -Wextra -fPIC -fvisibility=hidden -shared -I. $< -o $@ $$flags -L$(BUILD) -ldeftc -Wl,-rpath,'\$$ORIGIN' $(CXXRT)"; \
	echo "$$cmd"; eval "$$cmd"

# build/train: its command line (train/train_cli.c) is program code, outside the library.
$(BUILD)/train: $(BUILD)/obj/train/train_main.o $(BUILD)/obj/train/train_cli.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $^ $(IMG_STATIC) $(LDLIBS)

$(BUILD)/%: $(BUILD)/obj/train/%_main.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

$(BUILD)/%: $(BUILD)/obj/data/%_main.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

$(BUILD)/bench: $(BUILD)/obj/bench/bench_main.o $(BENCH_OBJ) $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BENCH_OBJ) $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

$(BUILD)/chart: $(BUILD)/obj/bench/chart_main.o $(CHART_OBJ) $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(CHART_OBJ) $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

# build/deform_lab: the deformable kernel lab (docs/deft.md), with its sm_90a part (the sampling
# as the Hopper engine's A producer, bench/lab/deform_sampler_sm90.cu).
DEFORM_LAB_OBJ := $(addprefix $(BUILD)/obj/bench/,lab/deform_sampler_sm90.cu.o bench_common.o)
$(BUILD)/deform_lab: $(BUILD)/obj/bench/lab/deform_lab.cu.o $(DEFORM_LAB_OBJ) $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(DEFORM_LAB_OBJ) $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

# build/conv_lab: the implicit-GEMM convolution lab (docs/conv.md), linked the same way.
$(BUILD)/conv_lab: $(BUILD)/obj/bench/lab/conv_lab.cu.o $(BUILD)/obj/bench/bench_common.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/obj/bench/bench_common.o $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

# build/depthwise_lab: the depthwise lab (issue 38): the shipping kernels beside the
# register-blocked variant (ops/conv/depthwise_rb.cuh), validated against the CPU twins, timed.
$(BUILD)/depthwise_lab: $(BUILD)/obj/bench/lab/depthwise_lab.cu.o $(BUILD)/obj/bench/bench_common.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/obj/bench/bench_common.o $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

# build/bn_lab: the batch-norm lab (issue 34): the NHWC passes at the tunings of
# ops/batchnorm/batchnorm_nhwc.cuh beside the library's, validated, then timed.
$(BUILD)/bn_lab: $(BUILD)/obj/bench/lab/bn_lab.cu.o $(BUILD)/obj/bench/bench_common.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/obj/bench/bench_common.o $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

# build/sm90_gemm_lab: the Hopper engine's lab (docs/conv.md "The Hopper engine"): its GEMM and
# conv variants validated, then timed beside cuBLAS; it uses the library's tensor maps.
$(BUILD)/sm90_gemm_lab: $(BUILD)/obj/bench/lab/sm90_gemm_lab.cu.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

# build/model_io: one model's logits, loss and gradients for tests/api/test_torchvision_weights.py
# (a test tool: its source is in tests/api/).
$(BUILD)/model_io: $(BUILD)/obj/tests/api/model_io.o $(BUILD)/libdeftc.a
	$(CC) -o $@ $< $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

# Tests link the objects directly so that every test file's constructor is kept; the program
# code they test (build/train's command line, the chart's drawing) beside them.
$(BUILD)/test: $(TEST_OBJ) $(BUILD)/obj/train/train_cli.o $(CHART_OBJ) $(BUILD)/libdeftc.a
	$(CC) -o $@ $(TEST_OBJ) $(BUILD)/obj/train/train_cli.o $(CHART_OBJ) $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

# The C suite, then the Python side through build/test --then, so that the last line counts
# all four suites: "N passed, N failed, N skipped (N C, N tree, N Python, N torchvision)". Not under the
# sanitizers (python cannot load an ASan-built library) nor without python3: that is said
# first. The torchvision suite (deftc against torchvision with the same weights, through
# build/model_io) skips each case, saying so, where PyTorch is not installed (CI).
PY_SUITE = $(if $(filter 0,$(SAN)),$(if $(shell command -v python3),python3 tests/api/test_deftc_torch_cpu.py $(BUILD)/libdeftc.so))
PY_WEIGHTS = $(if $(PY_SUITE),python3 tests/api/test_torchvision_weights.py $(BUILD))
# The tree's house rules (tests/check_tree.py: include circles, stems, long functions, the docs'
# code names, no exit in the library, DT_CUDA in core/ alone, libdeftc.so's exports), on the
# build's objects; under the sanitizers too.
TREE_CHECK = $(if $(shell command -v python3),python3 tests/check_tree.py $(BUILD))
# The register-blocked depthwise kernels' indexing, emulated on the CPU against the twins
# (bench/lab/depthwise_rb_emu/run.sh): in CPU-only builds, whose libdeftc.a it links; not under
# the sanitizers (it is the kernels' arithmetic it checks, not the library's memory)
DW_EMU = $(if $(filter 0,$(CUDA)),$(if $(filter 0,$(SAN)),bash bench/lab/depthwise_rb_emu/run.sh $(BUILD)))
test: $(BUILD)/test $(BUILD)/libdeftc.so $(BUILD)/model_io
	@if [ "$(SAN)" != 0 ]; then echo "SAN=$(SAN): the Python side is not tested (python cannot load an ASan-built library)"; \
	elif [ -z "$(PY_SUITE)" ]; then echo "python3 not found: the Python side (python/, tests/api/) is not tested"; fi
	$(BUILD)/test $(if $(TREE_CHECK),--then tree "$(TREE_CHECK)") $(if $(DW_EMU),--then "depthwise emulator" "$(DW_EMU)") $(if $(PY_SUITE),--then Python "$(PY_SUITE)" --then torchvision "$(PY_WEIGHTS)")

test-gpu: $(BUILD)/test
	$(BUILD)/test --gpu

run: all
	@test -d $(DATA)/train || $(BUILD)/mkdata --out $(DATA)
	@mkdir -p runs
	$(BUILD)/train $(RUN_CONFIG) data=$(DATA) $(RUN_ARGS)

# The normalized training-time table of plain / unfused / deft ResNet-18 and the ablation.
reproduce: all
	BUILD=$(BUILD) bash bench/reproduce.sh

# The depthwise dilation chart (issue 38) from the committed H200 logs of 2026-12-04, no GPU:
# docs/logs/2026-12-04/depthwise_dilation.csv and docs/depthwise_dilation.png (bench/dw_chart.py).
dw-chart: $(BUILD)/chart
	python3 bench/dw_chart.py $(BUILD)/chart

# Data-parallel scaling: images/s on 1 GPU and on each count of GPUS (a list, default 2: GPUS="2 4 8"),
# plain and deft, BUCKET_MB the bucket sizes to sweep (bench/scaling.sh);
# without a GPU it says so at once (build/train --devices) instead of failing in its first run.
scaling: all
	@$(BUILD)/train --devices >/dev/null || { echo "make scaling times training steps on CUDA GPUs: $$($(BUILD)/train --devices)"; exit 1; }
	BUILD=$(BUILD) bash bench/scaling.sh

data: $(BUILD)/mkdata
	@if [ -d $(DATA)/train ]; then echo "$(DATA) exists (remove it to regenerate)"; \
	else $(BUILD)/mkdata --out $(DATA); fi

# Loader throughput on ImageNet-like JPEGs (500x375, ~110 KB), generated once.
bench-loader: $(BUILD)/mkdata $(BUILD)/loaderbench
	test -d $(BUILD)/inet-bench || $(BUILD)/mkdata --out $(BUILD)/inet-bench --train 500 --val 0 --width 500 --height 375
	$(BUILD)/loaderbench --data $(BUILD)/inet-bench
	@if $(BUILD)/loaderbench --data $(BUILD)/inet-bench --decode-only --batch 256 >/dev/null 2>&1; then \
	    $(BUILD)/loaderbench --data $(BUILD)/inet-bench --decode gpu --workers 4 --batch 256 --epochs 3 && \
	    $(BUILD)/loaderbench --data $(BUILD)/inet-bench --decode-only --batch 256; \
	else echo "bench-loader: no GPU decode rows: $$($(BUILD)/loaderbench --data $(BUILD)/inet-bench --decode-only 2>&1 >/dev/null | tail -1)"; fi

# Fuzz targets for every parser of untrusted input (tests/fuzz/fuzz_*.c: config, .npy,
# checkpoint, image, dataset tree, safetensors), built with clang's libFuzzer + ASan + UBSan into
# build-fuzz/fuzz/ (or BUILD when given); `make fuzz-run` runs each for FUZZ_SECONDS from its
# seed corpus (tests/fuzz/corpus/NAME, new inputs go to build-fuzz/corpus/NAME) and stops at
# the first crash (saved in build-fuzz/).
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD := $(if $(filter command line,$(origin BUILD)),$(BUILD),build-fuzz)
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))

fuzz:
	$(MAKE) SAN=fuzz CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz/%)

fuzz-run: fuzz
	@for t in $(FUZZ_TARGETS); do \
	  name=$${t#fuzz_}; mkdir -p $(FUZZ_BUILD)/corpus/$$name; \
	  echo "== $$t: $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/$$t- $(FUZZ_BUILD)/corpus/$$name tests/fuzz/corpus/$$name > $(FUZZ_BUILD)/$$t.log 2>&1; \
	  rc=$$?; grep -E "^(Done|stat::number_of_executed_units)|ERROR|runtime error|Test unit written" $(FUZZ_BUILD)/$$t.log; \
	  if [ $$rc != 0 ]; then tail -40 $(FUZZ_BUILD)/$$t.log; exit 1; fi; \
	done

$(BUILD)/fuzz/%: tests/fuzz/%.c $(BUILD)/libdeftc.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/libdeftc.a $(IMG_STATIC) $(LDLIBS)

clean:
	rm -rf $(BUILD)

HELP_MORE := \n%22s
HELP_run = the main job: all-deformable ResNet-18 (deft) on the sample dataset, on the GPU ($(RUN_CONFIG))$(HELP_MORE)without a GPU: make run RUN_CONFIG=configs/sample_cpu.cfg; RUN_ARGS="key=value ..." overrides keys
HELP_test = the CPU test suite and the Python side (what CI runs; SAN=1: under ASan + UBSan, into build-san/)
HELP_all = (or plain make) library, programs and tests into $(BUILD)/ (now CUDA=$(CUDA), CUDA_ARCH=$(CUDA_ARCH))$(HELP_MORE)make CUDA=0 builds for the CPU only
HELP_lib = only the library, $(BUILD)/libdeftc.a and $(BUILD)/libdeftc.so
HELP_torch-op = the compiled PyTorch operator $(BUILD)/deftc_torch_op.so for python/deftc_torch.py (TORCH_PYTHON=$(TORCH_PYTHON): a Python with torch)
HELP_test-gpu = the GPU parity suite (needs a visible CUDA GPU)
HELP_data = the sample dataset into $(DATA)/ (build/mkdata --help)
HELP_lab = the kernel labs (build/deform_lab, build/conv_lab, build/depthwise_lab, build/bn_lab, build/sm90_gemm_lab: variants validated, then timed; GPU)
HELP_bench-loader = loader images/s on ImageNet-like JPEGs: the CPU workers, and with a GPU the nvJPEG decode
HELP_reproduce = plain / unfused / deft training-time table, ablation and precisions, CSV + chart in runs/ (GPU; MODEL=resnet50: another model)
HELP_dw-chart = the depthwise chart (time vs dilation per kernel/channels panel) from the committed logs: docs/depthwise_dilation.png
HELP_scaling = data-parallel images/s on 1 GPU and on GPUS="2 4 8" GPUs (default 2), plain and deft (GPUs; bench/scaling.sh)
HELP_fuzz = build the libFuzzer targets (config, .npy, checkpoint, image, dataset tree, safetensors) into build-fuzz/fuzz/ (clang)
HELP_fuzz-run = run each libFuzzer target for FUZZ_SECONDS=$(FUZZ_SECONDS) (what CI runs)
HELP_clean = remove $(BUILD)/ (BUILD=build-san etc. for the others)
HELP_help = this list
$(foreach t,$(PHONY),$(if $(value HELP_$(t)),,$(error make help has no line for target '$(t)': add HELP_$(t) to the Makefile)))

help:
	@$(foreach t,$(PHONY),printf '  make %-14s $(HELP_$(t))\n' '$(t)';)
	@echo "Build variables (CUDA, CUDA_ARCH, JPEG, PNG, NCCL, SAN, WERROR, DEBUG, BUILD): the top of the Makefile."

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
