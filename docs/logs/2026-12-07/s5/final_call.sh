#!/usr/bin/env bash
# Session 5 of 2026-12-07, the closing call: make test-gpu on the final tree, the bf16 steps
# beside PyTorch's graphed step, the ncu breakdown of the all-deformable b64 step.
set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name,memory.total --format=csv | tee $S
make -j16 STB_INCLUDE=$PWD/.stb all > $L/build.log 2>&1; echo "build rc $? $(el)" >> $S; snap
timeout 300 make STB_INCLUDE=$PWD/.stb test-gpu > $L/test_gpu.log 2>&1; echo "test-gpu rc $? $(el)" >> $S; tail -3 $L/test_gpu.log >> $S; grep -E "^FAIL" $L/test_gpu.log | head >> $S; snap
for c in "plain none" "deft all"; do set -- $c
  timeout 60 build/train configs/synthetic_timing.cfg overwrite=1 progress=0 precision=bf16 deform=$2 batch=64 steps=30 log=$L/$1 > $L/$1.out 2>&1
  echo "$1 b64: $(awk '/^median_step_ms/{print $2}' $L/$1_summary.txt) ms" >> $S; done
timeout 60 python3 bench/torch_yardstick.py resnet18 --amp --channels-last --graphs --batch 64 > $L/yard.log 2>&1; grep "ms/step" $L/yard.log | head -2 >> $S; snap
for s in 5 6; do timeout 40 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=all precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 overwrite=1 log=$L/ncu_$s > $L/ncu_$s.csv 2> $L/ncu_$s.err; done
python3 bench/kernel_breakdown.py $L/ncu_5.csv $L/ncu_6.csv > $L/breakdown_deft.txt 2>&1; rm -f $L/ncu_*.csv
echo "breakdown deft: $(head -1 $L/breakdown_deft.txt)" >> $S; grep -A8 "by category" $L/breakdown_deft.txt >> $S
echo "end $(el)" >> $S; snap
