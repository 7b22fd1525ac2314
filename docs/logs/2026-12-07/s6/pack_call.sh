#!/usr/bin/env bash
# Session 6 of 2026-12-07 (no device lent), the next session's first call: the one-pass offset
# pack and the pitched offsets (d70a7e4, 7f39c46, b16fb01) against the tree before them (f2d2d71,
# in .gpubin/base.tar: `git archive f2d2d71 > .gpubin/base.tar`). Runs the GPU tests the change
# touches (the pack bit for bit its twin, the C API's parity over every format path - the sliced
# ones included - the deft op and layer), the compiled op in both trees, the drop-in's host time
# and its bf16 / fp32 steps at batch 64 (eager and graphed) in both trees, interleaved.
# Carry [".stb", ".gpubin"]. ~9 min.
set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee $S
mkdir -p /tmp/base && tar xf .gpubin/base.tar -C /tmp/base && cp -r .stb /tmp/base/
( make -j8 STB_INCLUDE=$PWD/.stb all > $L/build_new.log 2>&1 && make STB_INCLUDE=$PWD/.stb torch-op >> $L/build_new.log 2>&1
  echo "new build rc $? $(el)" >> $S ) &
( cd /tmp/base && make -j8 STB_INCLUDE=$PWD/.stb build/libdeftc.so > $L/build_base.log 2>&1 && make STB_INCLUDE=$PWD/.stb torch-op >> $L/build_base.log 2>&1
  echo "base build rc $? $(el)" >> $S ) &
wait; grep -m3 -E " error|error:" $L/build_new.log $L/build_base.log >> $S; snap
timeout 150 build/test --gpu gpu_deft_om_pack_bitwise_the_cpu_twin '*deform_api*' gpu_deft_kernels_match_cpu_twins \
  gpu_cases_deform_deft_parity gpu_cases_deform_parity gpu_deform_op_deterministic_is_bitwise > $L/test_gpu.log 2>&1
echo "GPU tests rc $?: $(tail -1 $L/test_gpu.log) $(el)" >> $S; grep -E "^FAIL" -B3 $L/test_gpu.log | head -12 >> $S; snap
DEFTC_TORCH_OP=compiled timeout 150 python3 tests/api/test_deftc_torch.py build/libdeftc.so > $L/t_deftc_torch.txt 2>&1
echo "test_deftc_torch (compiled): rc $? $(tail -1 $L/t_deftc_torch.txt) $(el)" >> $S; grep -E '^FAIL' $L/t_deftc_torch.txt | head -5 >> $S; snap
for b in base new; do d=.; [ $b = base ] && d=/tmp/base
  ( cd $d && DEFTC_TORCH_OP=compiled timeout 40 python3 bench/torch_op_host_time.py --device cuda > $L/host_$b.txt 2>&1 )
  echo "host $b: $(tail -6 $L/host_$b.txt | tr '\n' ' ' | tr -s ' ')" >> $S; done; snap
for r in 1 2; do for b in base new; do d=.; [ $b = base ] && d=/tmp/base; [ $(( $(date +%s) - t0 )) -gt 470 ] && break
  ( cd $d && DEFTC_TORCH_OP=compiled timeout 60 python3 bench/torch_deftc.py --batches 64 --amp --channels-last --graphs > $L/amp_${b}_r$r.txt 2>&1 )
  echo "amp b64 $b r$r: $(grep -E 'deftc|plain' $L/amp_${b}_r$r.txt | tr -s ' ' | tr '\n' '|')" >> $S; snap
done; done
for b in base new; do d=.; [ $b = base ] && d=/tmp/base; [ $(( $(date +%s) - t0 )) -gt 540 ] && break
  ( cd $d && DEFTC_TORCH_OP=compiled timeout 50 python3 bench/torch_deftc.py --batches 64 --channels-last > $L/fp32_$b.txt 2>&1 )
  echo "fp32 b64 $b: $(grep -E 'deftc|torchvision|plain' $L/fp32_$b.txt | tr -s ' ' | tr '\n' '|')" >> $S; snap
done
echo "end $(el)" >> $S; snap
