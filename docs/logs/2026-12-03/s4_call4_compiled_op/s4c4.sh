#!/usr/bin/env bash
# session 4 call 4: the compiled op with the C++ runtime by soname (the crash at its first raise),
# the deft GPU tests after dx=scan went, the drop-in's step and host time
set -uo pipefail
S=$OUT/summary.txt; L=/tmp/logs; mkdir -p $L
git log --oneline -1 | tee -a $S
echo "g++ libstdc++.so: $(g++ -print-file-name=libstdc++.so) | gcc: $(gcc -print-file-name=libstdc++.so) | $(gcc --version | head -1)" | tee -a $S
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > $L/build.log 2>&1; echo "build rc $? at $SECONDS s" | tee -a $S; grep -E " error|error:" $L/build.log | head -5 | tee -a $S
( timeout 150 build/test --gpu 'gpu_deft*' 'gpu_cases_deform*' 'gpu_deform*' '*deform_api*' > $L/test_gpu.log 2>&1; echo "deft GPU tests rc $?: $(tail -1 $L/test_gpu.log)" >> $L/par.txt; grep -E "^FAIL" $L/test_gpu.log | head -5 >> $L/par.txt ) &
make torch-op STB_INCLUDE=$PWD/.stb > $L/torch_op.log 2>&1; echo "torch-op rc $? at $SECONDS s" | tee -a $S
python3 tests/check_tree.py build 2>&1 | tail -2 | tee -a $S
echo "op: $(ldd build/deftc_torch_op.so | grep stdc) | std:: defined in op: $(nm -D --defined-only build/deftc_torch_op.so | grep -c ' _ZNS') | libdeftc ldd: $(ldd build/libdeftc.so | grep stdc)" | tee -a $S
gcc -shared -fPIC -O1 -o /tmp/segv.so .gpubin/segv.c -ldl 2>/dev/null
DEFTC_TORCH_OP=compiled LD_PRELOAD=/tmp/segv.so timeout 60 python3 .gpubin/raise.py > $L/raise_compiled.txt 2>&1; echo "raise.py compiled rc $?: $(grep -c raised $L/raise_compiled.txt) raised" | tee -a $S
grep -m1 -A12 "native backtrace" $L/raise_compiled.txt | tee -a $S
for t in test_deftc_torch test_deftc_torch_ops; do DEFTC_TORCH_OP=compiled timeout 200 python3 -X faulthandler tests/api/$t.py build/libdeftc.so > $L/${t}_compiled.txt 2>&1
  echo "$t (compiled): rc $? $(tail -1 $L/${t}_compiled.txt)" | tee -a $S; grep -E '^FAIL' $L/${t}_compiled.txt | head -6 | tee -a $S; done
wait; cat $L/par.txt | tee -a $S
echo "[$SECONDS s] correctness" | tee -a $S
for p in compiled ctypes; do DEFTC_TORCH_OP=$p timeout 40 python3 bench/torch_op_host_time.py --device cuda > $L/host_$p.txt 2>&1; echo "host ($p): $(tail -6 $L/host_$p.txt | tr '\n' ' ' | tr -s ' ')" | tee -a $S; done
[ $SECONDS -lt 260 ] && { DEFTC_TORCH_OP=compiled timeout 90 python3 bench/torch_deftc.py --batches 64 --amp --channels-last --graphs > $L/torch_deftc.txt 2>&1; echo "torch_deftc rc $?"; grep -vE '^\s*$' $L/torch_deftc.txt | tail -12 | tee -a $S; }
echo "[$SECONDS s] done" | tee -a $S
tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null
