/* dt_synth.h: a procedurally drawn image-classification dataset (build/mkdata).
 *
 * Each class is a shape drawn in a canonical frame and placed under a random affine map
 * (rotation, anisotropic scale, shear, translation), so the variation between images of a
 * class is mostly geometric -- what deformable convolutions are meant to absorb. Colours,
 * background gradients and textures, clutter lines, smaller distractor shapes of other
 * classes, partial occlusion and pixel noise keep it from being trivial.
 *
 * Classes (folder "NN_name"): 00_circle 01_ring 02_triangle 03_square 04_cross 05_star
 * 06_arrow 07_stripes 08_checker 09_lshape 10_spiral 11_crescent; --classes N takes the first N.
 *
 * Output: OUT/train/<class>/<class>_NNNNNN.jpg, OUT/val/<class>/..., OUT/mkdata.txt (the
 * parameters). Everything is written under OUT.tmp and renamed to OUT at the end, so an
 * interrupted run never leaves a folder that looks complete. Image (split, class, i) depends
 * only on (seed, split, class, i): the dataset is identical for any thread count.
 */
#ifndef DT_SYNTH_H
#define DT_SYNTH_H

#include <stdint.h>

#include "core/dt_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_SYNTH_MAX_CLASSES 12

typedef struct {
    const char *out;     /* output folder (required) */
    int classes;         /* 1 .. DT_SYNTH_MAX_CLASSES (default 10) */
    int train_per_class; /* default 1000 */
    int val_per_class;   /* default 200 */
    int width, height;   /* default 80 x 80 (--size sets both) */
    uint64_t seed;       /* default 1 */
    int quality;         /* JPEG quality 1 .. 100 (default 90) */
    int threads;         /* 0 = one per core */
    int force;           /* replace an existing non-empty OUT made by mkdata */
    int quiet;
} dt_synth_opts;

typedef struct {
    int64_t images;
    int64_t bytes;   /* JPEG bytes written */
    double seconds;
} dt_synth_report;

void dt_synth_default_opts(dt_synth_opts *o);
/* Parses mkdata's flags (argv[0] is skipped). 0: ok; 1: --help was asked; -1: bad flag
 * (unknown, missing or non-numeric value, out of range), err names it and lists the flags. */
int dt_synth_parse_args(int argc, char **argv, dt_synth_opts *o, dt_err *err);
const char *dt_synth_usage(void);

/* Draws image `index` of class `cls` of the stream (seed, stream): rgb [h, w, 3] uint8. */
void dt_synth_render(int cls, int w, int h, uint64_t seed, uint64_t stream, uint64_t index, uint8_t *rgb);

/* Writes the dataset (multi-threaded). Refuses a non-empty OUT unless force. */
int dt_synth_write(const dt_synth_opts *o, dt_synth_report *rep, dt_err *err);

#ifdef __cplusplus
}
#endif
#endif
