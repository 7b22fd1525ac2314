#!/usr/bin/env bash
# call 3 (merged main: errors as values + the pointwise plan): whole GPU suite, the drop-in's GPU suite,
# steps auto/measure R50 and R18, deft, yardstick, ncu of R50 b256 (auto)
set -uo pipefail
S=$OUT/summary.txt
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $S; }
git log --oneline -1 | tee -a $S
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "build rc $?" | tee -a $S; grep -E "error" /tmp/build.log | head | tee -a $S; el build
st() { n=$1; shift; timeout 200 build/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; grep "conv plan" /tmp/$n.log | sed "s/^/$n /" >> $OUT/plans.txt; }
for rep in 1 2; do
st auto_r50_b256_$rep deform=none model=resnet50 batch=256 steps=30
st measure_r50_b256_$rep deform=none model=resnet50 batch=256 steps=30 conv_algo=measure
st auto_r50_b64_$rep deform=none model=resnet50 batch=64
st measure_r50_b64_$rep deform=none model=resnet50 batch=64 conv_algo=measure
st auto_r18_b64_$rep deform=none batch=64
st auto_r18_b256_$rep deform=none batch=256
done
st auto_deft_b64 deform=all batch=64
for b in 64 256; do timeout 120 python3 bench/torch_yardstick.py resnet18 --batch $b --amp --channels-last --graphs 2>&1 | tail -1 | sed "s/^/torch graphed b$b: /" | tee -a $S; done
el steps
timeout 280 build/test --gpu > $OUT/test_gpu.log 2>&1; echo "tests rc $?" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | tail -30 | tee -a $S; el tests
timeout 150 python3 tests/api/test_deftc_torch.py build/libdeftc.so > $OUT/test_deftc_torch.txt 2>&1; echo "test_deftc_torch rc $?: $(tail -1 $OUT/test_deftc_torch.txt)" | tee -a $S; grep -E "^FAIL|Error" $OUT/test_deftc_torch.txt | head -10 | tee -a $S
el done
