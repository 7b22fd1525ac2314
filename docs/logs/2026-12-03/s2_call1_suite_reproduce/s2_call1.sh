#!/usr/bin/env bash
# session 2 call 1: the GPU suite whole on 2f3a362 (6a6b933's poison fix) and make reproduce (the chart, issue 39)
set -uo pipefail
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee -a $S
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "build rc $? at $SECONDS s" | tee -a $S; grep -E " error" /tmp/build.log | head | tee -a $S
mkdir -p /tmp/repro
timeout 250 env BUILD=build OUTDIR=/tmp/repro bash bench/reproduce.sh > $OUT/reproduce.log 2>&1; echo "reproduce rc $? at $SECONDS s" | tee -a $S
cp /tmp/repro/reproduce.csv /tmp/repro/reproduce_chart.csv /tmp/repro/reproduce.png $OUT/ 2>/dev/null
tail -45 $OUT/reproduce.log >> $S
left=$((585 - SECONDS)); echo "suite budget $left s" | tee -a $S
timeout $left build/test --gpu > $OUT/test_gpu.log 2>&1; echo "tests rc $? at $SECONDS s" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | grep -v "^    point" | tail -30 | tee -a $S
grep -c '^ok ' $OUT/test_gpu.log | tee -a $S
