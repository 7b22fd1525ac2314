#!/usr/bin/env bash
# session 2026-12-03 call 1: build main (+labs) and base (22f0c46: conv+BN stats before the group fold);
# the whole GPU suite on main; A/B steps base/new; conv_algo=measure; deft; R50; yardstick; ncu
set -uo pipefail
S=$OUT/summary.txt
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $S; }
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee $S
git log --oneline -1 | tee -a $S
cp -r .stb .gpubin/base/ 2>/dev/null
(cd .gpubin/base && make -j5 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/train > $OUT/build_base.log 2>&1; echo "base rc $?" >> $OUT/builds.txt) &
make -j11 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all lab > $OUT/build.log 2>&1; echo "new rc $?" >> $OUT/builds.txt
wait; cat $OUT/builds.txt | tee -a $S; grep -E "error" $OUT/build.log | head -20 | tee -a $S; el builds
timeout 290 build/test --gpu > $OUT/test_gpu.log 2>&1; echo "tests rc $?" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | tail -30 | tee -a $S; el tests
st() { bin=$1; n=$2; shift 2; timeout 200 $bin/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  cp /tmp/$n.log $OUT/$n.log 2>/dev/null
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
for rep in 1 2; do
 for v in base new; do b=$([ $v = new ] && echo build || echo .gpubin/base/build)
  st $b ${v}_plain_b64_$rep deform=none batch=64
  st $b ${v}_plain_b256_$rep deform=none batch=256
 done
 st build measure_plain_b64_$rep deform=none batch=64 conv_algo=measure
 st build measure_plain_b256_$rep deform=none batch=256 conv_algo=measure
done
st build new_deft_b64 deform=all batch=64
st build new_r50_b256 deform=none model=resnet50 batch=256 steps=30
st build measure_r50_b256 deform=none model=resnet50 batch=256 steps=30 conv_algo=measure
for b in 64 256; do timeout 120 python3 bench/torch_yardstick.py resnet18 --batch $b --amp --channels-last --graphs 2>&1 | tail -1 | sed "s/^/torch graphed b$b: /" | tee -a $S; done
el steps
for s in 2 3; do timeout 90 ncu --clock-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=none precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 log=/tmp/ncu$s overwrite=1 > /tmp/ncu_$s.csv 2>/tmp/ncu_$s.err; done
python3 bench/kernel_breakdown.py /tmp/ncu_2.csv /tmp/ncu_3.csv > $OUT/breakdown_new.txt 2>&1
head -1 $OUT/breakdown_new.txt | tee -a $S; grep -E "nhwc_|stats|bwd_sums|sm90" $OUT/breakdown_new.txt | tee -a $S; grep -E "batch norm|^  [a-z]" $OUT/breakdown_new.txt | tee -a $S
el done
