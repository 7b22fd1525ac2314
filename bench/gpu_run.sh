#!/usr/bin/env bash
# One batched device call (docs/PERF.md says how the numbers there were made): GPU tests,
# benchmarks beside the PyTorch yardstick, the reproduction and the main job. Run from the
# repository root on a machine with the GPU(s):
#   bash bench/gpu_run.sh [tests] [api] [conv] [deform] [deform2] [resnet] [resnet_mp] [repro] [run] [seeds]
#                         [bf16] [graphs] [graph_idle] [conv_lab] [conv_algo] [loader_gpu] [loader_decoders] [yard_amp] [breakdown] [resnet50] [models] [dropin]
#                         [dropin_paths] [graph_pairs] [graph_bisect] [sampler] [run_wall] [depthwise] [dw_lab] [dw_rb_bench]
#                         [scaling] [scaling_sync] [scaling_bf16] [scaling_buckets] [dp_equiv] [dp_equiv_syn] [dp_run]
#                         [dp_multiproc] [dp_fail] [dp_resume]   (the last ten: 2 GPUs or more; GPUS="2 4 8" the
#                         counts the scaling steps time, DP_N the count of dp_equiv / dp_fail / dp_resume, default 2)
# Logs go to $OUT (default /tmp/deftc-out) and are packed into $OUT/all.tgz. Uses the
# binaries in build/ when they run there, else rebuilds with the local nvcc.
set -uo pipefail
# NCCL's NVLink multicast (NVLS) stays off, also when this script is started with a clean
# environment
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/deftc-out}
W=$OUT/work
mkdir -p "$W"
YARD=${YARD:-bench/torch_yardstick.py} # PyTorch's side of every comparison
STEPS="${*:-tests api conv deform resnet repro run}"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
T() { timeout "$@"; }
# step NAME LABEL KEY=VALUE...: the synthetic 224x224 ResNet-18 step with the keys; one summary line
# (median ms, peak GiB, the first error / graph message of the run)
step() {
    local name=$1 label=$2
    shift 2
    T 200 build/train configs/synthetic_timing.cfg overwrite=1 steps=${BSTEPS:-60} progress=0 log=$W/$name "$@" > "$W/$name.out" 2>&1
    local s=$W/${name}_summary.txt
    echo "$label: $(awk '/^median_step_ms/{print $2}' $s) ms, peak $(awk '/^peak_mem_gib/{print $2}' $s) GiB $(grep -m1 -E 'CUDA graph:|cannot be captured|error' "$W/$name.out" | cut -c1-160)" | tee -a "$OUT/summary.txt"
}
# sample_job NAME LABEL CFG KEY=VALUE...: make run's job (configs/CFG.cfg); its step median and final accuracy
sample_job() {
    local name=$1 label=$2 cfg=$3
    shift 3
    [ -d data_sample/train ] || build/mkdata --out data_sample --quiet
    T 300 build/train configs/$cfg.cfg overwrite=1 progress=0 log=$W/$name checkpoint=$W/$name.ckpt "$@" > "$W/$name.out" 2>&1
    echo "$label: $(grep -E '^summary' "$W/$name.out" | grep -oE 'step median [0-9.]+ ms') $(grep -E '^final' "$W/$name.out")" | tee -a "$OUT/summary.txt"
    rm -f "$W/$name.ckpt"
}

