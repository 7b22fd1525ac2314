/* dt_fastdiv.h: division of 32-bit indices by a divisor fixed at launch, with a multiply and
 * a shift instead of the ~20-instruction integer division (Granlund & Montgomery, "Division
 * by invariant integers using multiplication", 1994). The index kernels decompose a flat
 * index into (position, tap, group, vector) with several such divisions per element.
 *
 * For a divisor 1 <= d <= 2^31 let l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1; then for
 * every n < 2^31:  n / d = (umulhi(n, m) + n) >> l   (umulhi(n, m) <= n, so no overflow).
 * Shared by host and device so the CPU tests check the same code the kernels run. */
#ifndef DT_FASTDIV_H
#define DT_FASTDIV_H

#include <stdint.h>

#ifdef __CUDACC__
#define DT_FD_HD __host__ __device__ __forceinline__
#else
#define DT_FD_HD static inline
#endif

typedef struct {
    uint32_t d; /* the divisor */
    uint32_t m; /* magic multiplier */
    uint32_t l; /* shift */
} dt_fastdiv;

DT_FD_HD dt_fastdiv dt_fastdiv_make(uint32_t d) {
    dt_fastdiv f;
    uint32_t l = 0;
    while (l < 31 && ((uint64_t)1 << l) < d) l++; /* d <= 2^31: indices are below 2^31 */
    f.d = d;
    f.l = l;
    f.m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << l) - d)) / d + 1);
    return f;
}

DT_FD_HD uint32_t dt_fastdiv_umulhi(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}

/* n / d for 0 <= n < 2^31. */
DT_FD_HD uint32_t dt_fastdiv_div(uint32_t n, dt_fastdiv f) { return (dt_fastdiv_umulhi(n, f.m) + n) >> f.l; }

/* q = n / d, returns n % d. */
DT_FD_HD uint32_t dt_fastdiv_divmod(uint32_t n, dt_fastdiv f, uint32_t *q) {
    uint32_t t = dt_fastdiv_div(n, f);
    *q = t;
    return n - t * f.d;
}

#endif
