#!/usr/bin/env bash
# Session 2026-12-07 call 1: HEAD (maxpool byte taps, BN tunings + lab) vs bec6ea6, and the lab's
# winning BN tuning built into /tmp/win (the header's two tuning lines edited) and measured beside.
set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee $S
git log --oneline -1 >> $S 2>/dev/null
mkdir -p /tmp/base /tmp/win && tar xf .gpubin/base.tar -C /tmp/base && cp -r .stb /tmp/base/.stb
tar cf - --exclude=./build --exclude=./.gpubin . | tar xf - -C /tmp/win
( make -j10 STB_INCLUDE=$PWD/.stb all > $L/build_head.log 2>&1; echo "head build rc $?" >> $S ) &
( cd /tmp/base && make -j6 STB_INCLUDE=$PWD/.stb build/train > $L/build_base.log 2>&1; echo "base build rc $?" >> $S ) &
wait; echo "build $(el)" >> $S; grep -m3 -E "error" $L/build_head.log >> $S; snap
timeout 150 build/test --gpu gpu_cases_pool_parity 'gpu_maxpool_*' gpu_cases_conv_sm90_parity gpu_cases_conv_parity gpu_cases_batchnorm_parity gpu_batchnorm_bitwise_repeatable gpu_cases_conv_bn_parity 'gpu_conv_sm90_*' gpu_conv_bn_fused_matches_the_pair gpu_train_conv_sm90_follows_gemm 'gpu_train_graph_plain_bf16*' > $L/test_sel.log 2>&1
echo "tests rc $? : $(tail -1 $L/test_sel.log)" >> $S; grep -E "^FAIL" $L/test_sel.log | head -10 >> $S; echo "tests $(el)" >> $S; snap
timeout 150 build/bn_lab > $L/bn_lab.log 2>&1; echo "bn_lab rc $?" >> $S
grep -E "^#|^##|FAIL|valid" $L/bn_lab.log | head -20 >> $S
awk '/^## /{p=$2} /^[a-z0-9_]+ +[0-9F]/{print p, $1, $(NF-1), $NF}' $L/bn_lab.log >> $S
best() { awk -v P="$1" '/^## /{p=$2} p==P && /^[a-z0-9_]+ +[0-9]/ && !/FAIL/ && $1!="lib" {if (b=="" || $(NF-1)+0 < bv) {b=$1; bv=$(NF-1)+0}} END{print b}' $L/bn_lab.log; }
A=$(best apply); P=$(best partial); D=$(best dx); echo "winners: apply $A partial $P dx $D" >> $S
UA=$(echo $A | sed -E 's/u([0-9])_.*/\1/'); AG=$(echo $A | grep -q res && echo 0 || echo 8)
UP=$(echo $P | sed -E 's/u([0-9])_b([0-9])_s([0-9])/\1/'); MP=$(echo $P | sed -E 's/u([0-9])_b([0-9])_s([0-9])/\2/'); SP=$(echo $P | sed -E 's/u([0-9])_b([0-9])_s([0-9])/\3/')
UD=$(echo $D | sed -E 's/u([0-9])_b([0-9])_.*/\1/'); MD=$(echo $D | sed -E 's/u([0-9])_b([0-9])_.*/\2/'); DG=$(echo $D | grep -q res && echo 0 || echo 8)
echo "win tuning<$UA, $UP, $MP, $UD, $MD> shape {$AG, $DG, $SP}" >> $S
sed -i "s/typedef dt_bn_nhwc::tuning<1, 1, 0, 1, 3> dt_bn_nhwc_tuned;/typedef dt_bn_nhwc::tuning<$UA, $UP, $MP, $UD, $MD> dt_bn_nhwc_tuned;/; s/dt_bn_nhwc_tuned_shape = {8, 8, 4};/dt_bn_nhwc_tuned_shape = {$AG, $DG, $SP};/" /tmp/win/ops/batchnorm/batchnorm_nhwc.cuh
grep -n "dt_bn_nhwc_tuned" /tmp/win/ops/batchnorm/batchnorm_nhwc.cuh | tail -2 >> $S
( cd /tmp/win && make -j16 STB_INCLUDE=$PWD/.stb build/train build/test > $L/build_win.log 2>&1; echo "win build rc $?" >> $S )
( cd /tmp/win && timeout 100 build/test --gpu gpu_cases_batchnorm_parity gpu_batchnorm_bitwise_repeatable gpu_cases_conv_bn_parity 'gpu_train_graph_plain_bf16*' > $L/test_win.log 2>&1; echo "win tests rc $? : $(tail -1 $L/test_win.log)" >> $S )
echo "bn_lab + win $(el)" >> $S; snap
timeout 60 build/sm90_gemm_lab --shapes r18 --no-wgrad --only stem7x7_c8 > $L/stem_lab.log 2>&1; echo "stem lab rc $?" >> $S; grep -vE "^\s*$" $L/stem_lab.log | tail -12 >> $S; snap
for r in 1 2; do [ $r = 2 ] && [ $(( $(date +%s) - t0 )) -gt 400 ] && break; for c in "plain 64 none" "plain 256 none" "deft 64 all"; do set -- $c
  for b in head base win; do d=.; [ $b = base ] && d=/tmp/base; [ $b = win ] && d=/tmp/win
    ( cd $d && timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 progress=0 precision=bf16 deform=$3 batch=$2 steps=30 log=$L/${b}_$1_b$2_r$r > $L/${b}_$1_b$2_r$r.out 2>&1 )
    echo "${b}_$1_b$2_r$r: $(awk '/^median_step_ms/{print $2}' $L/${b}_$1_b$2_r${r}_summary.txt) ms $(grep -m1 -iE 'error|fail' $L/${b}_$1_b$2_r$r.out | cut -c1-150)" >> $S
  done; done; snap
  if [ $r = 1 ]; then timeout 120 python3 bench/torch_yardstick.py resnet18 --amp --channels-last --graphs --batch 64 > $L/yard_b64.log 2>&1; echo "yardstick rc $?" >> $S; grep -E "ms/step" $L/yard_b64.log >> $S; snap; fi
