#!/usr/bin/env bash
# session 2 call 2: the offset conv's forward + weight gradient on the Hopper engine (uncommitted on a497fe7)
# against a497fe7 (base): GPU tests of the deformable family, deft steps A/B, per-layer bench, ncu
set -uo pipefail
S=$OUT/summary.txt
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $S; }
cp -r .stb .gpubin/base/ 2>/dev/null
(cd .gpubin/base && make -j6 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/train build/bench > /tmp/build_base.log 2>&1; echo "base rc $?" >> /tmp/builds.txt) &
make -j10 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "new rc $?" >> /tmp/builds.txt
wait; cat /tmp/builds.txt | tee -a $S; grep -E "error" /tmp/build.log /tmp/build_base.log | head -20 | tee -a $S; el builds
timeout 200 build/test --gpu '*deform*' '*deft*' 'gpu_offset_conv*' 'gpu_errors*' > $OUT/test_gpu.log 2>&1; echo "tests rc $?" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | tail -30 | tee -a $S; el tests
st() { bin=$1; n=$2; shift 2; timeout 200 $bin/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
for rep in 1 2; do
 for v in base new; do b=$([ $v = new ] && echo build || echo .gpubin/base/build)
  st $b ${v}_deft_b64_$rep deform=all batch=64
  st $b ${v}_deft_b256_$rep deform=all batch=256
 done
done
el steps
for v in base new; do b=$([ $v = new ] && echo build || echo .gpubin/base/build)
  timeout 100 $b/bench --what deform --precision bf16 --batch 64 > $OUT/bench_deform_$v.txt 2>&1; echo "bench $v rc $?" | tee -a $S
done
el bench
for s in 2 3; do timeout 100 ncu --clock-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=all precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 log=/tmp/ncu$s overwrite=1 > /tmp/ncu_$s.csv 2>/tmp/ncu_$s.err; done
python3 bench/kernel_breakdown.py /tmp/ncu_2.csv /tmp/ncu_3.csv > $OUT/breakdown_deft_new.txt 2>&1
head -3 $OUT/breakdown_deft_new.txt | tee -a $S; grep -iE "offconv|sm90|offset" $OUT/breakdown_deft_new.txt | head -20 | tee -a $S
el done
