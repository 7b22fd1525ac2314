#!/usr/bin/env bash
# Data-parallel scaling (make scaling): images/s of plain and all-deformable (deft) ResNet-18 on
# synthetic 224x224 data (pure compute, as make reproduce) at batch 64 and 256 per GPU, on one
# GPU and on GPUS (default 2) GPUs, and the ratio. Writes $OUTDIR/scaling.csv and prints a
# table. Environment: BUILD (build), OUTDIR (runs), GPUS (2), BATCHES ("64 256"), STEPS (40),
# PRECISION (fp32), ARGS (more key=value for every run, e.g. "sync_bn=1", or "model=resnet50" for
# another model than ResNet-18; they name the CSV).
set -euo pipefail
B=${BUILD:-build}
OUTDIR=${OUTDIR:-runs}
GPUS=${GPUS:-2}
BATCHES=${BATCHES:-64 256}
STEPS=${STEPS:-40}
PREC=${PRECISION:-fp32}
mkdir -p "$OUTDIR"
EXTRA=${ARGS:-}
TAG=$(echo "$EXTRA" | tr ' =' '_-')
CSV=$OUTDIR/scaling${TAG:+_$TAG}.csv
echo "model,batch_per_gpu,gpus,median_ms,img_per_s" > "$CSV"

run() { # label batch gpus overrides...
    local label=$1 batch=$2 g=$3
    shift 3
    local log=$OUTDIR/scaling${TAG:+_$TAG}_${label}_b${batch}_g${g}
    # shellcheck disable=SC2086
    "$B/train" configs/synthetic_timing.cfg batch="$batch" gpus="$g" steps="$STEPS" precision="$PREC" progress=0 \
        log="$log" "$@" $EXTRA > "$log.out" 2>&1 || { echo "scaling: $label batch $batch on $g GPUs failed:"; tail -5 "$log.out"; exit 1; }
    local s=${log}_summary.txt
    echo "$label,$batch,$g,$(awk '/^median_step_ms/{print $2}' "$s"),$(awk '/^img_per_s/{print $2}' "$s")" >> "$CSV"
}

for b in $BATCHES; do
    for g in 1 "$GPUS"; do
        run plain "$b" "$g" deform=none
        run deft "$b" "$g" deform=all deform_mode=deft
    done
done

echo "${EXTRA:+($EXTRA) }model    batch/GPU   1 GPU img/s   $GPUS GPUs img/s   speed-up   (ms/step 1 GPU, $GPUS GPUs)"
awk -F, -v G="$GPUS" 'NR > 1 { k = $1 "," $2; if ($3 == 1) { one[k] = $5; t1[k] = $4 } else { n[k] = $5; tn[k] = $4; o[++m] = k } }
    END { for (i = 1; i <= m; i++) { k = o[i]; split(k, f, ",");
          printf "%-8s %9s %13.0f %16.0f %9.3fx   (%.2f, %.2f)\n", f[1], f[2], one[k], n[k], n[k] / one[k], t1[k], tn[k] } }' "$CSV"
