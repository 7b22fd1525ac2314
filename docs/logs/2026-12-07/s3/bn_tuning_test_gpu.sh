set -uo pipefail
L=/tmp/logs; mkdir -p $L; S=$L/summary.txt; t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
snap() { cp $S $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null; }
nvidia-smi --query-gpu=name --format=csv,noheader > $S; git log --oneline -1 >> $S 2>/dev/null
make -j16 STB_INCLUDE=$PWD/.stb all > $L/build.log 2>&1; echo "build rc $? $(el)" >> $S; snap
timeout $(( 380 - ($(date +%s) - t0) )) make STB_INCLUDE=$PWD/.stb test-gpu > $L/test_gpu.log 2>&1; echo "test-gpu rc $? $(el)" >> $S; grep -E "^FAIL" $L/test_gpu.log | head >> $S; tail -4 $L/test_gpu.log >> $S; snap
