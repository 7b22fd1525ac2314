#!/usr/bin/env bash
# session 2 call 4: is gpu_train_graph_deft_bf16_matches_eager_bitwise flaky with the engine's offset conv, or before it too?
set -uo pipefail
S=$OUT/summary.txt
cp -r .stb .gpubin/base/ 2>/dev/null
(cd .gpubin/base && make -j6 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/test > /tmp/build_base.log 2>&1; echo "base rc $?" >> /tmp/builds.txt) &
make -j10 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/test > /tmp/build.log 2>&1; echo "new rc $?" >> /tmp/builds.txt
wait; cat /tmp/builds.txt | tee -a $S
F="'*deform*' '*deft*' 'gpu_offset_conv*' 'gpu_errors*'"
for rep in 1 2 3 4; do
 for v in new base; do b=$([ $v = new ] && echo build || echo .gpubin/base/build)
  [ $v = base ] && [ $rep = 4 ] && continue
  timeout 60 $b/test --gpu -v '*deform*' '*deft*' 'gpu_offset_conv*' 'gpu_errors*' > /tmp/t_${v}_$rep.log 2>&1
  echo "$v $rep: $(tail -1 /tmp/t_${v}_$rep.log) $(grep -E 'graph_deft_bf16: 12|FAIL' /tmp/t_${v}_$rep.log | tr '\n' ' ')" | tee -a $S
 done
done
echo "[$SECONDS s]" | tee -a $S
