/* CPU twin of reduce.h: blocks of 4096 summed in double, then the block sums in order - the
 * same result for any thread count (this twin is single-threaded). The order differs from the
 * CUDA version's, so the two agree to rounding. */
#include "core/dt_dtype.h"
#include "ops/pointwise/reduce.h"

static void sum(dt_dtype t, int64_t n, const void *x, float alpha, float *out) {
    double total = 0.0;
    for (int64_t b = 0; b < n; b += 4096) {
        double s = 0.0;
        int64_t e = b + 4096 < n ? b + 4096 : n;
        for (int64_t i = b; i < e; i++) s += dt_elem_ld(x, t, i);
        total += s;
    }
    out[0] = (float)(alpha * total);
}

void dt_sum_f32_cpu(int64_t n, const void *x, float alpha, float *out, void *ws) {
    (void)ws;
    sum(DT_F32, n, x, alpha, out);
}
void dt_sum_bf16_cpu(int64_t n, const void *x, float alpha, float *out, void *ws) {
    (void)ws;
    sum(DT_BF16, n, x, alpha, out);
}
