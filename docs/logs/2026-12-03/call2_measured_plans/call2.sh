#!/usr/bin/env bash
# call 2: the plan table that grows (measure test), the measured plans of R50 / R18 beside auto's
set -uo pipefail
S=$OUT/summary.txt
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $S; }
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/train build/test > /tmp/build.log 2>&1; echo "build rc $?" | tee -a $S; grep error /tmp/build.log | head | tee -a $S; el build
timeout 100 build/test --gpu 'gpu_train_conv_measure*' 'gpu_conv_measure*' 'gpu_cases_conv_sm90*' > $OUT/test_gpu.log 2>&1; echo "tests rc $?" | tee -a $S; grep -Ev '^ok ' $OUT/test_gpu.log | tail | tee -a $S
st() { n=$1; shift; timeout 200 build/train configs/synthetic_timing.cfg overwrite=1 steps=40 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; grep "conv plan" /tmp/$n.log | sed "s/^/$n /" >> $OUT/plans.txt; }
st auto_r50_b256 deform=none model=resnet50 batch=256 steps=30
st measure_r50_b256 deform=none model=resnet50 batch=256 steps=30 conv_algo=measure
st measure2_r50_b256 deform=none model=resnet50 batch=256 steps=30 conv_algo=measure
st auto_r50_b64 deform=none model=resnet50 batch=64
st measure_r50_b64 deform=none model=resnet50 batch=64 conv_algo=measure
st measure_r18_b256 deform=none batch=256 conv_algo=measure
st measure_r18_b64 deform=none batch=64 conv_algo=measure
st measure_deft_b64 deform=all batch=64 conv_algo=measure
el done
