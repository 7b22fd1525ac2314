#!/usr/bin/env bash
# One batched device call (docs/PERF.md says how the numbers there were made): GPU tests,
# benchmarks beside the PyTorch yardstick, the reproduction and the main job. Run from the
# repository root on the GPU machine:
#   bash bench/gpu_run.sh [tests] [api] [conv] [deform] [deform2] [resnet] [resnet_mp] [repro] [run] [seeds]
# Logs go to $OUT (default /tmp/deftc-out) and are packed into $OUT/all.tgz. Uses the
# binaries in build/ when they run there, else rebuilds with the local nvcc.
set -uo pipefail
OUT=${OUT:-/tmp/deftc-out}
W=$OUT/work
mkdir -p "$W"
YARD=${YARD:-.yardstick/torch_reference.py}
[ -f "$YARD" ] || YARD=../shared/bench/torch_reference.py
STEPS="${*:-tests api conv deform resnet repro run}"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
T() { timeout "$@"; }

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv | tee "$OUT/summary.txt"
git log --oneline -1 2>/dev/null | tee -a "$OUT/summary.txt"
if ! build/test --list >/dev/null 2>&1; then
    log "prebuilt binaries do not run here; rebuilding with $(command -v nvcc)"
    make -j"$(nproc)" STB_INCLUDE="$PWD/.stb" >"$W/build.log" 2>&1 || { tail -30 "$W/build.log"; exit 1; }
fi

for s in $STEPS; do
    case $s in
    tests)
        log "make test-gpu (build/test --gpu)"
        T 400 build/test --gpu ${TESTS:-} 2>&1 | tee "$W/test_gpu.log" | grep -Ev '^ok ' | tail -40
        tail -1 "$W/test_gpu.log" >>"$OUT/summary.txt" ;;
    api)
        log "C API vs torchvision (ctypes)"
        T 300 python3 tests/api/test_deform_api.py build/libdeftc.so > "$W/api.txt" 2>&1
        tail -1 "$W/api.txt" | tee -a "$OUT/summary.txt" ;;
    conv)
        [ -f "$W/torch_layers.txt" ] || T 200 python3 "$YARD" layers --batch 64 > "$W/torch_layers.txt" 2>&1
        log "bench conv"
        T 200 build/bench --what conv --torch "$W/torch_layers.txt" ${BUDGETS:+--budgets $BUDGETS} --csv "$W/bench_conv.csv" 2>&1 | tee "$W/bench_conv.txt" | tail -12 ;;
    deform)
        [ -f "$W/torch_layers.txt" ] || T 200 python3 "$YARD" layers --batch 64 > "$W/torch_layers.txt" 2>&1
        cat "$W/torch_layers.txt"
        log "bench deform"
        M=${MODES:-unfused,deft,deft:dx=atomic,deft:fuse=1,deft:stage=1,deft:fuse=1:stage=1,deft:det=1,unfused:det=1}
        T 400 build/bench --what deform --torch "$W/torch_layers.txt" --modes "$M" --csv "$W/bench_deform.csv" 2>&1 | tee "$W/bench_deform.txt" | tail -45 ;;
    deform2)
        T 200 python3 "$YARD" layers --batch 64 --mask > "$W/torch_layers_mask.txt" 2>&1
        log "bench deform --mask"
        T 300 build/bench --what deform --mask --torch "$W/torch_layers_mask.txt" --modes ${MODES2:-unfused,deft} --csv "$W/bench_deform_mask.csv" 2>&1 | tee "$W/bench_deform_mask.txt" | tail -20 ;;
    resnet)
        log "yardstick resnet18"
        for b in ${RBATCHES:-64 256}; do T 300 python3 "$YARD" resnet18 --batch $b 2>&1 | tee "$W/torch_resnet18_b$b.txt"; done ;;
    resnet_mp)
        log "yardstick resnet18 in mixed precision (--amp --channels-last, --tf32 --channels-last)"
        for b in ${RBATCHES:-64 256}; do
            T 300 python3 "$YARD" resnet18 --batch $b --amp --channels-last 2>&1 | tee "$W/torch_resnet18_amp_b$b.txt"
            T 300 python3 "$YARD" resnet18 --batch $b --tf32 --channels-last 2>&1 | tee "$W/torch_resnet18_tf32_b$b.txt"
        done ;;
    repro)
        log "make reproduce (bench/reproduce.sh)"
        OUTDIR=$W/runs STEPS=${RSTEPS:-30} T 500 bash bench/reproduce.sh 2>&1 | tee "$W/reproduce.txt" | tail -30 ;;
    run)
        log "make run (sample dataset, plain and all-deformable deft)"
        [ -d data_sample/train ] || build/mkdata --out data_sample --quiet
        mkdir -p runs
        for cfg in sample_deft sample_plain; do
            T 300 build/train configs/$cfg.cfg progress=0 log=$W/$cfg checkpoint=$W/$cfg.ckpt ${RUNARGS:-} > "$W/$cfg.out" 2>&1
            grep -E "^step .*/|epoch .* done|summary|final|error" "$W/$cfg.out" | tail -14
        done
        rm -f "$W"/*.ckpt ;;
    seeds)
        log "make run by precision and seed (the all-deformable sample job)"
        [ -d data_sample/train ] || build/mkdata --out data_sample --quiet
        for p in ${SEED_PRECISIONS:-fp32 bf16}; do
            for s in ${SEEDS:-0 1 2}; do
                T 300 build/train configs/sample_deft.cfg progress=0 precision=$p seed=$s log=$W/seed_${p}_$s > "$W/seed_${p}_$s.out" 2>&1
                echo "precision $p seed $s: $(grep -E '^final|summary' "$W/seed_${p}_$s.out" | tr '\n' ' ' | cut -c1-260)" | tee -a "$W/seeds.txt"
            done
        done ;;
    esac
done
tar czf "$OUT/all.tgz" -C "$W" . && ls -la "$OUT"
