#!/usr/bin/env bash
# session 4 call 2: diagnoses - the compiled op's crash at a raised error (a native backtrace; the
# toolchain; what libdeftc.so exports), gpu_loader_gpu_decode_matches_cpu alone / under load / synced
# (its new per-image diagnostics), and the graph flake's bisection (the load)
set -uo pipefail
S=$OUT/summary.txt
git log --oneline -1 | tee -a $S
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > /tmp/build.log 2>&1; echo "build rc $? at $SECONDS s" | tee -a $S; grep -E " error|error:" /tmp/build.log | head -5 | tee -a $S
( make torch-op STB_INCLUDE=$PWD/.stb > /tmp/t.log 2>&1; echo "torch-op rc $? at $SECONDS s" >> /tmp/par.txt; head -3 /tmp/t.log > $OUT/torch_op_build.txt ) &
# decode alone, 3 seeds
for s in 1 2 3; do timeout 60 build/test --gpu -v --seed $s gpu_loader_gpu_decode_matches_cpu > /tmp/dec_alone_$s.txt 2>&1; echo "decode alone seed $s: $(tail -1 /tmp/dec_alone_$s.txt) | $(grep -E 'mean|images are off|FAIL' /tmp/dec_alone_$s.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S; done
echo "[$SECONDS s] decode alone" | tee -a $S
# the graph flake bisection in the background = the load for the decode runs below
( OUT=$OUT/bisect timeout 240 bash bench/gpu_run.sh graph_bisect > /tmp/bisect.txt 2>&1; echo "bisect done at $SECONDS s" >> /tmp/par.txt ) &
sleep 8
for s in 1 2 3 4; do timeout 60 build/test --gpu -v --seed $s gpu_loader_gpu_decode_matches_cpu > /tmp/dec_load_$s.txt 2>&1; echo "decode under load seed $s: $(tail -1 /tmp/dec_load_$s.txt) | $(grep -E 'mean|images are off|FAIL' /tmp/dec_load_$s.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S; done
for s in 1 2; do DT_DEBUG_SYNC=1 timeout 60 build/test --gpu -v --seed $s gpu_loader_gpu_decode_matches_cpu > /tmp/dec_sync_$s.txt 2>&1; echo "decode under load, DT_DEBUG_SYNC=1, seed $s: $(tail -1 /tmp/dec_sync_$s.txt) | $(grep -E 'mean|images are off|FAIL' /tmp/dec_sync_$s.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $S; done
timeout 100 build/test --gpu -v 'gpu_loader*' > /tmp/dec_family.txt 2>&1; echo "gpu_loader* under load: $(tail -1 /tmp/dec_family.txt)" | tee -a $S; grep -E "FAIL|images are off|mean diff" /tmp/dec_family.txt | head -8 | tee -a $S
cp /tmp/dec_*.txt $OUT/ 2>/dev/null
echo "[$SECONDS s] decode" | tee -a $S
wait
cat /tmp/par.txt | tee -a $S
# the compiled op's crash
g++ --version | head -1 | tee -a $S; python3 --version | tee -a $S
echo "libdeftc.so exports $(nm -D --defined-only build/libdeftc.so | wc -l) symbols, not dt_: $(nm -D --defined-only build/libdeftc.so | awk '{print $3}' | grep -v '^dt_' | wc -l)" | tee -a $S
nm -D --defined-only build/libdeftc.so | awk '{print $3}' | grep -v '^dt_' | c++filt | head -60 > $OUT/libdeftc_exports.txt
nm -D --defined-only build/deftc_torch_op.so | awk '{print $3}' | c++filt | head -60 > $OUT/op_exports.txt
ldd build/deftc_torch_op.so > $OUT/op_ldd.txt 2>&1
gcc -shared -fPIC -O1 -o /tmp/segv.so .gpubin/segv.c -ldl
DEFTC_TORCH_OP=compiled LD_PRELOAD=/tmp/segv.so timeout 60 python3 .gpubin/raise.py > $OUT/raise_compiled.txt 2>&1; echo "raise.py compiled rc $?" | tee -a $S
head -40 $OUT/raise_compiled.txt | tee -a $S
grep -oE '#[0-9]+ [^ ]*(deftc_torch_op|libdeftc)\.so \+0x[0-9a-f]+' $OUT/raise_compiled.txt | while read -r n lib off; do echo "$n $(basename $lib) $off: $(addr2line -f -C -e $lib $off | tr '\n' ' ')"; done | tee -a $S
DEFTC_TORCH_OP=ctypes timeout 60 python3 .gpubin/raise.py > $OUT/raise_ctypes.txt 2>&1; echo "raise.py ctypes rc $?: $(tail -1 $OUT/raise_ctypes.txt)" | tee -a $S
echo "[$SECONDS s] done" | tee -a $S
