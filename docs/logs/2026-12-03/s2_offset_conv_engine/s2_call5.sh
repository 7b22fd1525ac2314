#!/usr/bin/env bash
# session 2 call 5: the offset conv's three passes on the Hopper engine (dgrad added) - tests, A/B against
# a497fe7, per-layer bench, which earlier test makes the graph test of the deft bf16 net fail, ncu
set -uo pipefail
S=$OUT/summary.txt
cp -r .stb .gpubin/base/ 2>/dev/null
(cd .gpubin/base && make -j6 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/train build/bench > /tmp/build_base.log 2>&1; echo "base rc $?" >> /tmp/builds.txt) &
make -j10 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "new rc $?" >> /tmp/builds.txt
wait; cat /tmp/builds.txt | tee -a $S; grep -E " error" /tmp/build.log | head | tee -a $S; echo "[$SECONDS s] builds" | tee -a $S
timeout 150 build/test --gpu '*deform*' '*deft*' 'gpu_offset_conv*' 'gpu_errors*' '*sm90*' 'gpu_conv*' 'gpu_train_conv*' 'gpu_cases_conv*' > $OUT/test_gpu.log 2>&1; echo "tests rc $?" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | tail -25 | tee -a $S; echo "[$SECONDS s] tests" | tee -a $S
st() { bin=$1; n=$2; shift 2; timeout 100 $bin/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
for v in base new; do b=$([ $v = new ] && echo build || echo .gpubin/base/build)
  st $b ${v}_deft_b64 deform=all batch=64
  st $b ${v}_deft_b256 deform=all batch=256
done
st build new_deft_b64_again deform=all batch=64
echo "[$SECONDS s] steps" | tee -a $S
for v in base new; do b=$([ $v = new ] && echo build || echo .gpubin/base/build)
  timeout 60 $b/bench --what deform --modes deft --precision bf16 --batch 64 > $OUT/bench_deform_$v.txt 2>&1; echo "bench $v rc $?" | tee -a $S
done
echo "[$SECONDS s] bench" | tee -a $S
for t in gpu_errors_sgd_failed_step_leaves_params_consistent gpu_errors_deform_api_injected_failures gpu_deft_zero_offsets_equal_conv2d gpu_deft_more_than_2e31_column_elements gpu_deft_matches_unfused_on_resnet_shapes gpu_deft_layer_deterministic_is_bitwise gpu_deft_kernels_match_cpu_twins gpu_deform_op_deterministic_is_bitwise gpu_deform_api_f64_matches_cpu_bit_for_bit_run_to_run gpu_cases_deform_deft_parity gpu_offset_conv_tensor_cores_within_format_bound gpu_parity_deft_layer_tiles_and_halos gpu_deform_tf32_within_format_bound gpu_cases_deform_parity; do
  [ $SECONDS -gt 400 ] && break
  timeout 40 build/test --gpu -v $t gpu_train_graph_deft_bf16_matches_eager_bitwise > /tmp/pair.log 2>&1
  echo "after $t: $(tail -1 /tmp/pair.log) $(grep -o 'losses [0-9.]* -> [0-9.]*' /tmp/pair.log)" | tee -a $S
done
echo "[$SECONDS s] pairs" | tee -a $S
if [ $SECONDS -lt 430 ]; then
for s in 2 3; do timeout 60 ncu --clock-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=all precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 log=/tmp/ncu$s overwrite=1 > /tmp/ncu_$s.csv 2>/tmp/ncu_$s.err; done
python3 bench/kernel_breakdown.py /tmp/ncu_2.csv /tmp/ncu_3.csv > $OUT/breakdown_deft_new.txt 2>&1
head -2 $OUT/breakdown_deft_new.txt | tee -a $S
fi
echo "[$SECONDS s] done" | tee -a $S
