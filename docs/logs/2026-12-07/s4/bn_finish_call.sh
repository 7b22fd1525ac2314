#!/usr/bin/env bash
# Session 4 of 2026-12-07, call 1: the batch-norm reductions finishing in their own launch (the
# last split's block: the statistics, the backward's sums, dw, db, coefficients) against HEAD
# (e10995d, .gpubin/base.tar): the lab's partial pass, the batch-norm GPU tests, the steps
# interleaved (two rounds), PyTorch's graphed step, the ncu breakdown of both trees.
set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee $S
mkdir -p /tmp/base && tar xf .gpubin/base.tar -C /tmp/base && cp -r .stb /tmp/base/
( make -j8 STB_INCLUDE=$PWD/.stb all > $L/build_new.log 2>&1; echo "new build rc $? $(el)" >> $S ) &
( cd /tmp/base && make -j8 STB_INCLUDE=$PWD/.stb build/train > $L/build_base.log 2>&1; echo "base build rc $? $(el)" >> $S ) &
wait; grep -m3 -E " error" $L/build_new.log >> $S; snap
timeout 150 build/test --gpu gpu_cases_batchnorm_parity gpu_batchnorm_bitwise_repeatable gpu_cases_conv_bn_parity gpu_conv_bn_fused_matches_the_pair 'gpu_train_graph_plain_bf16*' 'gpu_train_graph_deft_bf16*' > $L/test_bn.log 2>&1; echo "bn tests rc $? : $(tail -1 $L/test_bn.log) $(el)" >> $S; grep -E "^FAIL" $L/test_bn.log | head -5 >> $S; snap
timeout 120 build/bn_lab --pass partial > $L/bn_lab.log 2>&1; echo "bn_lab rc $? $(el)" >> $S
grep -E "FAIL" $L/bn_lab.log | head -10 >> $S; awk '/^## /{p=$2} /^[a-z0-9_]+ +[0-9F]/{print p, $1, $(NF-1), $NF}' $L/bn_lab.log >> $S; snap
for r in 1 2; do [ $r = 2 ] && [ $(( $(date +%s) - t0 )) -gt 330 ] && break; for c in "plain 64 none" "plain 256 none" "deft 64 all"; do set -- $c
  for b in base new; do d=.; [ $b = base ] && d=/tmp/base
    ( cd $d && timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 progress=0 precision=bf16 deform=$3 batch=$2 steps=30 log=$L/${b}_$1_b$2_r$r > $L/${b}_$1_b$2_r$r.out 2>&1 )
    echo "${b}_$1_b$2_r$r: $(awk '/^median_step_ms/{print $2}' $L/${b}_$1_b$2_r${r}_summary.txt) ms $(grep -m1 -iE 'error|fail' $L/${b}_$1_b$2_r$r.out | cut -c1-150)" >> $S
  done; done; snap
done; echo "steps $(el)" >> $S
timeout 90 python3 bench/torch_yardstick.py resnet18 --amp --channels-last --graphs --batch 64 > $L/yard.log 2>&1; grep "ms/step" $L/yard.log | head -2 >> $S; snap
for b in new base; do d=.; [ $b = base ] && d=/tmp/base; [ $(( $(date +%s) - t0 )) -gt 500 ] && break
  for s in 5 6; do ( cd $d && timeout 40 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=none precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 overwrite=1 log=$L/ncu_$s > $L/ncu_$s.csv 2> $L/ncu_$s.err ); done
  python3 bench/kernel_breakdown.py $L/ncu_5.csv $L/ncu_6.csv > $L/breakdown_$b.txt 2>&1; rm -f $L/ncu_*.csv
  echo "breakdown $b: $(head -1 $L/breakdown_$b.txt)" >> $S; grep -E "nhwc|stats_of|bwd_sums|stats_final" $L/breakdown_$b.txt | head -8 >> $S; grep -A8 "by category" $L/breakdown_$b.txt >> $S; snap
done
echo "end $(el)" >> $S; snap
