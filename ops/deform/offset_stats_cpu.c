/* CPU twin of offset_stats.h. */
#include <math.h>
#include <string.h>

#include "ops/deform/offset_stats.h"

static inline int bin_of(float a) {
    float b = a * DT_OFFHIST_PER_PX;
    return b < (float)(DT_OFFHIST_BINS - 1) ? (int)b : DT_OFFHIST_BINS - 1;
}

static inline uint64_t fixed16(float a) { return (uint64_t)(fminf(a, 1048576.0f) * 65536.0f); }

void dt_offset_hist_cpu(int64_t N, int64_t GK, int64_t P, const float *off, int64_t s_img, int64_t s_pos, int64_t s_ch,
                        float halo, uint64_t *out) {
    memset(out, 0, DT_OFFHIST_LEN * sizeof(uint64_t));
    uint32_t maxbits = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < GK; j++) {
            const float *dy = off + n * s_img + 2 * j * s_ch, *dx = dy + s_ch;
            for (int64_t p = 0; p < P; p++) {
                float ay = fabsf(dy[p * s_pos]), ax = fabsf(dx[p * s_pos]);
                if (isnan(ay) || isnan(ax)) { out[DT_OFFHIST_OUT]++; maxbits = 0x7fc00000u; continue; }
                out[DT_OFFHIST_DY + bin_of(ay)]++;
                out[DT_OFFHIST_DX + bin_of(ax)]++;
                out[DT_OFFHIST_SUM] += fixed16(ay);
                out[DT_OFFHIST_SUM + 1] += fixed16(ax);
                out[DT_OFFHIST_OUT] += ay > halo || ax > halo;
                float m = fmaxf(ay, ax);
                uint32_t bits;
                memcpy(&bits, &m, 4);
                if (bits > maxbits && maxbits != 0x7fc00000u) maxbits = bits;
            }
        }
    out[DT_OFFHIST_MAX] = maxbits;
}
