#!/usr/bin/env bash
# session 3 call 1: validation of last session's unrun work (the GPU suite whole, the drop-in's two
# paths, the graph flake pairs), the steps beside PyTorch, the op's host time on CUDA, make run's wall time
set -uo pipefail
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee -a $S; git log --oneline -1 | tee -a $S
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "build rc $? at $SECONDS s" | tee -a $S; grep -E " error" /tmp/build.log | head | tee -a $S
make torch-op > /tmp/torch_op_build.log 2>&1; echo "torch-op rc $? at $SECONDS s" | tee -a $S; tail -3 /tmp/torch_op_build.log | grep -i error | tee -a $S
# correctness in parallel (no timing here)
(timeout 330 build/test --gpu > $OUT/test_gpu.log 2>&1; echo "suite rc $? at $SECONDS s" >> /tmp/par.txt) &
(for path in compiled ctypes; do for t in test_deftc_torch test_deftc_torch_ops; do
   DEFTC_TORCH_OP=$path timeout 300 python3 tests/api/$t.py build/libdeftc.so > /tmp/${t}_$path.txt 2>&1
   echo "$t ($path): $(tail -1 /tmp/${t}_$path.txt)" >> /tmp/par.txt; grep -E '^FAIL' /tmp/${t}_$path.txt | head -8 >> /tmp/par.txt
 done; done; echo "dropin done at $SECONDS s" >> /tmp/par.txt) &
(for t in gpu_errors_sgd_failed_step_leaves_params_consistent gpu_deft_more_than_2e31_column_elements; do for sync in 0 1; do
   DT_DEBUG_SYNC=$sync timeout 100 build/test --gpu -v $t gpu_train_graph_deft_bf16_matches_eager_bitwise > /tmp/pair_${t}_$sync.txt 2>&1
   echo "pair after $t sync=$sync: $(tail -1 /tmp/pair_${t}_$sync.txt) $(grep -o 'losses [0-9.]* -> [0-9.]*' /tmp/pair_${t}_$sync.txt | head -3 | tr '\n' ' ')" >> /tmp/par.txt
 done; done) &
wait; cat /tmp/par.txt | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | grep -v "^    point" | tail -30 | tee -a $S
for f in /tmp/test_deftc_torch*_*.txt; do grep -E '^FAIL|Error' $f | head -3 > /dev/null; done
cp /tmp/pair_gpu_errors_sgd_failed_step_leaves_params_consistent_0.txt $OUT/pair_sgd_0.txt 2>/dev/null
echo "[$SECONDS s] correctness" | tee -a $S
st() { n=$1; shift; timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
st plain_b64 batch=64; st deft_b64 deform=all batch=64; st plain_b256 batch=256; st deft_b256 deform=all batch=256
for b in 64 256; do timeout 120 python3 bench/torch_yardstick.py resnet18 --amp --channels-last --graphs --batch $b > /tmp/yard_$b.txt 2>&1; echo "torch b$b: $(tail -2 /tmp/yard_$b.txt | tr '\n' ' ')" | tee -a $S; done
echo "[$SECONDS s] steps" | tee -a $S
for path in compiled ctypes; do DEFTC_TORCH_OP=$path timeout 60 python3 bench/torch_op_host_time.py --device cuda > /tmp/host_$path.txt 2>&1; echo "host time ($path): $(tail -6 /tmp/host_$path.txt | tr '\n' ' ')" | tee -a $S; done
echo "[$SECONDS s] host" | tee -a $S
if [ $SECONDS -lt 470 ]; then
  [ -d data_sample/train ] || timeout 60 build/mkdata --out data_sample --quiet
  /usr/bin/time -f "%e s wall" -o /tmp/run_bf16.time timeout 100 build/train configs/sample_deft.cfg precision=bf16 progress=0 log=/tmp/run_bf16 overwrite=1 checkpoint=/tmp/run.ckpt > /tmp/run_bf16.out 2>&1
  echo "make run job bf16: $(cat /tmp/run_bf16.time) $(grep -E "^summary|^final" /tmp/run_bf16.out | tr "\n" " ") epoch-line: $(grep -m1 "wall time" /tmp/run_bf16.out)" | tee -a $S
  cp /tmp/run_bf16.out $OUT/run_bf16.out
fi
echo "[$SECONDS s] done" | tee -a $S
