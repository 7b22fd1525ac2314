#!/usr/bin/env bash
# session 3 call 3: the merged tree - the engine's sampling producer (lab + tests + the step with
# engine_sampler on/off), the pinned checkpoint snapshot (test + make run's jobs), the drop-in on
# the compiled path (the crash's backtrace, the suites, host time per call)
set -uo pipefail
S=$OUT/summary.txt
git log --oneline -1 | tee -a $S
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "build rc $? at $SECONDS s" | tee -a $S; grep -E " error|error:" /tmp/build.log | head -5 | tee -a $S
make torch-op STB_INCLUDE=$PWD/.stb > /tmp/t.log 2>&1; echo "torch-op rc $? at $SECONDS s" | tee -a $S
# correctness of the drop-in, in the background (no timing)
( DEFTC_TORCH_OP=compiled timeout 60 gdb -q -batch -ex run -ex bt --args python3 .gpubin/repro_raise.py > $OUT/repro_raise.txt 2>&1
  for t in test_deftc_torch test_deftc_torch_ops; do DEFTC_TORCH_OP=compiled timeout 200 python3 -X faulthandler tests/api/$t.py build/libdeftc.so > /tmp/${t}_c.txt 2>&1
    echo "$t (compiled): rc $? $(tail -1 /tmp/${t}_c.txt)" >> /tmp/par.txt; grep -E '^FAIL' /tmp/${t}_c.txt | head -6 >> /tmp/par.txt; tail -25 /tmp/${t}_c.txt > $OUT/${t}_compiled_tail.txt; done
  echo "dropin done at $SECONDS s" >> /tmp/par.txt ) &
timeout 90 build/deform_lab --what sampler --reps 20 > $OUT/lab_sampler.txt 2>&1; echo "lab rc $? at $SECONDS s" | tee -a $S; tail -22 $OUT/lab_sampler.txt | tee -a $S
timeout 120 build/test --gpu gpu_deft_engine_sampler_is_the_columns_gemm gpu_checkpoint_snapshot_matches_the_cpus 'gpu_offset_conv*' gpu_cases_deform_deft_parity gpu_deft_kernels_match_cpu_twins gpu_cases_conv_sm90_parity gpu_conv_sm90_statistics_are_those_of_its_output '*deform_api*' 'gpu_errors_deform*' gpu_train_graph_deft_bf16_matches_eager_bitwise > $OUT/test_gpu.log 2>&1; echo "tests rc $? at $SECONDS s" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | grep -v "^    point" | tail -20 | tee -a $S
wait; cat /tmp/par.txt | tee -a $S; head -c 1500 $OUT/repro_raise.txt | grep -E "raised|nothing|path|SIGSEGV|#[0-9]" | head -14 | tee -a $S
echo "[$SECONDS s] correctness" | tee -a $S
st() { n=$1; shift; timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
for v in 0 1; do st deft_b64_sampler$v deform=all batch=64 engine_sampler=$v; done
for v in 0 1; do st deft_b256_sampler$v deform=all batch=256 engine_sampler=$v; done
st plain_b64 batch=64
echo "[$SECONDS s] steps" | tee -a $S
[ -d data_sample/train ] || timeout 60 build/mkdata --out data_sample --quiet
for prec in bf16 fp32; do
  /usr/bin/time -f "%e" -o /tmp/run_$prec.time timeout 100 build/train configs/sample_deft.cfg precision=$prec progress=0 log=/tmp/run_$prec overwrite=1 checkpoint=/tmp/run_$prec.ckpt > /tmp/run_$prec.out 2>&1
  echo "make run job $prec: $(cat /tmp/run_$prec.time) s wall; $(grep -E '^summary' /tmp/run_$prec.out | cut -c1-120) | $(grep -E '^final' /tmp/run_$prec.out) | $(grep -E '^checkpoints:' /tmp/run_$prec.out) | $(grep -m1 'epoch 3 wall time' /tmp/run_$prec.out)" | tee -a $S
  cp /tmp/run_$prec.out $OUT/
done
echo "[$SECONDS s] runs" | tee -a $S
for p in compiled ctypes; do DEFTC_TORCH_OP=$p timeout 60 python3 bench/torch_op_host_time.py --device cuda > /tmp/host_$p.txt 2>&1; echo "host ($p): $(tail -6 /tmp/host_$p.txt | tr '\n' ' ' | tr -s ' ')" | tee -a $S; done
echo "[$SECONDS s] done" | tee -a $S
