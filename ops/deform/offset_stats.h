/* offset_stats.h: the raw counts behind the offset statistics of a deformable layer.
 * The offsets are a strided view: component c (0 dy, 1 dx) of pair j of image n at position p
 * is off[n*s_img + p*s_pos + (2j + c)*s_ch] - an NCHW offset tensor [N, 2GK, Ho, Wo] has
 * (s_img, s_pos, s_ch) = (2GK*P, 1, P), the deft mode's om [N*P, OCS] (P*OCS, OCS, 1).
 * Histograms of |dy| and |dx| in bins of 1/64 px up to 64 px (bin 4096 = anything larger),
 * sums of |dy| and |dx| in fixed point (2^-16 px), the largest |component|, and the number of
 * samples with |dy| > halo or |dx| > halo. All integer arithmetic, so the counts are exact
 * and identical on the CPU and the GPU. */
#ifndef DT_K_OFFSET_STATS_H
#define DT_K_OFFSET_STATS_H

#include <stdint.h>

#define DT_OFFHIST_BINS 4097
#define DT_OFFHIST_PER_PX 64
/* Layout of the uint64 result array. */
#define DT_OFFHIST_DY 0
#define DT_OFFHIST_DX DT_OFFHIST_BINS
#define DT_OFFHIST_SUM (2 * DT_OFFHIST_BINS)   /* [sum|dy|, sum|dx|] * 2^16 */
#define DT_OFFHIST_OUT (2 * DT_OFFHIST_BINS + 2)
#define DT_OFFHIST_MAX (2 * DT_OFFHIST_BINS + 3) /* float bits of max |component| */
#define DT_OFFHIST_LEN (2 * DT_OFFHIST_BINS + 4)

#ifdef __cplusplus
extern "C" {
#endif

/* out: DT_OFFHIST_LEN uint64 (zeroed by the call; device memory for _cuda). */
#define DT_DECL_OFFHIST(sfx)                                                                                 \
    void dt_offset_hist_##sfx(int64_t N, int64_t GK, int64_t P, const float *off, int64_t s_img, int64_t s_pos, \
                              int64_t s_ch, float halo, uint64_t *out);
DT_DECL_OFFHIST(cpu)
DT_DECL_OFFHIST(cuda)

#ifdef __cplusplus
}
#endif
#endif
