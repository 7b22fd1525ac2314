/* deform_plan.h: one description of a deformable convolution - the problem (sizes,
 * geometry, offset groups, mask), how it runs (mode and knobs) and the chunking - built from
 * sizes alone, so that the tape op, the layer, the C API, the benchmark and the kernels all
 * read the same struct.
 *
 * Semantics are torchvision.ops.deform_conv2d's (shapes logical; x, weight and y in the plan's
 * dtype and layout - dt_deform_plan_types - offsets and mask f32 NCHW):
 *   x [N, C, H, W], offset [N, 2*G*K, Ho, Wo] ((dy, dx) per tap k per offset group g, channel
 *   (g*K + k)*2 + {0, 1}), mask [N, G*K, Ho, Wo] or none, weight [Cout, C, kh, kw].
 *   K = kh*kw taps, G offset groups of Cg = C/G channels, P = Ho*Wo output positions.
 *
 * Modes:
 *   unfused  the three-operator NCHW baseline, as PyTorch runs it (deform_nchw.h)
 *   deft     the fast path, channels-last inside the op (deform_nhwc.h, offset_conv.h):
 *            the offset conv as an implicit GEMM, sampling with one bilinear weight
 *            computation per sample for all channels, the input gradient gathered through an
 *            inverse index (deterministic by construction) or scattered with float4 atomics.
 *            DefT's choices - offset conv fused into the sampling, tile + halo staging,
 *            block-ID swizzle - are knobs on top.
 *
 * Channels-last layouts of the deft path, for a chunk of nb images (Q = nb*P positions); xT,
 * colT and their gradients are of the plan's dtype (f32 or bf16), om and dom always f32:
 *   xT    [nb, H, W, C]          the input, channels last (an NHWC input is its own xT)
 *   om    [Q, OCS]               offset-conv output per position: columns 2*(g*K+k) = dy,
 *                                +1 = dx, 2*G*K + g*K + k = mask (after the sigmoid);
 *                                OC = 2GK (+GK with mask) columns, padded to OCS = 4*ceil(OC/4)
 *                                so that rows are float4-aligned
 *   colT  [Q, K*C]               colT[q][k*C + c] = mask * bilinear(x[i, :, :, c] at tap k)
 *   a "sample" is one (q, k, g): id s = (q*K + k)*G + g, the order of colT's rows segments */
#ifndef DT_K_DEFORM_PLAN_H
#define DT_K_DEFORM_PLAN_H

#include "core/dt_api.h"

#include <stddef.h>
#include <stdint.h>

#include "ops/conv/conv_geom.h"
#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef enum { DT_DEFORM_UNFUSED = 0, DT_DEFORM_DEFT = 1 } dt_deform_mode;

/* How the deft mode computes the input gradient. */
typedef enum {
    DT_DX_GATHER = 0, /* inverse index + gather: each dx element written once, deterministic */
    DT_DX_ATOMIC = 1  /* float4 atomics into a channels-last dx: not bitwise reproducible */
} dt_deform_dx;

/* The switchable choices of the deft mode (each one can be ablated). */
typedef struct {
    int dx;             /* dt_deform_dx */
    int fuse_offset;    /* offset conv and sampling in one kernel per output tile (DefT) */
    int stage;          /* sampling reads the tile's input footprint (+ halo) from shared memory */
    int swizzle;        /* tiles visited in 2-D bands so co-resident blocks share L2 (with fuse/stage) */
    int tile_h, tile_w; /* output positions per tile (fuse/stage); 0 x 0: automatic */
    int halo;           /* px staged around the footprint; -1: from the offset statistics */
    int halo_refresh;   /* calls between automatic halo updates */
    int deterministic;  /* bitwise-reproducible backward: deft uses the gather; unfused fixed point */
    int keep_cols;      /* deft on the tape: the forward's columns kept for the backward's weight
                           gradient (N*P*K*C elements a layer held from forward to backward) instead
                           of sampled again; the C API's separate calls always sample again */
} dt_deform_knobs;

int dt_deform_mode_parse(const char *s); /* -1 when unknown */
const char *dt_deform_dx_name(int dx);
int dt_deform_dx_parse(const char *s); /* -1 when unknown */
dt_deform_knobs dt_deform_knobs_default(void);
/* 0, or -1 with a message naming the bad knob. */
int dt_deform_knobs_validate(const dt_deform_knobs *k, char *err, int errlen);

typedef struct {
    /* the problem: x [N, C, H, W], the main weight [Cout, C, kh, kw], y [N, Cout, Ho, Wo]
     * (prob.groups is 1: the C API's weight groups travel in dt_deform_args.groups) */
    dt_conv_problem prob;
    int G, has_mask; /* offset groups (C % G == 0); 1 when a mask (DCNv2) modulates the taps */
    /* derived sizes */
    int64_t K, P, Cg, GK, KC, OC, OCS;
    /* how it runs */
    dt_deform_mode mode;
    dt_deform_knobs knobs;
    int halo;   /* the halo in use (deft with stage): knobs.halo, or the layer's automatic one */
    int dx;     /* the dx method in use: knobs.dx, or DT_DX_GATHER when deterministic */
    int64_t nb; /* images per chunk: the column buffer (nb*P x K*C elements) fits the budget */
    /* the tensors: x, y, the main weight and their gradients in dtype and layout (deft: f32
     * NCHW - relaid out inside - or f32 / bf16 NHWC, which every deft kernel reads and writes
     * as they are; unfused: f32 NCHW); f32 products by math. Offsets, mask (om) and the offset
     * conv's parameters are f32 in every case. */
    dt_dtype dtype;
    dt_layout layout;
    dt_math math;
} dt_deform_plan;

/* Fills *p from sizes; returns NULL, or a message naming what does not fit (sizes, groups,
 * geometry, knobs). col_budget_bytes bounds the column buffer of a chunk. */
const char *dt_deform_plan_init(dt_deform_plan *p, int64_t N, int64_t C, int64_t H, int64_t W, int64_t Cout,
                                dt_conv_geom g, int G, int has_mask, dt_deform_mode mode, const dt_deform_knobs *k,
                                size_t col_budget_bytes);

/* Sets the plan's tensor types (dt_deform_plan_init leaves f32 NCHW, strict products) and
 * re-sizes its chunks; NULL, or a message naming a combination the mode does not run. */
const char *dt_deform_plan_types(dt_deform_plan *p, dt_dtype dtype, dt_layout layout, dt_math math,
                                 size_t col_budget_bytes);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
