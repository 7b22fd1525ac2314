/* depthwise.h: the depthwise convolution family (groups = C, channel multiplier M = Cout / C
 * >= 1) in its three directions, 1-D (H = 1) and 2-D, any kernel, stride, padding and
 * dilation - a direct stencil per channel, no column matrix and no GEMM (docs/conv.md
 * "Depthwise"). dt_conv2d_grouped runs a groups = C problem here (the plan's `depthwise`).
 *
 * Shapes (logical; p: the conv problem with groups == C, Cout == C * M):
 *   x, dx  [N, C, H, W]          stored NCHW (f32) or NHWC (f32, bf16), the activation dtype
 *   y, dy  [N, Cout, Ho, Wo]     the same dtype and layout; output channel co = c * M + m
 *                                reads input channel c only
 *   w      [Cout, 1, kh, kw]     the activation dtype (a bf16 model's working copy); NCHW and
 *                                NHWC ([Cout, kh, kw, 1]) store it alike: [Cout][kh][kw]
 *   dw     [Cout][kh][kw] fp32   (a bf16 model's master gradient)
 *   bias   [Cout] fp32 or NULL
 *   fwd:   y  = round(sum over taps (ky, kx) of x * w, + bias)
 *   dgrad: dx = round(beta * dx + sum over m, ky, kx of the dy that read the element times w)
 *   wgrad: dw = beta * dw + sum over (n, oy, ox) of dy * x         (beta 0: the old value is not read)
 * Summation: fwd and dgrad sum in fp32 with fused multiply-adds in the order written above
 * (taps in row-major order, a padded or unaligned tap adding a zero product), add the bias
 * last and round once on the store: the CUDA kernels and the CPU twins give the same bits.
 * wgrad: the CPU twin sums each weight in double in (n, oy, ox) order; the CUDA kernel in fp32
 * tiles, per-block partials in a fixed order, then a fixed-order double sum of the partials -
 * bitwise reproducible run to run on one GPU, within the fp32 parity bound of the twin. */
#ifndef DT_K_DEPTHWISE_H
#define DT_K_DEPTHWISE_H

#include <stdint.h>

#include "core/dt_dtype.h"
#include "ops/conv/conv_engine.h"
#include "ops/conv/conv_geom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when p is a depthwise problem this family computes: groups == C, Cout a multiple of C. */
int dt_dw_problem(const dt_conv_problem *p);

/* The CUDA kernels' tile (docs/conv.md "Depthwise"). Positions of one axis fall into q
 * residue classes, q = d / gcd(d, s) for fwd and wgrad (outputs) and q = d for dgrad (inputs):
 * the outputs of a class, q apart, read inputs d apart (m = s / gcd(d, s) of them an output
 * step), and two classes read disjoint inputs. A block owns R consecutive classes x T positions
 * of each (RH*TH rows x RW*TW columns) of one image and CB channels, and stages in shared memory
 * (fp32) each element of its input footprint once:
 *   fwd    x  R*((T-1)*m + k) a axis, x CB channels
 *   dgrad  dy R*(T + k - 1) a axis of the virtual stride-1 grid (dy at u/s where s divides
 *          u, zero elsewhere), x CB*M
 *   wgrad  the fwd's x footprint and the tile's dy, RH*TH x RW*TW x CB*M
 * and kh*kw*M*CB floats more: the weights of its channels (fwd, dgrad) or its sums (wgrad).
 * The footprint does not grow with the dilation: a dilated window is a unit-step walk of a
 * class staged d apart. */
typedef struct {
    int TH, TW, RH, RW, CB;
    int qh, qw, mh, mw; /* classes and staged step per position step, rows and columns */
    int IH, IW;         /* one class's staged footprint, rows and columns (x R: the tile's) */
    int64_t nth, ntw;   /* tiles per class, rows and columns */
    int64_t ngh, ngw;   /* groups of R classes, rows and columns */
    size_t smem;        /* bytes of shared memory a block */
} dt_dw_tile;

/* The tile of pass `pass` (fwd is DT_CONV_FPROP) for p within `smem_limit` bytes of shared
 * memory: 1 and *t, or 0 when no tile fits (a huge kernel: kh*kw*M*8 floats past the limit) - the plan then keeps the
 * column path. A pure function of the problem. */
int dt_dw_tile_of(const dt_conv_problem *p, dt_conv_pass pass, size_t smem_limit, dt_dw_tile *t);
/* The CUDA kernels' shared-memory limit a block (the default without opting in). */
#define DT_DW_SMEM_LIMIT ((size_t)48 * 1024)
/* 1 when the CUDA kernels take every pass of p (each fits a tile); the CPU twins take any. */
int dt_dw_gpu_supported(const dt_conv_problem *p);

/* The CUDA kernels in use for NHWC problems: DT_DW_KERNEL_TILE (the tiles above), DT_DW_KERNEL_RB
 * (ops/conv/depthwise_rb.cuh: register-blocked runs of one residue class, channel multiplier 1
 * and C even; a problem it does not take keeps the tiles) or DT_DW_KERNEL_AUTO, the default: the
 * register-blocked kernels for bf16, the tiles for f32. Why: on the H200 (docs/PERF.md section 25,
 * bench/lab/depthwise_lab.cu) the register-blocked bf16 kernels were faster on 310 of the lab's
 * 318 (shape, pass) points, 0.91x-9.06x the tiles' time ratio the other way round, the 8 others
 * the k = 1, C = 128 wgrad at 0.91-0.92x; their f32 times are not measured yet. The environment's
 * DT_DW_KERNEL (0 tiles, 1 register-blocked, 2 auto) sets it at the first call; dt_dw_set_kernel
 * overrides it for the process. Both kernels give the same fwd / dgrad bits (the twins' order)
 * and reproducible wgrad. */
enum { DT_DW_KERNEL_TILE = 0, DT_DW_KERNEL_RB = 1, DT_DW_KERNEL_AUTO = 2 };
int dt_dw_kernel(void);
void dt_dw_set_kernel(int kernel);

/* The kernels, for each activation format (op tables: DT_ACT_FORMATS). */
#define DT_DECL_DW(fmt, sfx)                                                                                    \
    void dt_dw_fwd_##fmt##_##sfx(const dt_conv_problem *p, const void *x, const void *w, const float *bias,      \
                                 void *y);                                                                     \
    void dt_dw_dgrad_##fmt##_##sfx(const dt_conv_problem *p, const void *dy, const void *w, float beta, void *dx); \
    void dt_dw_wgrad_##fmt##_##sfx(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw);
#define DT_DECL_DW_FORMATS(sfx) DT_DECL_DW(f32_nchw, sfx) DT_DECL_DW(f32_nhwc, sfx) DT_DECL_DW(bf16_nhwc, sfx)
DT_DECL_DW_FORMATS(cpu)
DT_DECL_DW_FORMATS(cuda)

#ifdef __cplusplus
}
#endif
#endif
