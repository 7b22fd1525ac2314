#!/usr/bin/env bash
# The register-blocked depthwise kernels (ops/conv/depthwise_rb.cuh) emulated on the CPU, no GPU
# needed: each CUDA thread of a block a std::thread (std::barrier for __syncthreads), shared
# memory NaN-filled, the kernels' index arithmetic and summation order exactly as written, then
# every output checked against the CPU twins (ops/conv/depthwise_cpu.c) with the lab's bounds -
# fwd and dgrad come out bit for bit, wgrad within 2e-4 of the sum of |products|. Shapes: 1-D
# kernels 1/4/5/16/64 at dilations 1-16, 2-D 3x3 / 7x7 at strides 1 and 2 with padding and
# dilation, channels 2-144, R = 8 and 4, fp32 and bf16. A check of the indexing, not of the
# GPU: the lab (build/depthwise_lab) is that.
#   bash bench/lab/depthwise_rb_emu/run.sh [BUILD]   (BUILD: a CPU build's folder, default build-cpu;
#                                                      its libdeftc.a gives the twins)
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=${1:-build-cpu}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# the kernels as host code: shared arrays from the emulated block, launches through emu_launch,
# the CUDA headers swapped for emu_*.h (bf16, the launch, dt_ld / dt_st)
sed -E -e 's/extern __shared__ float (\w+)\[\];/float *\1 = g_smem;/' \
    -e 's/(k_rb_\w+(<[^<>]*>)?)<<<([^>]*)>>>\(/emu_launch(\3, \1, /g' \
    -e 's/static __global__/static/' -e 's/__launch_bounds__\([^)]*\)//' \
    -e 's|#include <cuda_bf16.h>|#include "emu_bf16.h"|' -e 's|#include "core/dt_cuda.h"|#include "emu_cuda.h"|' \
    -e 's|#include "core/dt_dtype.cuh"|#include "emu_dtype.cuh"|' \
    ops/conv/depthwise_rb.cuh > "$T/depthwise_rb_emu.cuh"
g++ -std=c++20 -O1 -I"$T" -Ibench/lab/depthwise_rb_emu -I. bench/lab/depthwise_rb_emu/emu.cpp "$B/libdeftc.a" -lpthread -lm -o "$T/emu"
"$T/emu" > "$T/out"; rc=$?
grep -v '^R[48] ok' "$T/out" || true # failures and the count line
exit $rc
