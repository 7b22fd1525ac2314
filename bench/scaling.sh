#!/usr/bin/env bash
# Data-parallel scaling (make scaling): images/s of plain and all-deformable (deft) ResNet-18 on
# synthetic 224x224 data (pure compute, as make reproduce) at batch 64 and 256 per GPU, on one
# GPU and on each count of GPUS, and the speed-up of each against one GPU. Writes
# $OUTDIR/scaling.csv and prints a table. Environment: BUILD (build), OUTDIR (runs), GPUS (a
# list of GPU counts, "2"; "2 4 8" on an 8-GPU machine), BATCHES ("64 256"), STEPS (40),
# PRECISION (fp32), BUCKET_MB (a list of gradient bucket sizes in MiB for the runs on several
# GPUs, "25" - the default of bucket_mb; "5 25 100" sweeps them), MODELS ("plain deft"), ARGS
# (more key=value for every run, e.g. "sync_bn=1", or "model=resnet50" for another model than
# ResNet-18; they name the CSV).
set -euo pipefail
B=${BUILD:-build}
OUTDIR=${OUTDIR:-runs}
GPUS=${GPUS:-2}
BATCHES=${BATCHES:-64 256}
STEPS=${STEPS:-40}
PREC=${PRECISION:-fp32}
BUCKETS=${BUCKET_MB:-25}
MODELS=${MODELS:-plain deft}
mkdir -p "$OUTDIR"
EXTRA=${ARGS:-}
TAG=$(echo "$PREC $EXTRA" | tr ' =' '_-')
CSV=$OUTDIR/scaling_$TAG.csv
echo "model,batch_per_gpu,gpus,bucket_mb,median_ms,img_per_s" > "$CSV"

run() { # model batch gpus bucket_mb
    local model=$1 batch=$2 g=$3 mb=$4 d
    d=$([ "$model" = plain ] && echo "deform=none" || echo "deform=all deform_mode=deft")
    local log=$OUTDIR/scaling_${TAG}_${model}_b${batch}_g${g}_mb$mb
    # shellcheck disable=SC2086
    "$B/train" configs/synthetic_timing.cfg overwrite=1 batch="$batch" gpus="$g" bucket_mb="$mb" steps="$STEPS" precision="$PREC" \
        progress=0 log="$log" $d $EXTRA > "$log.out" 2>&1 || { echo "scaling: $model batch $batch on $g GPUs failed:"; tail -5 "$log.out"; exit 1; }
    local s=${log}_summary.txt
    echo "$model,$batch,$g,$mb,$(awk '/^median_step_ms/{print $2}' "$s"),$(awk '/^img_per_s/{print $2}' "$s")" >> "$CSV"
}

for b in $BATCHES; do
    for m in $MODELS; do
        run "$m" "$b" 1 25 # one GPU: nothing is all-reduced, the bucket size does not matter
        for g in $GPUS; do
            for mb in $BUCKETS; do run "$m" "$b" "$g" "$mb"; done
        done
    done
done

echo "($PREC${EXTRA:+ $EXTRA}) model  batch/GPU  GPUs  bucket MiB   img/s   1-GPU img/s   speed-up   per GPU   ms/step"
awk -F, 'NR > 1 { k = $1 "," $2; if ($3 == 1) { one[k] = $6; next }
                  printf "%-8s %9s %5s %11s %8.0f %13.0f %9.3fx %8.3f %9.2f\n", $1, $2, $3, $4, $6, one[k], $6 / one[k], $6 / one[k] / $3, $5 }' "$CSV"
