set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt; t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name --format=csv,noheader > $S
mkdir -p /tmp/base && tar xf .gpubin/base.tar -C /tmp/base && cp -r .stb /tmp/base/.stb
( make -j10 STB_INCLUDE=$PWD/.stb build/train build/test > $L/build_head.log 2>&1; echo "head build rc $?" >> $S ) &
( cd /tmp/base && make -j6 STB_INCLUDE=$PWD/.stb build/train > $L/build_base.log 2>&1; echo "base build rc $?" >> $S ) &
wait; echo "build $(el)" >> $S; snap
timeout 90 build/test --gpu gpu_cases_batchnorm_parity gpu_batchnorm_bitwise_repeatable gpu_cases_conv_bn_parity 'gpu_train_graph_plain_bf16*' > $L/test_bn.log 2>&1
echo "tests rc $? : $(tail -1 $L/test_bn.log)" >> $S; grep -E "^FAIL" $L/test_bn.log | head >> $S; snap
for r in 1 2; do [ $r = 2 ] && [ $(( $(date +%s) - t0 )) -gt 300 ] && break; for c in "plain 64 none" "plain 256 none" "deft 64 all"; do set -- $c
  for b in head base; do d=.; [ $b = base ] && d=/tmp/base
    ( cd $d && timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 progress=0 precision=bf16 deform=$3 batch=$2 steps=30 log=$L/${b}_$1_b$2_r$r > $L/${b}_$1_b$2_r$r.out 2>&1 )
    echo "${b}_$1_b$2_r$r: $(awk '/^median_step_ms/{print $2}' $L/${b}_$1_b$2_r${r}_summary.txt) ms" >> $S
  done; done; snap; done; echo "end $(el)" >> $S; snap
