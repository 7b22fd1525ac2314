/* conv_geom.h: the geometry of a 2-D convolution (kernel, stride, padding, dilation), shared
 * by plain and deformable convolutions, their kernels and their layers. */
#ifndef DT_CONV_GEOM_H
#define DT_CONV_GEOM_H

#include <stdint.h>

typedef struct {
    int kh, kw; /* kernel size */
    int sh, sw; /* stride */
    int ph, pw; /* zero padding */
    int dh, dw; /* dilation */
} dt_conv_geom;

/* A square k x k kernel with the same stride/padding/dilation in both directions. */
static inline dt_conv_geom dt_geom(int k, int stride, int pad, int dil) {
    dt_conv_geom g = {k, k, stride, stride, pad, pad, dil, dil};
    return g;
}

/* Output size along one axis; <= 0 means the input is too small for the kernel. */
static inline int64_t dt_conv_out_size(int64_t in, int k, int s, int p, int d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* The dgrad of a stride-1 conv g is itself a stride-1 conv of dy with the taps mirrored: same
 * kernel and dilation, padding (k - 1) d - p on each axis (negative when p exceeds the window:
 * such a dgrad is not a plain conv). */
static inline dt_conv_geom dt_conv_dgrad_geom(dt_conv_geom g) {
    dt_conv_geom d = g;
    d.ph = (g.kh - 1) * g.dh - g.ph, d.pw = (g.kw - 1) * g.dw - g.pw;
    return d;
}

#endif
