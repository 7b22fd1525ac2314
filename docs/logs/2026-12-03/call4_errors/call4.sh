#!/usr/bin/env bash
# call 4: injection before the call; the errors twins and the four tests call 3's suite did not reach
set -uo pipefail
S=$OUT/summary.txt
make -j16 STB_INCLUDE=$PWD/.stb CUDA_ARCH=sm_90 build/test > /tmp/build.log 2>&1; echo "build rc $?" | tee -a $S; grep -E " error" /tmp/build.log | head | tee -a $S
timeout 150 build/test --gpu -v 'gpu_errors*' gpu_train_graph_recaptures_after_a_halo_refresh gpu_train_graph_uncapturable_step_runs_eagerly_with_a_warning gpu_xent_value_stability_invalid_label mlp_trains_on_gpu > $OUT/test_gpu.log 2>&1; echo "tests rc $?" | tee -a $S
grep -Ev '^ok ' $OUT/test_gpu.log | grep -v "^    point" | tail -40 | tee -a $S
