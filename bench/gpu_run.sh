#!/usr/bin/env bash
# One batched device call (see docs/PERF.md): GPU tests, benchmarks and the PyTorch yardstick,
# logs under $OUT. Usage on the GPU machine, from the repository root:
#   bash bench/gpu_run.sh [tests] [conv] [deform] [train] ...   (default: all)
# It uses the binaries in build/ when they run there, else rebuilds with the local nvcc.
set -uo pipefail
OUT=${OUT:-/tmp/deftc-out}
mkdir -p "$OUT"
YARD=${YARD:-.yardstick/torch_reference.py}
[ -f "$YARD" ] || YARD=../shared/bench/torch_reference.py
STEPS="${*:-tests conv deform train}"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv | tee "$OUT/summary.txt"
if ! build/test --list >/dev/null 2>&1; then
    log "prebuilt binaries do not run here; rebuilding with $(command -v nvcc)"
    make -j"$(nproc)" STB_INCLUDE="$PWD/.stb" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi

for s in $STEPS; do
    case $s in
    tests)
        log "make test-gpu (build/test --gpu)"
        timeout 400 build/test --gpu ${TESTS:-} 2>&1 | tee "$OUT/test_gpu.log" | grep -Ev '^ok ' | tail -60
        tail -1 "$OUT/test_gpu.log" >>"$OUT/summary.txt"
        ;;
    conv)
        log "yardstick layers"
        python3 "$YARD" layers --batch 64 2>&1 | tee "$OUT/torch_layers.txt"
        log "bench conv"
        build/bench --what conv --torch "$OUT/torch_layers.txt" --budgets ${BUDGETS:-64} --csv "$OUT/bench_conv.csv" 2>&1 | tee "$OUT/bench_conv.txt"
        ;;
    api)
        log "C API vs torchvision (ctypes)"
        timeout 300 python3 tests/api/test_deform_api.py build/libdeftc.so 2>&1 | tee "$OUT/api.txt" | tail -20
        tail -1 "$OUT/api.txt" >>"$OUT/summary.txt"
        ;;
    deform)
        [ -f "$OUT/torch_layers.txt" ] || python3 "$YARD" layers --batch 64 >"$OUT/torch_layers.txt" 2>&1
        log "bench deform"
        M=${MODES:-unfused,deft,deft:fuse=0,deft:stage=0,deft:swizzle=0,deft:halo=1,deft:halo=3,deft:det=1,unfused:det=1}
        timeout 500 build/bench --what deform --torch "$OUT/torch_layers.txt" --modes "$M" --csv "$OUT/bench_deform.csv" 2>&1 | tee "$OUT/bench_deform.txt"
        ;;
    deform2)
        log "yardstick layers --mask"
        python3 "$YARD" layers --batch 64 --mask 2>&1 | tee "$OUT/torch_layers_mask.txt"
        log "bench deform --mask"
        timeout 300 build/bench --what deform --mask --torch "$OUT/torch_layers_mask.txt" --modes ${MODES2:-unfused,deft} --csv "$OUT/bench_deform_mask.csv" 2>&1 | tee "$OUT/bench_deform_mask.txt"
        ;;
    train)
        log "train (not yet)"
        ;;
    esac
done
