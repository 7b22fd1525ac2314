#include "reduce.h"

/* Blocks of 4096 summed in double, then the block sums in order: the same result for any
 * thread count (this twin is single-threaded; the blocking mirrors the CUDA version). */
void dt_sum_cpu(int64_t n, const float *x, float alpha, float *out) {
    double total = 0.0;
    for (int64_t b = 0; b < n; b += 4096) {
        double s = 0.0;
        int64_t e = b + 4096 < n ? b + 4096 : n;
        for (int64_t i = b; i < e; i++) s += x[i];
        total += s;
    }
    out[0] = (float)(alpha * total);
}
