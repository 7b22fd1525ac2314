#!/usr/bin/env bash
# Session 3 of 2026-12-07, call 1: the batch-norm lab with its checks fixed (the partial pass
# compared like with like, dx's bound derived) and the partial pass's larger split caps; the
# lab's winners built into /tmp/win and measured beside HEAD, interleaved, two rounds.
set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee $S
mkdir -p /tmp/win && tar cf - --exclude=./build --exclude=./.gpubin . | tar xf - -C /tmp/win
make -j16 STB_INCLUDE=$PWD/.stb all > $L/build_head.log 2>&1; echo "head build rc $? $(el)" >> $S; grep -m3 -E "error" $L/build_head.log >> $S; snap
timeout 150 build/bn_lab > $L/bn_lab.log 2>&1; echo "bn_lab rc $? $(el)" >> $S
grep -E "^#|^##|FAIL|valid" $L/bn_lab.log | head -30 >> $S
awk '/^## /{p=$2} /^[a-z0-9_]+ +[0-9F]/{print p, $1, $(NF-1), $NF}' $L/bn_lab.log >> $S; snap
# the fastest valid variant of a pass by its step column (empty: none valid)
best() { awk -v P="$1" '/^## /{p=$2} p==P && /^[a-z0-9_]+ +[0-9]/ && !/FAIL/ && $1!="lib" {if (b=="" || $(NF-1)+0 < bv) {b=$1; bv=$(NF-1)+0}} END{print b}' $L/bn_lab.log; }
A=$(best apply); P=$(best partial); D=$(best dx); G=$(best groups); echo "winners: apply '$A' partial '$P' dx '$D' groups '$G'" >> $S
# today's tuning<4, 1, 0, 2, 0, 256, 1>, shape {0, 0, 4, 256}; a pass without a winner keeps it
UA=4; AG=0; UP=1; MP=0; SP=4; XP=256; UD=2; MD=0; DG=0; GT=256; GA=1
if [[ $A =~ ^u([0-9]+)_(g8|res)$ ]]; then UA=${BASH_REMATCH[1]}; [ ${BASH_REMATCH[2]} = res ] && AG=0 || AG=8; fi
if [[ $P =~ ^u([0-9]+)_b([0-9]+)_s([0-9]+)_m([0-9]+)$ ]]; then UP=${BASH_REMATCH[1]}; MP=${BASH_REMATCH[2]}; SP=${BASH_REMATCH[3]}; XP=${BASH_REMATCH[4]}; fi
if [[ $D =~ ^u([0-9]+)_b([0-9]+)_(g8|res)$ ]]; then UD=${BASH_REMATCH[1]}; MD=${BASH_REMATCH[2]}; [ ${BASH_REMATCH[3]} = res ] && DG=0 || DG=8; fi
if [[ $G =~ ^t([0-9]+)_a([0-9]+)$ ]]; then GT=${BASH_REMATCH[1]}; GA=${BASH_REMATCH[2]}; fi
echo "win tuning<$UA, $UP, $MP, $UD, $MD, $GT, $GA> shape {$AG, $DG, $SP, $XP}" >> $S
sed -i "s/typedef dt_bn_nhwc::tuning<4, 1, 0, 2, 0, 256, 1> dt_bn_nhwc_tuned;/typedef dt_bn_nhwc::tuning<$UA, $UP, $MP, $UD, $MD, $GT, $GA> dt_bn_nhwc_tuned;/; s/dt_bn_nhwc_tuned_shape = {0, 0, 4, 256};/dt_bn_nhwc_tuned_shape = {$AG, $DG, $SP, $XP};/" /tmp/win/ops/batchnorm/batchnorm_nhwc.cuh
grep -n "dt_bn_nhwc_tuned" /tmp/win/ops/batchnorm/batchnorm_nhwc.cuh | tail -2 >> $S
( cd /tmp/win && make -j16 STB_INCLUDE=$PWD/.stb build/train build/test > $L/build_win.log 2>&1; echo "win build rc $? $(el)" >> $S )
( cd /tmp/win && timeout 120 build/test --gpu gpu_cases_batchnorm_parity gpu_batchnorm_bitwise_repeatable gpu_cases_conv_bn_parity gpu_conv_bn_fused_matches_the_pair 'gpu_train_graph_plain_bf16*' > $L/test_win.log 2>&1; echo "win tests rc $? : $(tail -1 $L/test_win.log)" >> $S; grep -E "^FAIL" $L/test_win.log | head -5 >> $S )
echo "win $(el)" >> $S; snap
for r in 1 2; do [ $r = 2 ] && [ $(( $(date +%s) - t0 )) -gt 420 ] && break; for c in "plain 64 none" "plain 256 none" "deft 64 all"; do set -- $c
  for b in head win; do d=.; [ $b = win ] && d=/tmp/win
    ( cd $d && timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 progress=0 precision=bf16 deform=$3 batch=$2 steps=30 log=$L/${b}_$1_b$2_r$r > $L/${b}_$1_b$2_r$r.out 2>&1 )
    echo "${b}_$1_b$2_r$r: $(awk '/^median_step_ms/{print $2}' $L/${b}_$1_b$2_r${r}_summary.txt) ms $(grep -m1 -iE 'error|fail' $L/${b}_$1_b$2_r$r.out | cut -c1-150)" >> $S
  done; done; snap
done; echo "steps $(el)" >> $S
if [ $(( $(date +%s) - t0 )) -lt 500 ]; then
  for s in 5 6; do ( cd /tmp/win && timeout 40 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=none precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 overwrite=1 log=$L/ncu_$s > $L/ncu_$s.csv 2> $L/ncu_$s.err ); done
  python3 bench/kernel_breakdown.py $L/ncu_5.csv $L/ncu_6.csv > $L/breakdown_win.txt 2>&1; rm -f $L/ncu_*.csv
  echo "breakdown win:" >> $S; head -1 $L/breakdown_win.txt >> $S; grep -E "nhwc|stats_of|bwd_sums" $L/breakdown_win.txt | head -10; grep -A12 "by category" $L/breakdown_win.txt >> $S
fi
echo "end $(el)" >> $S; snap
