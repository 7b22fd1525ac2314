#!/usr/bin/env bash
# `make reproduce`: the normalized training-time table behind DefT's "46 % less training time".
# ResNet-18 (MODEL=resnet34|resnet50|resnet101: that model; the all-deformable nets deform every
# 3x3 conv of the blocks) on synthetic data (random device tensors: pure compute, no loader), 224x224,
# batch 64 and 256: plain, all-deformable `unfused`, all-deformable `deft`; then the ablation
# at batch 64 (each deft knob against its default, DefT's fused + staged recipe, deterministic); then the precision
# axis: plain and deft in tf32 and bf16 at each batch; then, with bf16, the convs on im2col + cuBLAS
# everywhere at the first batch (conv_algo=gemm: the default auto runs the implicit GEMM where it wins). Median step time after the warm-up steps.
# Writes runs/reproduce.csv, runs/reproduce_chart.csv and a PNG chart (runs/reproduce_MODEL.* for
# another MODEL; bars coloured by model:
# plain, deformable unfused, deformable deft). It needs a CUDA GPU and says so at once without
# one; FROM_CSV=an earlier reproduce.csv makes the table and the chart from it, no GPU needed
# (docs/reproduce.png: FROM_CSV=docs/logs/2026-12-03/s2_call1_suite_reproduce/reproduce.csv).
#   STEPS=40 WARM=10 BATCHES="64 256" VERSION=1 PRECISIONS="tf32 bf16" MODEL=resnet18 bash bench/reproduce.sh
# (make reproduce MODEL=resnet50 passes it on)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
FROM_CSV=${FROM_CSV:-}
STEPS=${STEPS:-40}
WARM=${WARM:-10}
BATCHES=${BATCHES:-"64 256"}
VERSION=${VERSION:-1}
PRECISIONS=${PRECISIONS-"tf32 bf16"}
MODEL=${MODEL:-resnet18}
OUTDIR=${OUTDIR:-runs}
mkdir -p "$OUTDIR"
SUFFIX=$([ "$MODEL" = resnet18 ] || echo "_$MODEL") # resnet18 keeps the names the docs cite
CSV=$OUTDIR/reproduce$SUFFIX.csv

run() { # label precision batch overrides...
    local label=$1 prec=$2 batch=$3
    shift 3
    local log=$OUTDIR/repro${SUFFIX}_${label}_${prec}_b${batch}
    "$B/train" configs/synthetic_timing.cfg overwrite=1 model="$MODEL" batch="$batch" steps="$STEPS" timing_warmup="$WARM" \
        deform_version="$VERSION" precision="$prec" progress=0 log="$log" "$@" > "$log.out" 2>&1 || {
        echo "reproduce: $label (batch $batch) failed:"; tail -5 "$log.out"; exit 1; }
    local s=$log\_summary.txt
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$label" "$prec" "$batch" "$(awk '/^median_step_ms/{print $2}' "$s")" \
        "$(awk '/^p90_step_ms/{print $2}' "$s")" "$(awk '/^fwd_ms/{print $2}' "$s")" "$(awk '/^bwd_ms/{print $2}' "$s")" \
        "$(awk '/^opt_ms/{print $2}' "$s")" "$(awk '/^img_per_s/{print $2}' "$s")" "$(awk '/^peak_mem_gib/{print $2}' "$s")" >> "$CSV"
    echo "  $label $prec batch $batch: $(awk '/^median_step_ms/{print $2}' "$s") ms/step"
}

if [ -n "$FROM_CSV" ]; then
    CSV=$FROM_CSV
