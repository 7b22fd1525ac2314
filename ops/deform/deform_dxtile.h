/* deform_dxtile.h: the geometry of dx=tile (docs/deft.md "The input gradient by output tile"),
 * shared by the CUDA kernels and their CPU twins (host + device, like deform_chunk.h), so that
 * both cut a chunk into the same tiles and send the same samples to the fallback.
 *
 * An item is (image i, output tile, offset group g, chunk of DT_DXTILE_LANES channels of the
 * group). It accumulates the adjoint of its tile's samples into an fp32 footprint of FH x FW
 * input pixels [fy0, fy0 + FH) x [fx0, fx0 + FW) - the pixels the tile's taps read at zero
 * offset, plus `halo` pixels each side - with
 *   fy0 = ty*th*sh - ph - halo,  FH = (th-1)*sh + (kh-1)*dh + 2 + 2*halo   (the 2: a sample's
 *   2x2 corners), and the same in x.
 * A sample fits when every corner of it that is inside the image lies in its tile's footprint:
 * any offset in [-halo, halo + 1) px does. A sample that does not fit (a larger offset) is left
 * to the fallback - the inverse index restricted to those samples, walked by the second pass -
 * never dropped. Only the tile sizes and the halo are chosen here, from the plan alone (no
 * device property), so that the CPU twin and the GPU agree on every sum's order. */
#ifndef DT_DEFORM_DXTILE_H
#define DT_DEFORM_DXTILE_H

#include "ops/deform/deform_chunk.h"

#define DT_DXTILE_LANES 32      /* channels of an item: a warp, a lane a channel */
#define DT_DXTILE_MAX_CELLS 192 /* footprint pixels an item aims for: 192 x 32 fp32 = 24 KB of shared memory */

typedef struct {
    int th, tw;           /* output positions of a tile */
    int halo;             /* px around the zero-offset footprint */
    int FH, FW;           /* footprint (input pixels) */
    int tiles_y, tiles_x; /* tiles of an image */
    int tiles;            /* tiles_y * tiles_x */
    int chunks;           /* channel chunks of a group: ceil(Cg / DT_DXTILE_LANES) */
} dt_dxtile;

/* The largest tile of 8x8, 4x8, 4x4, 2x4, 2x2, 1x2, 1x1 whose footprint with the plan's halo
 * (p->halo) has at most DT_DXTILE_MAX_CELLS pixels; with none, the halo shrinks (only the
 * fallback's share grows); a kernel so large that even 1x1 with halo 0 exceeds it keeps that
 * (the launcher checks shared memory). */
static inline dt_dxtile dt_dxtile_make(const dt_deform_plan *p) { /* host only */
    static const int cand[7][2] = {{8, 8}, {4, 8}, {4, 4}, {2, 4}, {2, 2}, {1, 2}, {1, 1}};
    dt_dxtile t;
    for (int h = p->halo > 0 ? p->halo : 0; h >= 0; h--)
        for (int e = 0; e < 7; e++) {
            t.th = cand[e][0];
            t.tw = cand[e][1];
            t.halo = h;
            t.FH = (t.th - 1) * p->g.sh + (p->g.kh - 1) * p->g.dh + 2 + 2 * h;
            t.FW = (t.tw - 1) * p->g.sw + (p->g.kw - 1) * p->g.dw + 2 + 2 * h;
            if (t.FH * t.FW <= DT_DXTILE_MAX_CELLS) goto done;
        }
done: /* (t is 1x1 with halo 0 when nothing fit) */
    t.tiles_y = (int)((p->Ho + t.th - 1) / t.th);
    t.tiles_x = (int)((p->Wo + t.tw - 1) / t.tw);
    t.tiles = t.tiles_y * t.tiles_x;
    t.chunks = (int)((p->Cg + DT_DXTILE_LANES - 1) / DT_DXTILE_LANES);
    return t;
}

/* Top-left input pixel of tile (ty, tx)'s footprint. */
DT_HD int dt_dxtile_fy0(const dt_deform_chunk *c, const dt_dxtile *t, int ty) { return ty * t->th * c->sh - c->ph - t->halo; }
DT_HD int dt_dxtile_fx0(const dt_deform_chunk *c, const dt_dxtile *t, int tx) { return tx * t->tw * c->sw - c->pw - t->halo; }

/* The footprint cell of corner k of sample b, read at output (oy, ox), or -1 when the corner is
 * outside the image (nothing to add) or -2 when it is inside the image but outside the footprint. */
DT_HD int dt_dxtile_cell(const dt_deform_chunk *c, const dt_dxtile *t, int oy, int ox, const dt_bilin *b, int k) {
    if (!b->ok[k]) return -1;
    const int ry = b->yl + (k >> 1) - dt_dxtile_fy0(c, t, oy / t->th);
    const int rx = b->xl + (k & 1) - dt_dxtile_fx0(c, t, ox / t->tw);
    return ry >= 0 && ry < t->FH && rx >= 0 && rx < t->FW ? ry * t->FW + rx : -2;
}

/* 1 when all the sample's corners inside the image lie in its tile's footprint. */
DT_HD int dt_dxtile_fits(const dt_deform_chunk *c, const dt_dxtile *t, int oy, int ox, const dt_bilin *b) {
    for (int k = 0; k < 4; k++)
        if (dt_dxtile_cell(c, t, oy, ox, b, k) == -2) return 0;
    return 1;
}

/* Tiles of an image whose footprints cover input row iy: ty in [*lo, *hi] (empty when lo > hi);
 * A = th*sh rows between consecutive footprints, the same in x with (tw*sw, pw, tiles_x). */
DT_HD void dt_dxtile_cover(int iy, int A, int pad, int halo, int F, int ntiles, int *lo, int *hi) {
    const int top = iy + pad + halo; /* >= 0 */
    const int num = top - F + 1;
    *lo = num <= 0 ? 0 : (num + A - 1) / A;
    *hi = top / A;
    if (*hi > ntiles - 1) *hi = ntiles - 1;
}

#endif