done; echo "steps $(el)" >> $S
for b in win; do d=/tmp/win; [ $(( $(date +%s) - t0 )) -gt 480 ] && break
  for s in 5 6; do ( cd $d && timeout 70 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=none precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 overwrite=1 log=$L/ncu_${b}_$s > $L/ncu_${b}_$s.csv 2> $L/ncu_${b}_$s.err ); done
  python3 bench/kernel_breakdown.py $L/ncu_${b}_5.csv $L/ncu_${b}_6.csv > $L/breakdown_$b.txt 2>&1
  echo "breakdown $b:" >> $S; head -1 $L/breakdown_$b.txt >> $S; grep -E "nhwc|maxpool|columns|stats_of|bwd_sums" $L/breakdown_$b.txt | head -12 >> $S
  rm -f $L/ncu_${b}_*.csv; snap
done; echo "ncu $(el)" >> $S
if [ $(( $(date +%s) - t0 )) -lt 470 ]; then d=/tmp/win
  for s in 3 4; do ( cd $d && timeout 60 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=all precision=bf16 batch=64 steps=$s timing_warmup=0 log_every=1 progress=0 overwrite=1 log=$L/ncud_$s > $L/ncud_$s.csv 2> $L/ncud_$s.err ); done
  python3 bench/kernel_breakdown.py $L/ncud_3.csv $L/ncud_4.csv > $L/breakdown_deft.txt 2>&1; rm -f $L/ncud_*.csv
  echo "breakdown deft:" >> $S; head -25 $L/breakdown_deft.txt >> $S; snap; echo "ncu deft $(el)" >> $S
fi
echo "end $(el)" >> $S; snap
