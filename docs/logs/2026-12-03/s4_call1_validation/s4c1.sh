#!/usr/bin/env bash
# session 4 call 1: validation of the unrun work (the engine's sampling producer with the register
# split fixed, the GPU suite whole, the compiled drop-in with c10 exceptions), the sampler step
# on/off, make run's wall time both precisions, the op's host time on both paths
set -uo pipefail
S=$OUT/summary.txt
git log --oneline -1 | tee -a $S
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "build rc $? at $SECONDS s" | tee -a $S; grep -E " error|error:" /tmp/build.log | head -5 | tee -a $S
# the drop-in in the background: build the compiled op, then its suites on both paths, then host time
( make torch-op STB_INCLUDE=$PWD/.stb > /tmp/t.log 2>&1; echo "torch-op rc $? at $SECONDS s" >> /tmp/par.txt; grep -iE "error" /tmp/t.log | head -5 >> /tmp/par.txt
  for p in compiled ctypes; do for t in test_deftc_torch test_deftc_torch_ops; do DEFTC_TORCH_OP=$p timeout 240 python3 -X faulthandler tests/api/$t.py build/libdeftc.so > /tmp/${t}_$p.txt 2>&1
    echo "$t ($p): rc $? $(tail -1 /tmp/${t}_$p.txt)" >> /tmp/par.txt; grep -E '^FAIL|^ERROR' /tmp/${t}_$p.txt | head -8 >> /tmp/par.txt; tail -40 /tmp/${t}_$p.txt > $OUT/${t}_${p}_tail.txt; done; done
  echo "dropin done at $SECONDS s" >> /tmp/par.txt ) &
timeout 60 build/deform_lab --what sampler --reps 20 > $OUT/lab_sampler.txt 2>&1; echo "lab rc $? at $SECONDS s" | tee -a $S; tail -24 $OUT/lab_sampler.txt | tee -a $S
timeout 320 build/test --gpu > $OUT/test_gpu.log 2>&1; echo "suite rc $? at $SECONDS s" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | grep -v "^    point" | tail -30 | tee -a $S
wait; cat /tmp/par.txt | tee -a $S
echo "[$SECONDS s] correctness" | tee -a $S
st() { n=$1; shift; timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
for v in 0 1 0 1; do st deft_b64_sampler$v deform=all batch=64 engine_sampler=$v; done
for v in 0 1; do st deft_b256_sampler$v deform=all batch=256 engine_sampler=$v; done
echo "[$SECONDS s] steps" | tee -a $S
for p in compiled ctypes; do DEFTC_TORCH_OP=$p timeout 60 python3 bench/torch_op_host_time.py --device cuda > /tmp/host_$p.txt 2>&1; echo "host ($p): $(tail -6 /tmp/host_$p.txt | tr '\n' ' ' | tr -s ' ')" | tee -a $S; done
echo "[$SECONDS s] host" | tee -a $S
[ -d data_sample/train ] || timeout 60 build/mkdata --out data_sample --quiet
for prec in bf16 fp32; do
  [ $SECONDS -lt 530 ] || break
  /usr/bin/time -f "%e" -o /tmp/run_$prec.time timeout 60 build/train configs/sample_deft.cfg precision=$prec progress=0 log=/tmp/run_$prec overwrite=1 checkpoint=/tmp/run_$prec.ckpt > /tmp/run_$prec.out 2>&1
  echo "make run job $prec: $(cat /tmp/run_$prec.time) s wall; $(grep -E '^summary' /tmp/run_$prec.out | cut -c1-120) | $(grep -E '^final' /tmp/run_$prec.out) | $(grep -E '^checkpoints:' /tmp/run_$prec.out) | $(grep -m1 'epoch 3 wall time' /tmp/run_$prec.out)" | tee -a $S
  cp /tmp/run_$prec.out $OUT/
done
echo "[$SECONDS s] done" | tee -a $S
