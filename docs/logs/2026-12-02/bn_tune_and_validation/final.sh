#!/usr/bin/env bash
# final call: build main (+ labs) and the BN-tuning variants va (bn_tune.patch) and vb (va without
# bwd_partial's launch bounds); A/B steps; the GPU suite on va; the labs on main; R50, yardstick, ncu
set -uo pipefail
S=$OUT/summary.txt
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $S; }
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee $S
for v in va vb; do rm -rf /tmp/$v && mkdir /tmp/$v && cp -r . /tmp/$v/ && rm -rf /tmp/$v/build && (cd /tmp/$v && git apply .gpubin/bn_tune.patch 2>/dev/null || patch -p1 -s < .gpubin/bn_tune.patch); done
sed -i 's/__global__ void __launch_bounds__(BN_THREADS, 3)/__global__ void __launch_bounds__(BN_THREADS)/' /tmp/vb/ops/batchnorm/batchnorm.cu
grep -c "BN_SPLITS_PER_SM" /tmp/va/ops/batchnorm/batchnorm.cu /tmp/vb/ops/batchnorm/batchnorm.cu | tee -a $S
(cd /tmp/va && make -j6 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/train build/test > $OUT/build_va.log 2>&1; echo "va rc $?" >> $OUT/builds.txt) &
(cd /tmp/vb && make -j4 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/train > /tmp/build_vb.log 2>&1; echo "vb rc $?" >> $OUT/builds.txt) &
make -j6 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all lab > $OUT/build.log 2>&1; echo "main rc $?" >> $OUT/builds.txt
wait; cat $OUT/builds.txt | tee -a $S; el builds
st() { bin=$1; n=$2; shift 2; timeout 200 $bin/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
for rep in 1 2; do
 for v in main va vb; do b=$([ $v = main ] && echo build || echo /tmp/$v/build)
  st $b ${v}_plain_b64_$rep deform=none batch=64
  st $b ${v}_plain_b256_$rep deform=none batch=256
  [ $rep = 1 ] && st $b ${v}_deft_b64 deform=all batch=64
 done
done
st build main_r50_b256 deform=none model=resnet50 batch=256 steps=30
st /tmp/va/build va_r50_b256 deform=none model=resnet50 batch=256 steps=30
for b in 64 256; do timeout 120 python3 bench/torch_yardstick.py resnet18 --batch $b --amp --channels-last --graphs 2>&1 | tail -1 | sed "s/^/torch graphed b$b: /" | tee -a $S; done
el steps
for s in 2 3; do timeout 90 ncu --clock-control none --csv --metrics gpu__time_duration.sum --print-units base /tmp/va/build/train configs/synthetic_timing.cfg deform=none precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 log=/tmp/ncu$s overwrite=1 > /tmp/ncu_$s.csv 2>/tmp/ncu_$s.err; done
python3 bench/kernel_breakdown.py /tmp/ncu_2.csv /tmp/ncu_3.csv > $OUT/breakdown_va.txt 2>&1
head -1 $OUT/breakdown_va.txt | tee -a $S; grep -E "nhwc_|stats|bwd_sums" $OUT/breakdown_va.txt | tee -a $S; grep "batch norm" $OUT/breakdown_va.txt | tee -a $S
(cd /tmp/va && timeout 330 build/test --gpu > $OUT/test_gpu_va.log 2>&1; echo "tests rc $?" >> $OUT/tests_rc.txt) &
timeout 100 build/conv_lab --quick --shapes r18 > $OUT/conv_lab.txt 2>&1; echo "conv_lab rc $?" | tee -a $S; grep -icE "invalid|mismatch|FAIL" $OUT/conv_lab.txt | sed 's/^/conv_lab bad lines: /' | tee -a $S
timeout 100 build/deform_lab --reps 5 > $OUT/deform_lab.txt 2>&1; echo "deform_lab rc $?" | tee -a $S; grep -icE "invalid|mismatch|FAIL" $OUT/deform_lab.txt | sed 's/^/deform_lab bad lines: /' | tee -a $S
timeout 60 build/sm90_gemm_lab --quick --shapes squares > $OUT/sm90_lab.txt 2>&1; echo "sm90_lab rc $?" | tee -a $S; tail -4 $OUT/sm90_lab.txt | tee -a $S
el labs
wait; cat $OUT/tests_rc.txt | tee -a $S; grep -Ev '^ok ' $OUT/test_gpu_va.log | tail -20 | tee -a $S
el done