# resumed_vs_full FULL_STEPS.csv RESUMED_STEPS.csv: the resumed run's losses against the same
# steps of the uninterrupted run (column 1 step, column 3 loss)
resumed_vs_full() {
    awk -F, 'FNR == 1 { next } NR == FNR { full[$1] = $3; next }
        { d = ($3 - full[$1]) / full[$1]; if (d < 0) d = -d; if (d > w) w = d; if (!n) f = d; n++ }
        END { printf "%d steps against the 1-GPU run: first %.3g, largest %.3g relative", n, f, w }' "$1" "$2"
}

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
    dropin)
        # The PyTorch side on the GPU (issues 23 and 25): the drop-in's GPU suite, the registered
        # operator under torchvision's case families (CUDA and CPU-vs-CUDA gradients, f16
        # autocast, compile, export, opcheck), deftc against torchvision with the same weights
        # (CUDA cases), then the swapped all-deformable ResNet-18 step in fp32 and bf16 + CL.
        log "PyTorch drop-in and torchvision weights on the GPU"
        for t in test_deftc_torch test_deftc_torch_ops; do
            T 600 python3 tests/api/$t.py build/libdeftc.so > "$W/$t.txt" 2>&1
            echo "$t: $(tail -1 "$W/$t.txt")" | tee -a "$OUT/summary.txt"; grep -E '^FAIL' "$W/$t.txt" | head -20
        done
        T 600 python3 tests/api/test_torchvision_weights.py build > "$W/torchvision_weights.txt" 2>&1
        grep -E 'cuda|passed' "$W/torchvision_weights.txt" | tee -a "$OUT/summary.txt"
        for f in "" "--amp --channels-last --graphs"; do
            # shellcheck disable=SC2086
            T 600 python3 bench/torch_deftc.py "$YARD" --batches ${DBATCHES:-64 256} $f > "$W/torch_deftc$(echo "$f" | tr -d ' -').txt" 2>&1
            tail -10 "$W/torch_deftc$(echo "$f" | tr -d ' -').txt" | tee -a "$OUT/summary.txt"
        done ;;
    dropin_paths)
        # The drop-in's two paths on the GPU (issue 36): the compiled operator (make torch-op,
        # against this machine's PyTorch) and ctypes, the same suites on each
        log "PyTorch drop-in: compiled operator and ctypes"
        make torch-op > "$W/torch_op_build.txt" 2>&1 || tail -5 "$W/torch_op_build.txt" | tee -a "$OUT/summary.txt"
        for path in compiled ctypes; do
            for t in test_deftc_torch test_deftc_torch_ops; do
                DEFTC_TORCH_OP=$path T 600 python3 tests/api/$t.py build/libdeftc.so > "$W/${t}_$path.txt" 2>&1
                echo "$t ($path): $(tail -1 "$W/${t}_$path.txt")" | tee -a "$OUT/summary.txt"
                grep -E '^FAIL' "$W/${t}_$path.txt" | head -10
            done
        done ;;
    graph_pairs)
        # The deft bf16 graph test after each test that made it fail in one process (docs/PERF.md
        # section 21), eagerly synchronized (DT_DEBUG_SYNC=1: a race goes away, a stale read stays)
        # and not
        log "gpu_train_graph_deft_bf16_matches_eager_bitwise after the tests that upset it"
        for t in gpu_errors_sgd_failed_step_leaves_params_consistent gpu_deft_more_than_2e31_column_elements; do
            for sync in 0 1; do
                DT_DEBUG_SYNC=$sync T 120 build/test --gpu -v $t gpu_train_graph_deft_bf16_matches_eager_bitwise > "$W/pair_${t}_$sync.txt" 2>&1
                echo "after $t, DT_DEBUG_SYNC=$sync: $(tail -1 "$W/pair_${t}_$sync.txt") $(grep -o 'losses [0-9.]* -> [0-9.]*' "$W/pair_${t}_$sync.txt")" | tee -a "$OUT/summary.txt"
            done
        done ;;
    graph_bisect)
        # What of the earlier tests' leftovers moves the deft bf16 graph test's losses (docs/PERF.md
        # section 21), one line a run: the tests before it, the runner's --seed (the earlier tests'
        # inputs, so the bits they leave, follow it: one failing loss for a seed is a stale read, one
        # that changes between runs of a seed a race) and DT_TEST_POISON (2: freed blocks NaN too).
        # The line has both runs' first and last losses and, on a mismatch, the first step that
        # differs; the runs' whole loss lists are in the files.
        log "gpu_train_graph_deft_bf16_matches_eager_bitwise after each leftover alone"
        G=gpu_train_graph_deft_bf16_matches_eager_bitwise B=gpu_deft_more_than_2e31_column_elements
        E=gpu_errors_sgd_failed_step_leaves_params_consistent
        i=0
        while read -r poison seed before; do
            i=$((i + 1))
            DT_TEST_PROBE=1 DT_TEST_POISON=$poison T 150 build/test --gpu -v --seed "$seed" $before $G > "$W/bisect_$i.txt" 2>&1
            echo "$i. after ${before:-nothing}, seed $seed, poison $poison: $(tail -1 "$W/bisect_$i.txt") $(grep -o 'losses .*' "$W/bisect_$i.txt") $(grep -o 'differ from the eager run.s from step .*' "$W/bisect_$i.txt")" | tee -a "$OUT/summary.txt"
        done <<LIST
