#!/usr/bin/env bash
# session 3 call 2: the offset conv's backward as one op (k_dom_prep) against 5c08ee2, the
# never-waiting checkpoint writer in make run's two jobs, the GPU tests that cover both
set -uo pipefail
S=$OUT/summary.txt
git log --oneline -1 | tee -a $S
cp -r .stb .gpubin/base/ 2>/dev/null
(cd .gpubin/base && make -j6 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/train > /tmp/build_base.log 2>&1; echo "base rc $?" >> /tmp/builds.txt) &
make -j10 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "new rc $?" >> /tmp/builds.txt
wait; cat /tmp/builds.txt | tee -a $S; grep -E " error" /tmp/build.log | head | tee -a $S; echo "[$SECONDS s] builds" | tee -a $S
timeout 150 build/test --gpu 'gpu_offset_conv*' '*deft*' 'gpu_cases_deform*' 'gpu_deform_op*' 'gpu_train_graph_deft*' 'gpu_errors_sgd*' 'gpu_errors_deform*' > $OUT/test_gpu.log 2>&1; echo "tests rc $?" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | grep -v "^    point" | tail -25 | tee -a $S; echo "[$SECONDS s] tests" | tee -a $S
st() { bin=$1; n=$2; shift 2; timeout 100 $bin/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
for v in base new base new; do b=$([ $v = new ] && echo build || echo .gpubin/base/build)
  st $b ${v}_deft_b64 deform=all batch=64
done
for v in base new; do b=$([ $v = new ] && echo build || echo .gpubin/base/build); st $b ${v}_deft_b256 deform=all batch=256; done
echo "[$SECONDS s] steps" | tee -a $S
[ -d data_sample/train ] || timeout 60 build/mkdata --out data_sample --quiet
for prec in bf16 fp32; do
  /usr/bin/time -f "%e" -o /tmp/run_$prec.time timeout 100 build/train configs/sample_deft.cfg precision=$prec progress=0 log=/tmp/run_$prec overwrite=1 checkpoint=/tmp/run_$prec.ckpt > /tmp/run_$prec.out 2>&1
  echo "make run job $prec: $(cat /tmp/run_$prec.time) s wall; $(grep -E '^summary' /tmp/run_$prec.out | cut -c1-160) | $(grep -E '^final' /tmp/run_$prec.out) | $(grep -E '^checkpoints:' /tmp/run_$prec.out) | epoch 3: $(grep -m1 'epoch 3 wall time' /tmp/run_$prec.out)" | tee -a $S
  grep -E "^CUDA graph|^data |setup|loaded|cache" /tmp/run_$prec.out | head -5 >> $S
  cp /tmp/run_$prec.out $OUT/
done
echo "[$SECONDS s] runs" | tee -a $S
if [ $SECONDS -lt 420 ]; then
for s in 2 3; do timeout 60 ncu --clock-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=all precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 log=/tmp/ncu$s overwrite=1 > /tmp/ncu_$s.csv 2>/tmp/ncu_$s.err; done
python3 bench/kernel_breakdown.py /tmp/ncu_2.csv /tmp/ncu_3.csv > $OUT/breakdown_deft.txt 2>&1
head -1 $OUT/breakdown_deft.txt | tee -a $S; grep -E "k_dom|k_sum_parts|k_db_parts|k_pack_w" $OUT/breakdown_deft.txt | tee -a $S
fi
echo "[$SECONDS s] done" | tee -a $S
