#pragma once
#include "emu_bf16.h"
static inline int dt_stream() { return 0; }
#define DT_CHECK_LAUNCH() ((void)0)
template <typename K, typename... A>
void emu_launch(dim3 grid, dim3 block, size_t smem, int, K kernel, A... args) {
    blockDim = block, gridDim = grid;
    const unsigned nt = block.x;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                std::vector<float> sm(smem / 4 + 1, NAN);
                std::barrier<> bar(nt);
                std::vector<std::thread> ts;
                for (unsigned t = 0; t < nt; t++)
                    ts.emplace_back([&, t] {
                        threadIdx = dim3(t), blockIdx = dim3(bx, by, bz), g_bar = &bar, g_smem = sm.data();
                        kernel(args...);
                        bar.arrive_and_drop();
                    });
                for (auto &th : ts) th.join();
            }
}
