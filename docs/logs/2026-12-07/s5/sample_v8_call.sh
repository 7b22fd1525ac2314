#!/usr/bin/env bash
# Session 5 of 2026-12-07, call 4: the bf16 sampling at 8 channels a vector (this tree) against 4
# (HEAD~1, .gpubin/base.tar): the deformable GPU tests, the steps interleaved (deft b64 two
# rounds, deft b256), the ncu breakdown of the deft b64 step in both trees.
set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee $S
mkdir -p /tmp/base && tar xf .gpubin/base.tar -C /tmp/base && cp -r .stb /tmp/base/
( make -j8 STB_INCLUDE=$PWD/.stb all > $L/build_new.log 2>&1; echo "new build rc $? $(el)" >> $S ) &
( cd /tmp/base && make -j8 STB_INCLUDE=$PWD/.stb build/train > $L/build_base.log 2>&1; echo "base build rc $? $(el)" >> $S ) &
wait; grep -m3 -E " error" $L/build_new.log >> $S; snap
timeout 240 build/test --gpu gpu_cases_deform_deft_parity gpu_cases_deform_parity gpu_deft_kernels_match_cpu_twins gpu_deft_matches_unfused_on_resnet_shapes gpu_deft_layer_deterministic_is_bitwise gpu_deform_op_deterministic_is_bitwise gpu_train_deft_keep_cols_changes_no_bit 'gpu_train_graph_deft*' > $L/test_deft.log 2>&1
echo "deft tests rc $? : $(tail -1 $L/test_deft.log) $(el)" >> $S; grep -E "^FAIL" $L/test_deft.log | head -5 >> $S; snap
for r in 1 2; do for c in "deft 64" "deft 256"; do set -- $c; [ $r = 2 ] && [ $2 = 256 ] && continue
  for b in base new; do d=.; [ $b = base ] && d=/tmp/base
    ( cd $d && timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 progress=0 precision=bf16 deform=all batch=$2 steps=30 log=$L/${b}_b$2_r$r > $L/${b}_b$2_r$r.out 2>&1 )
    echo "${b}_b$2_r$r: $(awk '/^median_step_ms/{print $2}' $L/${b}_b$2_r${r}_summary.txt) ms $(grep -m1 -iE 'error|fail' $L/${b}_b$2_r$r.out | cut -c1-150)" >> $S
  done; done; snap; done; echo "steps $(el)" >> $S
for b in new base; do d=.; [ $b = base ] && d=/tmp/base; [ $(( $(date +%s) - t0 )) -gt 480 ] && break
  for s in 5 6; do ( cd $d && timeout 45 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=all precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 overwrite=1 log=$L/ncu_$s > $L/ncu_$s.csv 2> $L/ncu_$s.err ); done
  python3 bench/kernel_breakdown.py $L/ncu_5.csv $L/ncu_6.csv > $L/breakdown_$b.txt 2>&1; rm -f $L/ncu_*.csv
  echo "breakdown $b: $(head -1 $L/breakdown_$b.txt)" >> $S; grep -E "k_sample|k_gather" $L/breakdown_$b.txt | head -6 >> $S; grep -A3 "by category" $L/breakdown_$b.txt >> $S; snap
done
echo "end $(el)" >> $S; snap
