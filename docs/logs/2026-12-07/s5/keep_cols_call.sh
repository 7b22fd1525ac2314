#!/usr/bin/env bash
# Session 5 of 2026-12-07, call 1: keep_cols (the deformable forward's columns kept for the
# backward's weight gradient) against sampling them again, one tree, the knob at run time: the
# deformable GPU tests, the steps interleaved (deft b64 two rounds, deft b256, plain b64), their
# peak memory, PyTorch's graphed step, the ncu breakdown of the deft b64 step both ways.
set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee $S
make -j16 STB_INCLUDE=$PWD/.stb all > $L/build.log 2>&1; echo "build rc $? $(el)" >> $S; grep -m3 -E " error" $L/build.log >> $S; snap
timeout 200 build/test --gpu gpu_train_deft_keep_cols_changes_no_bit 'gpu_train_graph_deft*' 'gpu_parity_deft*' 'gpu_deft*' > $L/test_deft.log 2>&1
echo "deft tests rc $? : $(tail -1 $L/test_deft.log) $(el)" >> $S; grep -E "^FAIL" $L/test_deft.log | head -5 >> $S; snap
step() { # name deform batch keep
  timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 progress=0 precision=bf16 deform=$2 batch=$3 keep_cols=$4 steps=30 log=$L/$1 > $L/$1.out 2>&1
  echo "$1: $(awk '/^median_step_ms/{print $2}' $L/$1_summary.txt) ms, peak $(awk '/^peak_mem_gib/{print $2}' $L/$1_summary.txt) GiB $(grep -m1 -iE 'error|fail' $L/$1.out | cut -c1-150)" >> $S
}
for r in 1 2; do for k in 1 0; do step deft_b64_k${k}_r$r all 64 $k; done; snap; done
for k in 1 0; do step deft_b256_k$k all 256 $k; done
step plain_b64 none 64 1; echo "steps $(el)" >> $S; snap
timeout 90 python3 bench/torch_yardstick.py resnet18 --amp --channels-last --graphs --batch 64 > $L/yard.log 2>&1; grep "ms/step" $L/yard.log | head -2 >> $S; snap
for k in 1 0; do [ $(( $(date +%s) - t0 )) -gt 480 ] && break
  for s in 5 6; do timeout 45 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=all keep_cols=$k precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 overwrite=1 log=$L/ncu_$s > $L/ncu_$s.csv 2> $L/ncu_$s.err; done
  python3 bench/kernel_breakdown.py $L/ncu_5.csv $L/ncu_6.csv > $L/breakdown_deft_k$k.txt 2>&1; rm -f $L/ncu_*.csv
  echo "breakdown deft keep_cols=$k: $(head -1 $L/breakdown_deft_k$k.txt)" >> $S; grep -E "k_sample|k_gather" $L/breakdown_deft_k$k.txt | head -6 >> $S; grep -A10 "by category" $L/breakdown_deft_k$k.txt >> $S; snap
done
echo "end $(el)" >> $S; snap
