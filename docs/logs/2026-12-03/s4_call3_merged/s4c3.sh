#!/usr/bin/env bash
# session 4 call 3: the merged tree - correctness (the GPU suite whole, the drop-in's suites on both
# paths, the compiled op's raises, libdeftc.so's exports, the GPU decode under load x8), then the
# gather without the index (lab + steps dx=gather/scan), the engine sampler's lab, the drop-in's
# step, PyTorch's yardstick, a step's kernel breakdown, the op's host time. Logs: summary.txt +
# logs.tgz (the device returns 8 files at most)
set -uo pipefail
S=$OUT/summary.txt; L=/tmp/logs; mkdir -p $L
git log --oneline -1 | tee -a $S
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 all > $L/build.log 2>&1; echo "build rc $? at $SECONDS s" | tee -a $S; grep -E " error|error:" $L/build.log | head -5 | tee -a $S
python3 tests/check_tree.py build 2>&1 | tail -2 | tee -a $S
( make torch-op STB_INCLUDE=$PWD/.stb > $L/torch_op.log 2>&1; echo "torch-op rc $? at $SECONDS s" >> $L/par.txt
  DEFTC_TORCH_OP=compiled timeout 60 python3 .gpubin/raise.py > $L/raise_compiled.txt 2>&1; echo "raise.py compiled rc $?: $(grep -c raised $L/raise_compiled.txt) raised, $(tail -1 $L/raise_compiled.txt)" >> $L/par.txt
  for p in compiled ctypes; do for t in test_deftc_torch test_deftc_torch_ops; do DEFTC_TORCH_OP=$p timeout 240 python3 -X faulthandler tests/api/$t.py build/libdeftc.so > $L/${t}_$p.txt 2>&1
    echo "$t ($p): rc $? $(tail -1 $L/${t}_$p.txt)" >> $L/par.txt; grep -E '^FAIL' $L/${t}_$p.txt | head -6 >> $L/par.txt; done; done
  echo "dropin done at $SECONDS s" >> $L/par.txt ) &
( sleep 30; for s in 1 2 3 4 5 6 7 8; do timeout 60 build/test --gpu -v --seed $s gpu_loader_gpu_decode_matches_cpu > $L/dec_$s.txt 2>&1
    echo "decode under load $s: $(tail -1 $L/dec_$s.txt) $(grep -E 'images are off' $L/dec_$s.txt | head -1 | cut -c1-200)" >> $L/par.txt; done ) &
timeout 330 build/test --gpu > $L/test_gpu.log 2>&1; echo "suite rc $? at $SECONDS s" | tee -a $S
grep -Ev '^ok ' $L/test_gpu.log | grep -v "^    point" | tail -25 | tee -a $S
wait; cat $L/par.txt | tee -a $S
echo "[$SECONDS s] correctness" | tee -a $S
timeout 120 build/deform_lab --what gather --reps 20 > $L/lab_gather.txt 2>&1; echo "lab gather rc $?" | tee -a $S; grep -E "^validate.*(FAIL|differ)|mismatch" $L/lab_gather.txt | head -5 | tee -a $S
grep -A40 "lab timings" $L/lab_gather.txt | head -40 | tee -a $S
timeout 60 build/deform_lab --what sampler --reps 20 > $L/lab_sampler.txt 2>&1; echo "lab sampler rc $?" | tee -a $S; grep -A6 "lab timings" $L/lab_sampler.txt | tee -a $S
echo "[$SECONDS s] labs" | tee -a $S
st() { n=$1; shift; timeout 100 build/train configs/synthetic_timing.cfg overwrite=1 steps=60 progress=0 precision=bf16 log=/tmp/$n "$@" > /tmp/$n.out 2>&1
  echo "$n: $(awk '/^median_step_ms/{print $2}' /tmp/${n}_summary.txt) ms peak $(awk '/^peak_mem_gib/{print $2}' /tmp/${n}_summary.txt) $(grep -m1 -iE 'error' /tmp/$n.out)" | tee -a $S; }
for v in gather scan gather scan; do st deft_b64_$v deform=all batch=64 dx=$v; done
for v in gather scan; do st deft_b256_$v deform=all batch=256 dx=$v; done
st plain_b64 batch=64
echo "[$SECONDS s] steps" | tee -a $S
[ $SECONDS -lt 470 ] && { timeout 60 python3 bench/torch_yardstick.py resnet18 --amp --channels-last --graphs --batch 64 > $L/yard_64.txt 2>&1; echo "torch b64: $(tail -2 $L/yard_64.txt | tr '\n' ' ')" | tee -a $S; }
for DX in gather scan; do [ $SECONDS -lt 500 ] || break
  for s in 2 3; do timeout 40 ncu --clock-control none --csv --metrics gpu__time_duration.sum --print-units base build/train configs/synthetic_timing.cfg deform=all precision=bf16 batch=64 dx=$DX steps=$s timing_warmup=0 log_every=1 progress=0 log=/tmp/ncu$s overwrite=1 > /tmp/ncu_$s.csv 2>/tmp/ncu_$s.err; done
  python3 bench/kernel_breakdown.py /tmp/ncu_2.csv /tmp/ncu_3.csv > $L/breakdown_deft_$DX.txt 2>&1; echo "breakdown dx=$DX: $(head -1 $L/breakdown_deft_$DX.txt)" | tee -a $S
  grep -E "k_gather|Radix|k_index|k_offset_bound" $L/breakdown_deft_$DX.txt | head -8 | tee -a $S; done
echo "[$SECONDS s] ncu" | tee -a $S
[ $SECONDS -lt 540 ] && { DEFTC_TORCH_OP=compiled timeout 40 python3 bench/torch_op_host_time.py --device cuda > $L/host_compiled.txt 2>&1; echo "host (compiled): $(tail -6 $L/host_compiled.txt | tr '\n' ' ' | tr -s ' ')" | tee -a $S; }
echo "[$SECONDS s] done" | tee -a $S
cp $L/test_gpu.log $OUT/ 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null