else
    if ! devices=$("$B/train" --devices); then
        echo "reproduce: make reproduce times training steps on a CUDA GPU, and this build sees none ($devices)."
        echo "To redraw the table and chart of an earlier run: FROM_CSV=runs/reproduce$SUFFIX.csv MODEL=$MODEL bash bench/reproduce.sh"
        exit 1
    fi
    echo "config,precision,batch,median_ms,p90_ms,fwd_ms,bwd_ms,opt_ms,img_per_s,peak_gib" > "$CSV"
    for b in $BATCHES; do
        run plain fp32 "$b" deform=none
        run unfused fp32 "$b" deform=all deform_mode=unfused
        run deft fp32 "$b" deform=all deform_mode=deft
    done
    b=$(echo $BATCHES | awk '{print $1}')
    # each knob of the deft path switched away from its default, then DefT's own recipe
    run deft_dx_atomic fp32 "$b" deform=all deform_mode=deft dx=atomic
    run deft_dx_gather fp32 "$b" deform=all deform_mode=deft dx=gather
    run deft_fuse1 fp32 "$b" deform=all deform_mode=deft fuse_offset=1
    run deft_stage1 fp32 "$b" deform=all deform_mode=deft stage=1
    run deft_fuse1_stage1 fp32 "$b" deform=all deform_mode=deft fuse_offset=1 stage=1
    run deft_fuse1_stage1_swizzle0 fp32 "$b" deform=all deform_mode=deft fuse_offset=1 stage=1 swizzle=0
    run deft_det fp32 "$b" deform=all deform_mode=deft deterministic=1
    run deft_keep_cols0 fp32 "$b" deform=all deform_mode=deft keep_cols=0
    run unfused_det fp32 "$b" deform=all deform_mode=unfused deterministic=1
    # the precision axis (docs/training.md, "Precision")
    for p in $PRECISIONS; do
        for b in $BATCHES; do
            run plain "$p" "$b" deform=none
            run deft "$p" "$b" deform=all deform_mode=deft
        done
    done
    # bf16 convs without the implicit GEMM (docs/conv.md): what the per-shape plan saves
    if echo " $PRECISIONS " | grep -q " bf16 "; then
        b=$(echo $BATCHES | awk '{print $1}')
        run plain_conv_gemm bf16 "$b" deform=none conv_algo=gemm
        run deft_conv_gemm bf16 "$b" deform=all deform_mode=deft conv_algo=gemm
    fi
fi

# The normalized table (plain = 1.00) and the reduction of deft over unfused.
CHART=$OUTDIR/reproduce_chart$SUFFIX.csv
rm -f "$CHART" # never a chart of an earlier table
python3 - "$CSV" "$CHART" "$MODEL" <<'PY' || awk -F, 'NR>1{print}' "$CSV"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
net = {'resnet18': 'ResNet-18', 'resnet34': 'ResNet-34', 'resnet50': 'ResNet-50', 'resnet101': 'ResNet-101'}[sys.argv[3]]
by = {(r['config'], r['precision'], r['batch']): float(r['median_ms']) for r in rows}
print('\n| config | precision | batch | ms/step | normalized (plain fp32 = 1.00) | img/s | peak GiB |')
print('| --- | --- | ---: | ---: | ---: | ---: | ---: |')
chart = open(sys.argv[2], 'w')
MODELS = {'plain': 'plain ' + net, 'unfused': 'all-deformable unfused', 'deft': 'all-deformable deft'}
for r in rows:
    plain = by.get(('plain', 'fp32', r['batch']))
    norm = float(r['median_ms']) / plain if plain else float('nan')
    print(f"| {r['config']} | {r['precision']} | {r['batch']} | {float(r['median_ms']):.2f} | {norm:.2f} | "
          f"{float(r['img_per_s']):.0f} | {float(r['peak_gib']):.2f} |")
    model = MODELS[r['config'].split('_')[0]]  # deft_dx_atomic, unfused_det, ...: the model they time
    # the ratio unrounded: the chart rounds it once, as the table does (1.695 rounded twice is 1.70)
    chart.write(f"{r['config']} {r['precision']} b{r['batch']},{norm!r},({float(r['median_ms']):.1f} ms),{model}\n")
for b in sorted({r['batch'] for r in rows}, key=int):
    if ('unfused', 'fp32', b) in by and ('deft', 'fp32', b) in by:
        print(f"batch {b}: deft takes {100 * (1 - by[('deft', 'fp32', b)] / by[('unfused', 'fp32', b)]):.1f} % less time than unfused")
PY
if [ -f "$CHART" ] && [ -x "$B/chart" ]; then
    NET=$(echo "$MODEL" | sed 's/resnet/ResNet-/')
    "$B/chart" "$CHART" "$OUTDIR/reproduce$SUFFIX.png" "$NET step time, normalized to plain fp32 at the same batch (lower is better; the dashed line: 1.0 = plain fp32)" 1
    echo "chart: $OUTDIR/reproduce$SUFFIX.png"
fi