1 1
1 1 $B
1 1 $B
1 2 $B
1 1 $B gpu_probe_empties_the_cache
2 1 $B
1 1 $E
2 1 $E
1 1 gpu_probe_leaves_finite_cached_blocks
1 2 gpu_probe_leaves_finite_cached_blocks
1 1 gpu_probe_leaves_nan_cached_blocks
1 1 gpu_probe_sets_the_col_budget_and_reseeds
LIST
        ;;
    depthwise)
        # The depthwise family (docs/conv.md "Depthwise", issue 38): its GPU tests, then the seed's
        # 1-D grid and MobileNetV2's shapes beside PyTorch's cuDNN, fp32 and bf16
        log "depthwise: GPU tests, build/bench --what depthwise beside cuDNN"
        T 200 build/test --gpu 'gpu_depthwise*' 'gpu_conv2d_grouped*' 'gpu_cases_conv_groups*' 2>&1 | tee "$W/test_dw.log" | grep -Ev '^ok ' | tail -12
        T 300 python3 bench/torch_depthwise.py --batch 256 > "$W/torch_dw.txt" 2>&1
        for prec in fp32 bf16; do
            T 300 build/bench --what depthwise --precision $prec --batch 256 --torch "$W/torch_dw.txt" --csv "$W/dw_$prec.csv" > "$W/dw_$prec.txt" 2>&1
            echo "depthwise $prec rc $?" | tee -a "$OUT/summary.txt"; tail -40 "$W/dw_$prec.txt" | tee -a "$OUT/summary.txt"
        done ;;
    dw_lab)
        # The depthwise lab (bench/lab/depthwise_lab.cu, issue 38): the shipping kernels beside the
        # register-blocked variant (ops/conv/depthwise_rb.cuh), each validated against the CPU twin
        # (wgrad run twice, bitwise) then timed, bf16 and fp32 NHWC, the 1-D grid and MobileNetV2's
        # 3x3s at batch 256; beside cuDNN from the depthwise step's torch_dw.txt (made here if missing)
        log "dw_lab: build/depthwise_lab (ship vs rb, every pass, bf16 + fp32)"
        [ -x build/depthwise_lab ] || make -j"$(nproc)" STB_INCLUDE="$PWD/.stb" build/depthwise_lab > "$W/dw_lab_build.log" 2>&1 || tail -20 "$W/dw_lab_build.log"
        [ -s "$W/torch_dw.txt" ] || T 300 python3 bench/torch_depthwise.py --batch 256 > "$W/torch_dw.txt" 2>&1
        T 500 build/depthwise_lab --reps 20 --batch2d 256 --torch "$W/torch_dw.txt" > "$W/dw_lab.txt" 2>&1
        echo "dw_lab rc $?" | tee -a "$OUT/summary.txt"
        grep -E "^(FAIL|depthwise lab|#)" "$W/dw_lab.txt" | tail -20 | tee -a "$OUT/summary.txt"
        grep -E "^(## |shape|k (1|16|64) C 512 d (1|128) |112 C 32 s1 |14 C 576 s2 )" "$W/dw_lab.txt" | head -80 | tee -a "$OUT/summary.txt"
        # the library's entry points on the register-blocked kernels (DT_DW_KERNEL=1): the GPU
        # tests' bitwise parity with the twins and run to run
        DT_DW_KERNEL=1 T 200 build/test --gpu 'gpu_depthwise*' 'gpu_conv2d_grouped*' 'gpu_cases_conv_groups*' 2>&1 | tee "$W/test_dw_rb.log" | grep -Ev '^ok ' | tail -12 ;;
    dw_rb_bench)
        # build/bench --what depthwise (dt_conv2d_grouped, fwd and fwd + bwd beside cuDNN) on the
        # register-blocked kernels (DT_DW_KERNEL=1); the depthwise step's torch_dw.txt if there
        log "dw_rb_bench: build/bench --what depthwise with DT_DW_KERNEL=1"
        for prec in bf16 fp32; do
            DT_DW_KERNEL=1 T 300 build/bench --what depthwise --precision $prec --batch 256 --torch "$W/torch_dw.txt" --csv "$W/dw_rb_$prec.csv" > "$W/dw_rb_$prec.txt" 2>&1
            echo "dw_rb_bench $prec rc $?" | tee -a "$OUT/summary.txt"; tail -40 "$W/dw_rb_$prec.txt" | tee -a "$OUT/summary.txt"
        done ;;
    sampler)
        # The deformable forward's sampling as the Hopper engine's A producer, a lab variant
        # (docs/deft.md, "The sampling inside the Hopper engine: a lab record"; issue 35): the lab
        # validates it bit for bit and times it per shape
        log "deform_lab --what sampler"
        T 150 build/deform_lab --what sampler --reps 20 > "$W/lab_sampler.txt" 2>&1
        echo "lab rc $?" | tee -a "$OUT/summary.txt"
        tail -24 "$W/lab_sampler.txt" | tee -a "$OUT/summary.txt" ;;
    run_wall)
        # make run's wall time against its steps (issue 37: <= 1.3x steps x median + capture), both
        # precisions, and where each epoch's time went
        log "make run's job: wall time vs steps, bf16 and fp32"
        [ -d data_sample/train ] || build/mkdata --out data_sample --quiet
        for prec in bf16 fp32; do
            t0=$(date +%s.%N)
            T 300 build/train configs/sample_deft.cfg precision=$prec overwrite=1 progress=0 log=$W/run_$prec checkpoint=$W/run_$prec.ckpt > "$W/run_$prec.out" 2>&1
            t1=$(date +%s.%N)
            awk -v t0="$t0" -v t1="$t1" -v p=$prec 'BEGIN { w = t1 - t0 } /^summary/ { n = $2; for (i = 1; i <= NF; i++) if ($i == "median") m = $(i + 1) }
                END { printf "%s: %.2f s wall, %d steps x %.2f ms = %.2f s: %.2fx\n", p, w, n, m, n * m / 1e3, w / (n * m / 1e3) }' "$W/run_$prec.out" | tee -a "$OUT/summary.txt"
            grep -E "^final|^checkpoints:" "$W/run_$prec.out" | tee -a "$OUT/summary.txt"
            grep -m2 "wall time" "$W/run_$prec.out" | tee -a "$OUT/summary.txt"
        done
        rm -f "$W"/*.ckpt ;;
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
            T 300 build/train configs/$cfg.cfg overwrite=1 progress=0 log=$W/$cfg checkpoint=$W/$cfg.ckpt ${RUNARGS:-} > "$W/$cfg.out" 2>&1
            grep -E "^step .*/|epoch .* done|summary|final|error" "$W/$cfg.out" | tail -14
        done
        rm -f "$W"/*.ckpt ;;
    bf16)
        # The tensor's dtype and layout (docs/PERF.md section 12): ResNet-18 train step, synthetic
        # 224x224, plain and all-deformable (deft), fp32 NCHW / bf16 NHWC (and fp32 NHWC), batch 64/256.
        log "resnet18 step: precision x layout x batch (median ms, peak GiB)"
        for b in ${RBATCHES:-64 256}; do
            for m in plain deft; do
                d=$([ $m = plain ] && echo none || echo all)
                for pl in fp32:auto bf16:auto ${EXTRA_PL:-}; do
                    p=${pl%%:*}; l=${pl##*:}
                    BSTEPS=${BSTEPS:-40} step st_${m}_${p}_${l}_b$b "$m $p $l batch $b" deform=$d batch=$b precision=$p layout=$l
                done
            done
        done ;;
    graphs)
        # The step as one CUDA graph (issue 21): the same build, graphs=0 (eager) vs graphs=1, for
        # plain and all-deformable ResNet-18 in bf16, synthetic 224x224 at batch 64 and 256, and
        # the make run job (64x64 images through the loader, batch 64, 2000 steps).
        log "resnet18 step, eager vs one CUDA graph (median ms)"
        for b in ${GBATCHES:-64 256}; do
            for m in plain deft; do
                d=$([ $m = plain ] && echo none || echo all)
                for g in 0 1; do
                    step gr_${m}_b${b}_g$g "$m ${GPREC:-bf16} 224px batch $b graphs=$g" deform=$d batch=$b precision=${GPREC:-bf16} graphs=$g
                done
            done
        done
        for cfg in $([ "${GRUN:-1}" = 1 ] && echo sample_plain sample_deft); do
            for g in 0 1; do sample_job grun_${cfg}_g$g "make run $cfg graphs=$g" $cfg graphs=$g; done
        done ;;
    conv_lab)
        # The implicit-GEMM conv lab (issue 20, docs/conv.md): every variant of fprop, dgrad and
        # wgrad validated against the double CPU reference and the library's path, then timed.
        log "conv lab (build/conv_lab ${LAB_ARGS:-})"
        # shellcheck disable=SC2086
        T 500 build/conv_lab --csv "$W/conv_lab.csv" ${LAB_ARGS:-} > "$W/conv_lab.txt" 2>&1
        echo "conv_lab rc=$?: $(tail -1 "$W/conv_lab.txt")" | tee -a "$OUT/summary.txt"
        sed -n '/^variant /,/^(i)/p' "$W/conv_lab.txt" | tee -a "$OUT/summary.txt" ;;
    loader_gpu)
        # The loader's GPU decode (issue 24, docs/data.md): ImageNet-like 500x375 q90 JPEGs; the
        # CPU workers (16) against nvJPEG + the GPU augmentation (4 workers read and probe), the
        # decoder alone beside torchvision's decode_jpeg(device=cuda) on the same files, and a
        # real-data bf16 training run at batch 256 with each decoder (its data wait).
        INET=$W/inet
        [ -d "$INET" ] || T 300 build/mkdata --out "$INET" --train ${INET_TRAIN:-600} --val 20 --width 500 --height 375 --quiet
        log "loader: CPU workers vs GPU decode (build/loaderbench, train transform at 224)"
        T 200 build/loaderbench --data "$INET" --workers 16 --batch 256 --epochs 2 > "$W/lb_cpu.txt" 2>&1
        T 200 build/loaderbench --data "$INET" --decode gpu --workers 4 --batch 256 --epochs 3 > "$W/lb_gpu.txt" 2>&1
        T 200 build/loaderbench --data "$INET" --decode-only --batch 256 > "$W/lb_decode_only.txt" 2>&1
        T 200 python3 bench/torch_decode.py "$INET" --batch 256 > "$W/torch_decode.txt" 2>&1
        for f in lb_cpu lb_gpu lb_decode_only torch_decode; do echo "-- $f"; grep -vE '^ +$' "$W/$f.txt" | tail -6; done | tee -a "$OUT/summary.txt"
        for d in cpu gpu; do
            T 250 build/train configs/synthetic_timing.cfg overwrite=1 synthetic=0 data="$INET" batch=256 precision=bf16 \
                decode=$d steps=${LSTEPS:-60} max_val_batches=1 progress=0 log=$W/lt_$d > "$W/lt_$d.out" 2>&1
            echo "real-data bf16 step, batch 256, decode=$d: $(grep -E '^summary' "$W/lt_$d.out" | cut -c1-220) $(grep -m1 'decode' "$W/lt_$d.out" | cut -c1-160)" | tee -a "$OUT/summary.txt"
            grep -m1 '^loader: epoch 1' "$W/lt_$d.out" | tee -a "$OUT/summary.txt" # the decode thread's time split
        done ;;
    loader_decoders)
        # Several GPU decoders (issue 37 item 1, docs/data.md "Several GPU decoders"): on
        # loader_gpu's ImageNet-like files, the decoders alone with gpu_decoders 1, 2, 3 (threads,
        # each its own nvJPEG decoder and stream), alone and beside a stream held by 5 ms host
        # functions (--beside-ms: what made nvJPEG's calls slow beside a step); then the real-data
        # bf16 batch-256 run with decode=gpu and gpu_decoders 1 and 2 (its data wait).
        INET=$W/inet
        [ -d "$INET" ] || T 300 build/mkdata --out "$INET" --train ${INET_TRAIN:-600} --val 20 --width 500 --height 375 --quiet
        log "loader: gpu_decoders 1, 2, 3 (build/loaderbench --decode-only, batch 256; alone and --beside-ms 5)"
        for n in 1 2 3; do
            for b in 0 5; do
                f=lb_dec${n}_beside$b
                T 200 build/loaderbench --data "$INET" --decode-only --batch 256 --gpu-decoders $n \
                    $([ $b = 0 ] || echo --beside-ms $b) > "$W/$f.txt" 2>&1
                echo "gpu_decoders $n, beside $b ms (rc $?): $(grep -E '^decode-only: [0-9]+ images' "$W/$f.txt" | cut -c1-260)" | tee -a "$OUT/summary.txt"
            done
        done
        for n in 1 2; do
            T 250 build/train configs/synthetic_timing.cfg overwrite=1 synthetic=0 data="$INET" batch=256 precision=bf16 \
                decode=gpu gpu_decoders=$n steps=${LSTEPS:-60} max_val_batches=1 progress=0 log=$W/ltd_$n > "$W/ltd_$n.out" 2>&1
            echo "real-data bf16 step, batch 256, decode=gpu gpu_decoders=$n: $(grep -E '^summary' "$W/ltd_$n.out" | cut -c1-220) $(grep -m1 'decode' "$W/ltd_$n.out" | cut -c1-160)" | tee -a "$OUT/summary.txt"
            grep -m1 '^loader: epoch 1' "$W/ltd_$n.out" | tee -a "$OUT/summary.txt" # the decode threads' time split
        done ;;
    conv_algo)
        # The implicit-GEMM conv in the step (issue 20): the same build with conv_algo=gemm (im2col +
        # cuBLAS) and conv_algo=auto (the plan: docs/conv.md), bf16 ResNet-18 plain and
        # all-deformable at batch 64 and 256 (graphs=1, the default), the conv layers beside
        # cuDNN with the plan in place, and the make run job's accuracy and step with each.
        log "resnet18 bf16 step, conv_algo=gemm vs auto (median ms, peak GiB)"
        for b in ${CBATCHES:-64 256}; do
            for m in plain deft; do
                d=$([ $m = plain ] && echo none || echo all)
                for a in gemm auto; do
                    step ca_${m}_b${b}_$a "$m bf16 224px batch $b conv_algo=$a" deform=$d batch=$b precision=bf16 conv_algo=$a
                done
            done
        done
        [ -f "$W/torch_layers_amp.txt" ] || T 200 python3 "$YARD" layers --batch 64 --amp --channels-last > "$W/torch_layers_amp.txt" 2>&1
        for a in gemm auto; do
            T 200 build/bench --what conv --conv-algo $a --precision bf16 --torch "$W/torch_layers_amp.txt" > "$W/bench_conv_$a.txt" 2>&1
            echo "bench conv bf16 conv_algo=$a:" | tee -a "$OUT/summary.txt"; tail -12 "$W/bench_conv_$a.txt" | tee -a "$OUT/summary.txt"
        done
        for cfg in $([ "${GRUN:-1}" = 1 ] && echo sample_plain sample_deft); do
            for a in gemm auto; do
                sample_job carun_${cfg}_$a "make run $cfg bf16 conv_algo=$a" $cfg precision=bf16 conv_algo=$a
            done
        done ;;
    graph_idle)
        # GPU time inside a captured step: ncu's kernel durations of one replayed step (steps 5 and
        # 6 differ by one replay; warm caches, --cache-control none) against the step's median.
        log "GPU busy time of one replayed bf16 step, batch 64 (ncu, warm caches) vs its period"
        for m in ${GI_MODELS:-plain deft}; do
            d=$([ $m = plain ] && echo none || echo all)
            for s in 5 6; do
                T 250 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --print-units base \
                    build/train configs/synthetic_timing.cfg overwrite=1 deform=$d precision=bf16 batch=64 steps=$s timing_warmup=0 \
                    log_every=1 progress=0 > "$W/ncug_${m}_$s.csv" 2> "$W/ncug_${m}_$s.err"
            done
            python3 bench/kernel_breakdown.py "$W/ncug_${m}_5.csv" "$W/ncug_${m}_6.csv" > "$W/graph_busy_$m.txt" 2>&1
            T 200 build/train configs/synthetic_timing.cfg overwrite=1 deform=$d precision=bf16 batch=64 steps=60 progress=0 \
                log=$W/gi_$m > "$W/gi_$m.out" 2>&1
            echo "$m: $(head -1 "$W/graph_busy_$m.txt"); graph step median $(awk '/^median_step_ms/{print $2}' "$W/gi_${m}_summary.txt") ms" | tee -a "$OUT/summary.txt"
        done ;;
    yard_amp)
        log "yardstick resnet18 --amp --channels-last (eager, and the whole step as one CUDA graph)"
        for b in ${RBATCHES:-64 256}; do
            T 300 python3 "$YARD" resnet18 --batch $b --amp --channels-last 2>&1 | tee "$W/torch_amp_b$b.txt" | tail -3
            T 300 python3 "$YARD" resnet18 --batch $b --amp --channels-last --graphs 2>&1 | tee "$W/torch_amp_graphs_b$b.txt" | tail -3
        done ;;
    breakdown)
        # One step's kernels from two ncu runs that differ by one step (bench/kernel_breakdown.py).
        log "per-kernel breakdown of one bf16 step, batch 64 (ncu)"
        for m in plain deft; do
            d=$([ $m = plain ] && echo none || echo all)
            for s in 2 3; do
                T 250 ncu --clock-control none --csv --metrics gpu__time_duration.sum --print-units base build/train \
                    configs/synthetic_timing.cfg deform=$d precision=${BD_PREC:-bf16} batch=64 steps=$s timing_warmup=0 \
                    log_every=1 progress=0 > "$W/ncu_${m}_$s.csv" 2> "$W/ncu_${m}_$s.err"
            done
            python3 bench/kernel_breakdown.py "$W/ncu_${m}_2.csv" "$W/ncu_${m}_3.csv" > "$W/breakdown_$m.txt" 2>&1
            head -1 "$W/breakdown_$m.txt" | tee -a "$OUT/summary.txt"; sed -n '/by category/,$p' "$W/breakdown_$m.txt" | tee -a "$OUT/summary.txt"
        done ;;
    resnet50)
        # The Bottleneck net (issue 25): deftc's bf16 channels-last ResNet-50 train step, synthetic
        # 224x224, plain and with DCNv2's placement (deform=c3-c5 deform_version=2: the 3x3 conv2 of
        # every block of layer2..layer4, 13 layers), beside PyTorch's bf16 autocast + channels_last
        # step of torchvision's resnet50 (bench/torch_models.py: eager, one CUDA graph, and the same
        # c3-c5 v2 placement on torchvision's deform_conv2d). R50_MODEL=resnet101 times that one.
        net=${R50_MODEL:-resnet50}
        log "$net step in bf16, batch ${R50_BATCHES:-256}: deftc plain and deform=c3-c5 v2, PyTorch amp + channels_last"
        for b in ${R50_BATCHES:-256}; do
            for m in plain c3c5; do
                d=$([ $m = plain ] && echo "deform=none" || echo "deform=c3-c5 deform_version=2")
                # shellcheck disable=SC2086
                T 300 build/train configs/synthetic_timing.cfg overwrite=1 model=$net $d precision=bf16 batch=$b steps=${BSTEPS:-40} \
                    progress=0 log=$W/${net}_${m}_b$b > "$W/${net}_${m}_b$b.out" 2>&1
                s=$W/${net}_${m}_b${b}_summary.txt
                echo "deftc $net $m bf16 batch $b: $(awk '/^median_step_ms/{print $2}' $s) ms, peak $(awk '/^peak_mem_gib/{print $2}' $s) GiB $(grep -m1 error "$W/${net}_${m}_b$b.out")" | tee -a "$OUT/summary.txt"
            done
            for t in "" "--graphs" "--deform c3-c5 --mask"; do
                # shellcheck disable=SC2086
                T 300 python3 bench/torch_models.py --model $net --batch $b --amp --channels-last $t 2>&1 |
                    tee "$W/torch_${net}_amp_b${b}$(echo "$t" | tr -d ' -').txt" | grep -E "ms/step|Error" | tee -a "$OUT/summary.txt"
            done
        done ;;
    models)
        # Issue 38's models: resnext50_32x4d and mobilenet_v2 against torchvision with the same
        # weights on the CPU and the GPU (tests/api/test_torchvision_weights.py: every case, the
        # ResNets' too), then deftc's bf16 channels-last train step at batch 256 beside PyTorch's
        # bf16 autocast + channels_last step, eager and as one CUDA graph (bench/torch_models.py).
        log "torchvision equivalence (cpu and cuda), then resnext50_32x4d and mobilenet_v2 bf16 steps"
        T 500 python3 tests/api/test_torchvision_weights.py build 2>&1 | tee "$W/torchvision_weights.txt" | cut -c1-220
        tail -1 "$W/torchvision_weights.txt" >>"$OUT/summary.txt"
        for net in ${MODELS:-resnext50_32x4d mobilenet_v2}; do
            b=${M_BATCH:-256}
            T 300 build/train configs/synthetic_timing.cfg overwrite=1 model=$net deform=none precision=bf16 batch=$b \
                steps=${BSTEPS:-40} progress=0 log=$W/${net}_b$b > "$W/${net}_b$b.out" 2>&1
            s=$W/${net}_b${b}_summary.txt
            echo "deftc $net bf16 batch $b: $(awk '/^median_step_ms/{print $2}' $s) ms, peak $(awk '/^peak_mem_gib/{print $2}' $s) GiB $(grep -m1 error "$W/${net}_b$b.out")" | tee -a "$OUT/summary.txt"
            for t in "" "--graphs"; do
                # shellcheck disable=SC2086
                T 300 python3 bench/torch_models.py --model $net --batch $b --amp --channels-last $t 2>&1 |
                    tee "$W/torch_${net}_amp_b${b}$(echo "$t" | tr -d ' -').txt" | grep -E "ms/step|Error" | tee -a "$OUT/summary.txt"
            done
        done ;;
    seeds)
        log "make run by precision and seed (the all-deformable sample job)"
        [ -d data_sample/train ] || build/mkdata --out data_sample --quiet
        for p in ${SEED_PRECISIONS:-fp32 bf16}; do
            for s in ${SEEDS:-0 1 2}; do
                T 300 build/train configs/sample_deft.cfg overwrite=1 progress=0 precision=$p seed=$s log=$W/seed_${p}_$s > "$W/seed_${p}_$s.out" 2>&1
                echo "precision $p seed $s: $(grep -E '^final|summary' "$W/seed_${p}_$s.out" | tr '\n' ' ' | cut -c1-260)" | tee -a "$W/seeds.txt"
            done
        done ;;
    scaling)
        log "data-parallel scaling (bench/scaling.sh, 1 vs ${GPUS:-2} GPUs, synthetic 224x224, fp32)"
        OUTDIR=$W/scaling T 580 bash bench/scaling.sh 2>&1 | tee "$W/scaling.txt" | tee -a "$OUT/summary.txt" ;;
    scaling_sync)
        log "data-parallel scaling with sync_bn=1"
        OUTDIR=$W/scaling ARGS="sync_bn=1" T 580 bash bench/scaling.sh 2>&1 | tee "$W/scaling_sync.txt" | tee -a "$OUT/summary.txt" ;;
    scaling_bf16)
        log "data-parallel scaling in bf16"
        OUTDIR=$W/scaling PRECISION=bf16 T 580 bash bench/scaling.sh 2>&1 | tee "$W/scaling_bf16.txt" | tee -a "$OUT/summary.txt" ;;
    scaling_buckets)
        # the gradient bucket size on the largest GPU count (batch 64 per GPU: the step with the
        # least compute to hide the all-reduce behind), fp32 and bf16
        N=${GPUS:-2}; N=${N##* }
        log "data-parallel bucket sizes (bucket_mb ${SWEEP_MB:-5 25 100}) on $N GPUs, batch 64 per GPU"
        for p in fp32 bf16; do
            OUTDIR=$W/scaling GPUS=$N BATCHES=64 PRECISION=$p BUCKET_MB="${SWEEP_MB:-5 25 100}" T 290 bash bench/scaling.sh 2>&1 |
                tee "$W/scaling_buckets_$p.txt" | tee -a "$OUT/summary.txt"
        done ;;
    dp_equiv)
        # N=2 (sync_bn) against N=1 with the same global batch on the sample dataset, 50 steps;
        # the yardstick of "float rounding": N=1 against N=1 with label_smoothing=1e-6.
        N=${DP_N:-2}
        log "data parallel: loss curves, $N GPUs x $((128 / N)) (sync_bn=1) vs 1 GPU x 128, 50 steps"
        [ -d data_sample/train ] || build/mkdata --out data_sample --quiet
        for m in plain deft; do
            d=$([ $m = plain ] && echo none || echo all)
            A="configs/sample_deft.cfg deform=$d steps=50 progress=0 checkpoint= log_every=10 eval_every=0 max_val_batches=1"
            T 200 build/train $A overwrite=1 gpus=1 batch=128 log=$W/eq_${m}_1 > "$W/eq_${m}_1.out" 2>&1
            T 200 build/train $A overwrite=1 gpus=$N batch=$((128 / N)) sync_bn=1 log=$W/eq_${m}_2 > "$W/eq_${m}_2.out" 2>&1
            T 200 build/train $A overwrite=1 gpus=1 batch=128 label_smoothing=1e-6 log=$W/eq_${m}_p > "$W/eq_${m}_p.out" 2>&1
            T 200 build/train $A overwrite=1 gpus=1 batch=128 col_budget_mb=8 log=$W/eq_${m}_s > "$W/eq_${m}_s.out" 2>&1
            for o in 2 p s; do
                paste -d, <(tail -n +2 "$W/eq_${m}_1_steps.csv" | cut -d, -f3) <(tail -n +2 "$W/eq_${m}_${o}_steps.csv" | cut -d, -f3) |
                awk -F, -v m=$m -v o=$o -v N=$N '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) { w = d; s = NR }; if (NR <= 10 && d > w10) w10 = d; n = NR }
                    END { printf "%s: 1 GPU vs %s: %d steps, largest relative loss difference %.3g (step %d), first 10 steps %.3g\n", m,
                          (o == 2 ? N " GPUs sync_bn" : o == "p" ? "1 GPU label_smoothing=1e-6" : "1 GPU col_budget_mb=8 (summation order)"), n, w, s, w10 }' | tee -a "$OUT/summary.txt"
            done
        done
        log "data parallel: bitwise run-to-run on $N GPUs (deft, deterministic=1, 30 steps)"
        for k in 1 2; do
            T 200 build/train configs/synthetic_timing.cfg overwrite=1 deform=all deterministic=1 gpus=$N steps=30 progress=0 log=$W/det_$k > "$W/det_$k.out" 2>&1
        done
        if cmp -s <(cut -d, -f3 "$W/det_1_steps.csv") <(cut -d, -f3 "$W/det_2_steps.csv"); then echo "identical losses" ; else echo "LOSSES DIFFER"; fi | tee -a "$OUT/summary.txt" ;;
    dp_equiv_syn)
        # The same on synthetic 224x224 data (one fixed global batch: a smooth, non-chaotic job)
        log "data parallel: loss curves on synthetic data, 2 GPUs x 64 (sync_bn=1) vs 1 GPU x 128, 50 steps"
        for m in plain deft; do
            d=$([ $m = plain ] && echo none || echo all)
            A="configs/synthetic_timing.cfg deform=$d steps=50 progress=0 log_every=10 lr=0.05"
            T 200 build/train $A overwrite=1 gpus=1 batch=128 log=$W/sq_${m}_1 > "$W/sq_${m}_1.out" 2>&1
            T 200 build/train $A overwrite=1 gpus=2 batch=64 sync_bn=1 log=$W/sq_${m}_2 > "$W/sq_${m}_2.out" 2>&1
            T 200 build/train $A overwrite=1 gpus=1 batch=128 col_budget_mb=64 log=$W/sq_${m}_s > "$W/sq_${m}_s.out" 2>&1
            for o in 2 s; do
                paste -d, <(tail -n +2 "$W/sq_${m}_1_steps.csv" | cut -d, -f3) <(tail -n +2 "$W/sq_${m}_${o}_steps.csv" | cut -d, -f3) |
                awk -F, -v m=$m -v o=$o '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) { w = d; s = NR }; n = NR; last = $1 }
                    END { printf "%s: 1 GPU vs %s: %d steps, largest relative loss difference %.3g (step %d); loss %.4f at the end\n", m,
                          (o == 2 ? "2 GPUs sync_bn" : "1 GPU col_budget_mb=64 (summation order)"), n, w, s, last }' | tee -a "$OUT/summary.txt"
            done
        done ;;
    dp_run)
        log "make run on 2 GPUs (sample_deft, gpus=2 batch=64: the global batch of the 1-GPU job), seeds ${DP_SEEDS:-0 1 2}"
        [ -d data_sample/train ] || build/mkdata --out data_sample --quiet
        T 300 build/train configs/sample_deft.cfg overwrite=1 progress=0 seed=0 log=$W/run1_0 checkpoint=$W/run1.ckpt > "$W/run1_0.out" 2>&1
        echo "1 GPU seed 0: $(grep -E '^final|^summary' "$W/run1_0.out" | tr '\n' ' ' | cut -c1-300)" | tee -a "$OUT/summary.txt"
        for s in ${DP_SEEDS:-0 1 2}; do
            T 300 build/train configs/sample_deft.cfg overwrite=1 progress=0 gpus=2 batch=64 seed=$s log=$W/run2_$s checkpoint=$W/run2.ckpt > "$W/run2_$s.out" 2>&1
            echo "2 GPUs seed $s: $(grep -E '^final|^summary' "$W/run2_$s.out" | tr '\n' ' ' | cut -c1-300)" | tee -a "$OUT/summary.txt"
        done
        head -4 "$W/run2_0.out"; grep -E "^step .*/|epoch .* done|summary|final|error" "$W/run2_0.out" | tail -8
        rm -f "$W"/*.ckpt ;;
    dp_multiproc)
        log "two processes, one GPU each, rendezvous through a file (the multi-host launch)"
        rm -f "$W/rdv"
        A="configs/synthetic_timing.cfg deform=all gpus=1 steps=30 progress=0 deterministic=1"
        DT_DIST_WORLD=2 DT_DIST_RANK=1 DT_DIST_FILE=$W/rdv CUDA_VISIBLE_DEVICES=1 timeout 200 build/train $A overwrite=1 log=$W/mp_1 > "$W/mp_1.out" 2>&1 &
        DT_DIST_WORLD=2 DT_DIST_RANK=0 DT_DIST_FILE=$W/rdv CUDA_VISIBLE_DEVICES=0 timeout 200 build/train $A overwrite=1 log=$W/mp_0 > "$W/mp_0.out" 2>&1
        wait
        head -3 "$W/mp_0.out"; grep summary "$W/mp_0.out"
        if cmp -s <(cut -d, -f3 "$W/mp_0_steps.csv") <(cut -d, -f3 "$W/det_1_steps.csv"); then echo "2 processes: losses identical to the 2-thread run"; else echo "2 processes: losses differ from the 2-thread run"; fi | tee -a "$OUT/summary.txt"
        log "the same through NCCL's TCP rendezvous (NCCL_COMM_ID=127.0.0.1:29517, no file)"
        NCCL_COMM_ID=127.0.0.1:29517 DT_DIST_WORLD=2 DT_DIST_RANK=1 CUDA_VISIBLE_DEVICES=1 timeout 200 build/train $A overwrite=1 log=$W/mt_1 > "$W/mt_1.out" 2>&1 &
        NCCL_COMM_ID=127.0.0.1:29517 DT_DIST_WORLD=2 DT_DIST_RANK=0 CUDA_VISIBLE_DEVICES=0 timeout 200 build/train $A overwrite=1 log=$W/mt_0 > "$W/mt_0.out" 2>&1
        wait
        grep -E "summary|error" "$W/mt_0.out" "$W/mt_1.out" | cut -c1-200
        if cmp -s <(cut -d, -f3 "$W/mp_0_steps.csv") <(cut -d, -f3 "$W/mt_0_steps.csv"); then echo "TCP rendezvous: losses identical to the file rendezvous run"; else echo "TCP rendezvous: losses DIFFER from the file rendezvous run"; fi | tee -a "$OUT/summary.txt" ;;
    dp_fail)
        # DP_N processes of one GPU each (file rendezvous); the last rank is killed with -9 after
        # 25 s; every survivor must end with a message within DT_DIST_TIMEOUT (30 s) + the
        # watchdog's margin, none may hang (timeout 120 s)
        N=${DP_N:-2}
        log "failures: a killed process among $N, a diverging run on $N GPUs"
        rm -f "$W/rdv2"
        A="configs/synthetic_timing.cfg deform=all gpus=1 steps=100000 progress=0"
        DT_DIST_WORLD=$N DT_DIST_RANK=$((N - 1)) DT_DIST_FILE=$W/rdv2 CUDA_VISIBLE_DEVICES=$((N - 1)) build/train $A overwrite=1 > "$W/kill_$((N - 1)).out" 2>&1 &
        victim=$!
        for r in $(seq 0 $((N - 2))); do
            (DT_DIST_TIMEOUT=${DP_TIMEOUT:-30} DT_DIST_WORLD=$N DT_DIST_RANK=$r DT_DIST_FILE=$W/rdv2 CUDA_VISIBLE_DEVICES=$r timeout 120 \
                build/train $A overwrite=1 > "$W/kill_$r.out" 2>&1; echo "rc=$? $(date +%s.%N)" > "$W/kill_$r.rc") &
        done
        sleep 25; kill -9 $victim; t1=$(date +%s.%N); wait
        for r in $(seq 0 $((N - 2))); do
            read -r rc t < "$W/kill_$r.rc"
            echo "survivor rank $r: $rc, $(awk -v a=$t1 -v b=$t 'BEGIN{printf "%.1f", b-a}') s after the kill: $(tail -2 "$W/kill_$r.out" | tr '\n' ' ' | cut -c1-240)" | tee -a "$OUT/summary.txt"
        done
        T 120 build/train configs/synthetic_timing.cfg overwrite=1 gpus=$N steps=40 lr=1e6 weight_decay=1 momentum=0 progress=0 > "$W/nan.out" 2>&1
        echo "diverging on $N GPUs: rc=$? $(tail -1 "$W/nan.out")" | tee -a "$OUT/summary.txt" ;;
    dp_resume)
        # A checkpoint written by DP_N GPUs (global batch 128, sync_bn=1, stopped at step 10 of 20)
        # resumed on 1 GPU and on DP_N / 2, against the uninterrupted 1-GPU run (synthetic data:
        # one fixed global batch, a smooth job): the resumed losses follow it to float rounding.
        N=${DP_N:-2}; H=$((N / 2 > 1 ? N / 2 : 1))
        log "checkpoint of $N GPUs resumed on 1 and on $H (global batch 128, sync_bn=1)"
        A="configs/synthetic_timing.cfg deform=all steps=20 progress=0 lr=0.05 sync_bn=1"
        T 200 build/train $A overwrite=1 gpus=1 batch=128 log=$W/rs_full > "$W/rs_full.out" 2>&1
        T 200 build/train $A overwrite=1 gpus=$N batch=$((128 / N)) stop_at=10 checkpoint=$W/rs.ckpt log=$W/rs_part > "$W/rs_part.out" 2>&1
        for m in 1 $H; do
            T 200 build/train $A overwrite=1 gpus=$m batch=$((128 / m)) resume=$W/rs.ckpt log=$W/rs_on$m > "$W/rs_on$m.out" 2>&1
            echo "resumed on $m: $(grep -m1 '^resumed' "$W/rs_on$m.out") $(resumed_vs_full "$W/rs_full_steps.csv" "$W/rs_on${m}_steps.csv")" |
                tee -a "$OUT/summary.txt"
        done
        rm -f "$W/rs.ckpt" ;;
    esac
done
tar czf "$OUT/all.tgz" -C "$W" . && ls -la "$OUT"
