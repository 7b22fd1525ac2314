#include "data/dt_synth.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dt_rng.h"
#include "core/dt_timer.h"
#include "stb_image_write.h"

#define PI 3.14159265358979323846

enum {
    C_CIRCLE,
    C_RING,
    C_TRIANGLE,
    C_SQUARE,
    C_CROSS,
    C_STAR,
    C_ARROW,
    C_STRIPES,
    C_CHECKER,
    C_LSHAPE,
    C_SPIRAL,
    C_CRESCENT,
};

static const char *const k_names[DT_SYNTH_MAX_CLASSES] = {"circle", "ring",  "triangle", "square",
                                                          "cross",  "star",  "arrow",    "stripes",
                                                          "checker", "lshape", "spiral", "crescent"};

/* ---- drawing ---- */

/* A shape instance: class, per-instance parameters (thickness t, count/offset k, r2) and
 * the affine map from the canonical frame (object inside about the unit disk) to pixels:
 * p = c + R * M q, with M = rotation(theta) * [[sx, shear], [0, sy]]. */
typedef struct {
    int cls;
    double t, k, r2;
    double cx, cy, R;
    double m[4];    /* M */
    double inv[4];  /* M^-1 / R */
    float color[3];
} shape;

static inline double frac(double x) { return x - floor(x); }

/* Membership in the canonical frame (u right, v down). */
static int inside(const shape *s, double u, double v) {
    double r2 = u * u + v * v;
    switch (s->cls) {
    case C_CIRCLE:
        return r2 < 1.0;
    case C_RING: {
        double in = 1.0 - s->t;
        return r2 < 1.0 && r2 > in * in;
    }
    case C_TRIANGLE: /* equilateral, circumradius 1, inradius 0.5, pointing to -v */
        return v < 0.5 && 0.8660254 * u - 0.5 * v < 0.5 && -0.8660254 * u - 0.5 * v < 0.5;
    case C_SQUARE:
        return fabs(u) < 0.78 && fabs(v) < 0.78;
    case C_CROSS: {
        double h = 0.5 * s->t;
        return (fabs(u) < h && fabs(v) < 0.95) || (fabs(v) < h && fabs(u) < 0.95);
    }
    case C_STAR: { /* five points; t = inner radius */
        if (r2 >= 1.0) return 0;
        double r = sqrt(r2), th = atan2(v, u);
        double phi = fmod(th + PI / 2 + 4 * PI, 2 * PI / 5);
        if (phi > PI / 5) phi = 2 * PI / 5 - phi;
        double qx = r * cos(phi), qy = r * sin(phi);
        double bx = s->t * cos(PI / 5), by = s->t * sin(PI / 5);
        /* origin side of the edge from the tip (1, 0) to the inner corner (bx, by) */
        return (bx - 1.0) * qy - by * (qx - 1.0) > 0;
    }
    case C_ARROW: { /* shaft along +u, head at the +u end */
        if (u >= -0.95 && u < 0.15 && fabs(v) < 0.5 * s->t) return 1;
        return u >= 0.15 && u < 0.95 && fabs(v) < 0.6 * (0.95 - u) / 0.8;
    }
    case C_STRIPES: /* k stripes across a disk */
        return r2 < 0.9 && frac((u + 2.0) * s->k * 0.5) < 0.5;
    case C_CHECKER: {
        if (fabs(u) >= 0.85 || fabs(v) >= 0.85) return 0;
        int a = (int)floor((u + 0.85) * s->k / 1.7), b = (int)floor((v + 0.85) * s->k / 1.7);
        return ((a + b) & 1) == 0;
    }
    case C_LSHAPE:
        return (u > -0.7 && u < -0.7 + s->t && fabs(v) < 0.9) || (v > 0.9 - s->t && v < 0.9 && u > -0.7 && u < 0.7);
    case C_SPIRAL: { /* k turns of an Archimedean band of relative width t */
        if (r2 >= 1.0 || r2 < 0.01) return 0;
        double th = atan2(v, u) + PI;
        return frac(sqrt(r2) * s->k - th / (2 * PI)) < s->t;
    }
    case C_CRESCENT: {
        double du = u - s->k;
        return r2 < 1.0 && du * du + v * v > s->r2 * s->r2;
    }
    }
    return 0;
}

static double unif(dt_rng *r, double lo, double hi) { return lo + (hi - lo) * dt_rng_uniform_f64(r); }

static void random_shape(shape *s, int cls, dt_rng *r, double cx, double cy, double R) {
    s->cls = cls;
    s->cx = cx;
    s->cy = cy;
    s->R = R;
    s->t = 0;
    s->k = 0;
    s->r2 = 0;
    switch (cls) {
    case C_RING: s->t = unif(r, 0.22, 0.5); break;
    case C_CROSS: s->t = unif(r, 0.28, 0.55); break;
    case C_STAR: s->t = unif(r, 0.36, 0.52); break;
    case C_ARROW: s->t = unif(r, 0.22, 0.45); break;
    case C_STRIPES: s->k = (double)(3 + dt_rng_below(r, 3)); break;
    case C_CHECKER: s->k = (double)(3 + dt_rng_below(r, 2)); break;
    case C_LSHAPE: s->t = unif(r, 0.3, 0.55); break;
    case C_SPIRAL:
        s->k = unif(r, 2.0, 3.2);
        s->t = unif(r, 0.35, 0.55);
        break;
    case C_CRESCENT:
        s->k = unif(r, 0.35, 0.6);
        s->r2 = unif(r, 0.75, 0.92);
        break;
    default: break;
    }
    double th = unif(r, 0, 2 * PI);
    double sx = unif(r, 0.75, 1.25), sy = sx * exp(unif(r, -0.3, 0.3)), sh = unif(r, -0.35, 0.35);
    double c = cos(th), sn = sin(th);
    /* M = Rot * [[sx, sh], [0, sy]] */
    s->m[0] = c * sx;
    s->m[1] = c * sh - sn * sy;
    s->m[2] = sn * sx;
    s->m[3] = sn * sh + c * sy;
    double det = s->m[0] * s->m[3] - s->m[1] * s->m[2];
    s->inv[0] = s->m[3] / (det * R);
    s->inv[1] = -s->m[1] / (det * R);
    s->inv[2] = -s->m[2] / (det * R);
    s->inv[3] = s->m[0] / (det * R);
}

/* Composites s over the canvas (float RGB [h, w, 3]) visiting only its bounding box.
 * Membership is first evaluated on the pixel-corner lattice; a pixel whose four corners agree
 * is taken as fully in or out, the others (the boundary) get n x n supersampled coverage.
 * That costs about one evaluation per pixel instead of n^2. */
static void draw_shape(float *canvas, int w, int h, const shape *s, int n) {
    double ex = s->R * 1.05 * (fabs(s->m[0]) + fabs(s->m[1])), ey = s->R * 1.05 * (fabs(s->m[2]) + fabs(s->m[3]));
    int x0 = (int)floor(s->cx - ex), x1 = (int)ceil(s->cx + ex), y0 = (int)floor(s->cy - ey),
        y1 = (int)ceil(s->cy + ey);
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > w) x1 = w;
    if (y1 > h) y1 = h;
    if (x1 <= x0 || y1 <= y0) return;
    int bw = x1 - x0, bh = y1 - y0;
    uint8_t *corner = dt_xmalloc((size_t)(bw + 1) * (bh + 1));
    for (int j = 0; j <= bh; j++)
        for (int i = 0; i <= bw; i++) {
            double dx = x0 + i - s->cx, dy = y0 + j - s->cy;
            corner[(size_t)j * (bw + 1) + i] =
                (uint8_t)inside(s, s->inv[0] * dx + s->inv[1] * dy, s->inv[2] * dx + s->inv[3] * dy);
        }
    float inv_n2 = 1.0f / (float)(n * n);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const uint8_t *c = corner + (size_t)(y - y0) * (bw + 1) + (x - x0);
            int sum = c[0] + c[1] + c[bw + 1] + c[bw + 2];
            float a;
            if (sum == 0) continue;
            if (sum == 4) {
                a = 1.0f;
            } else {
                int hits = 0;
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < n; i++) {
                        double dx = x + (i + 0.5) / n - s->cx, dy = y + (j + 0.5) / n - s->cy;
                        hits += inside(s, s->inv[0] * dx + s->inv[1] * dy, s->inv[2] * dx + s->inv[3] * dy);
                    }
                a = hits * inv_n2;
            }
            float *p = canvas + ((size_t)y * w + x) * 3;
            for (int k = 0; k < 3; k++) p[k] = p[k] * (1 - a) + s->color[k] * a;
        }
    free(corner);
}

/* A thick line segment (clutter). */
static void draw_line(float *canvas, int w, int h, double ax, double ay, double bx, double by, double th,
                      const float *color) {
    double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy + 1e-9;
    int x0 = (int)floor(fmin(ax, bx) - th), x1 = (int)ceil(fmax(ax, bx) + th);
    int y0 = (int)floor(fmin(ay, by) - th), y1 = (int)ceil(fmax(ay, by) + th);
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > w) x1 = w;
    if (y1 > h) y1 = h;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            double px = x + 0.5 - ax, py = y + 0.5 - ay;
            double t = (px * dx + py * dy) / len2;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = px - t * dx, ey = py - t * dy;
            double d = sqrt(ex * ex + ey * ey);
            double a = 0.5 * th + 0.5 - d; /* ~1-pixel soft edge */
            if (a <= 0) continue;
            if (a > 1) a = 1;
            float *p = canvas + ((size_t)y * w + x) * 3;
            for (int c = 0; c < 3; c++) p[c] = (float)(p[c] * (1 - a) + color[c] * a);
        }
}

static void random_color(dt_rng *r, float *c) {
    for (int i = 0; i < 3; i++) c[i] = (float)unif(r, 0, 255);
}

static double luma(const float *c) { return 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]; }

/* A colour that stands out from bg: luminance or colour distance large enough. */
static void contrast_color(dt_rng *r, const float *bg, float *c) {
    for (int attempt = 0; attempt < 32; attempt++) {
        random_color(r, c);
        double d2 = 0;
        for (int i = 0; i < 3; i++) d2 += (c[i] - bg[i]) * (c[i] - bg[i]);
        if (fabs(luma(c) - luma(bg)) > 55 || d2 > 140.0 * 140.0) return;
    }
    for (int i = 0; i < 3; i++) c[i] = luma(bg) > 128 ? 20.0f : 235.0f;
}

/* Value noise: a (gw+1) x (gh+1) lattice of random offsets per channel, smoothly
 * interpolated; added to the canvas with amplitude amp. */
static void add_value_noise(float *canvas, int w, int h, double cell, double amp, dt_rng *r) {
    int gw = (int)ceil(w / cell) + 1, gh = (int)ceil(h / cell) + 1;
    float *g = dt_xmalloc((size_t)(gw + 1) * (gh + 1) * 3 * sizeof(float));
    for (int i = 0; i < (gw + 1) * (gh + 1) * 3; i++) g[i] = (float)(amp * (2 * dt_rng_uniform_f64(r) - 1));
    /* a shared luminance component keeps textures from being pure colour noise */
    for (int i = 0; i < (gw + 1) * (gh + 1); i++) {
        float l = (float)(amp * (2 * dt_rng_uniform_f64(r) - 1));
        for (int c = 0; c < 3; c++) g[i * 3 + c] = 0.5f * g[i * 3 + c] + l;
    }
    /* Smoothstep weights per column and per row, computed once. */
    int *ix = dt_xmalloc((size_t)w * sizeof *ix);
    float *tx = dt_xmalloc((size_t)w * sizeof *tx);
    for (int x = 0; x < w; x++) {
        double f = x / cell;
        ix[x] = (int)f;
        double t = f - ix[x];
        tx[x] = (float)(t * t * (3 - 2 * t));
    }
    for (int y = 0; y < h; y++) {
        double fy = y / cell;
        int iy = (int)fy;
        float ty = (float)(fy - iy);
        ty = ty * ty * (3 - 2 * ty);
        const float *r0 = g + (size_t)iy * (gw + 1) * 3, *r1 = r0 + (gw + 1) * 3;
        float *p = canvas + (size_t)y * w * 3;
        for (int x = 0; x < w; x++, p += 3) {
            const float *a = r0 + ix[x] * 3, *c = r1 + ix[x] * 3;
            for (int k = 0; k < 3; k++) {
                float top = a[k] + (a[k + 3] - a[k]) * tx[x], bot = c[k] + (c[k + 3] - c[k]) * tx[x];
                p[k] += top + (bot - top) * ty;
            }
        }
    }
    free(ix);
    free(tx);
    free(g);
}

void dt_synth_render(int cls, int w, int h, uint64_t seed, uint64_t stream, uint64_t index, uint8_t *rgb) {
    dt_rng r;
    dt_rng_derive(&r, seed, stream, index);
    float *cv = dt_xmalloc((size_t)w * h * 3 * sizeof(float));
    int size = w < h ? w : h;
    int ss = size <= 160 ? 3 : 2; /* supersampling per axis */

    /* Background: a gradient between two colours, then coarse and fine value noise. */
    float bg0[3], bg1[3], bg[3];
    random_color(&r, bg0);
    for (int c = 0; c < 3; c++) bg1[c] = (float)fmin(255, fmax(0, bg0[c] + unif(&r, -70, 70)));
    for (int c = 0; c < 3; c++) bg[c] = 0.5f * (bg0[c] + bg1[c]);
    double ga = unif(&r, 0, 2 * PI), gx = cos(ga) / w, gy = sin(ga) / h;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double t = 0.5 + (x - 0.5 * w) * gx + (y - 0.5 * h) * gy;
            float *p = cv + ((size_t)y * w + x) * 3;
            for (int c = 0; c < 3; c++) p[c] = (float)(bg0[c] + (bg1[c] - bg0[c]) * t);
        }
    add_value_noise(cv, w, h, size / unif(&r, 1.5, 4.0), unif(&r, 5, 35), &r);
    /* fine grain in absolute pixels: large images get as much detail per pixel as small ones */
    add_value_noise(cv, w, h, unif(&r, 2.0, 8.0), unif(&r, 0, 22), &r);
    /* Photo-sized images (shorter side > 160, the loader benchmark's "ImageNet-like" JPEGs)
     * get a further pixel-scale texture: a natural photo's JPEG holds ~110 KB at 500 x 375,
     * and decode cost follows the bytes. */
    int photo = size > 160;
    if (photo) add_value_noise(cv, w, h, unif(&r, 1.2, 2.5), unif(&r, 30, 60), &r);

    /* Clutter: 0-3 lines. */
    int nlines = (int)dt_rng_below(&r, 4);
    for (int i = 0; i < nlines; i++) {
        float col[3];
        random_color(&r, col);
        draw_line(cv, w, h, unif(&r, 0, w), unif(&r, 0, h), unif(&r, 0, w), unif(&r, 0, h),
                  unif(&r, 0.8, 2.5) * size / 80.0, col);
    }

    /* The object: radius 22-40 % of the shorter side, center kept mostly inside. */
    double R = size * unif(&r, 0.22, 0.40);
    double cx = unif(&r, 0.5 * R, w - 0.5 * R), cy = unif(&r, 0.5 * R, h - 0.5 * R);
    if (w - R < R) cx = 0.5 * w;
    if (h - R < R) cy = 0.5 * h;

    /* Distractors: 0-2 smaller shapes of other classes, below the object (or, 25 %, above). */
    int nd = (int)dt_rng_below(&r, 3);
    shape dist[2];
    int above[2] = {0, 0};
    for (int i = 0; i < nd; i++) {
        int dc = (int)dt_rng_below(&r, DT_SYNTH_MAX_CLASSES - 1);
        if (dc >= cls) dc++;
        double dr = R * unif(&r, 0.25, 0.5);
        random_shape(&dist[i], dc, &r, unif(&r, 0, w), unif(&r, 0, h), dr);
        random_color(&r, dist[i].color);
        above[i] = dt_rng_uniform(&r) < 0.25f;
        if (!above[i]) draw_shape(cv, w, h, &dist[i], ss);
    }

    shape obj;
    random_shape(&obj, cls, &r, cx, cy, R);
    contrast_color(&r, bg, obj.color);
    draw_shape(cv, w, h, &obj, ss);
    for (int i = 0; i < nd; i++)
        if (above[i]) draw_shape(cv, w, h, &dist[i], ss);

    /* Partial occlusion (30 %): a rectangle in a background-like colour over part of it. */
    if (dt_rng_uniform(&r) < 0.3f) {
        shape occ;
        random_shape(&occ, C_SQUARE, &r, cx + unif(&r, -0.8, 0.8) * R, cy + unif(&r, -0.8, 0.8) * R,
                     R * unif(&r, 0.25, 0.45));
        for (int c = 0; c < 3; c++) occ.color[c] = (float)fmin(255, fmax(0, bg[c] + unif(&r, -25, 25)));
        draw_shape(cv, w, h, &occ, ss);
    }

    /* Pixel noise, then quantize. The noise is a sum of four 16-bit uniforms (one 64-bit
     * draw; Irwin-Hall, close to Gaussian) scaled to variance sigma^2: Box-Muller's log and
     * cos per sample would cost more than all the drawing. */
    float sigma = (float)(photo ? unif(&r, 12, 24) : unif(&r, 1, 10)), scale = sigma * 1.7320508f / 65536.0f;
    for (size_t i = 0; i < (size_t)w * h * 3; i++) {
        uint64_t b = dt_rng_u64(&r);
        float sum = (float)((b & 0xffff) + ((b >> 16) & 0xffff) + ((b >> 32) & 0xffff) + (b >> 48));
        float v = cv[i] + (sum - 131070.0f) * scale;
        rgb[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
    }
    free(cv);
}

/* ---- options ---- */

void dt_synth_default_opts(dt_synth_opts *o) {
    memset(o, 0, sizeof *o);
    o->classes = 10;
    o->train_per_class = 1000;
    o->val_per_class = 200;
    o->width = o->height = 80;
    o->seed = 1;
    o->quality = 90;
    o->threads = 0;
}

const char *dt_synth_usage(void) {
    return "usage: mkdata --out DIR [--classes N] [--train N] [--val N] [--size S | --width W --height H]\n"
           "              [--seed S] [--quality Q] [--threads T] [--force] [--quiet]\n"
           "  --out DIR      output folder; gets DIR/train/<class>/*.jpg, DIR/val/<class>/*.jpg\n"
           "  --classes N    number of shape classes, 1..12 (default 10)\n"
           "  --train N      training images per class (default 1000)\n"
           "  --val N        validation images per class (default 200)\n"
           "  --size S       square images of S x S pixels (default 80)\n"
           "  --width W      image width (overrides --size)\n"
           "  --height H     image height (overrides --size)\n"
           "  --seed S       random seed (default 1); the same seed gives the same images\n"
           "  --quality Q    JPEG quality 1..100 (default 90)\n"
           "  --threads T    writer threads (default: one per core)\n"
           "  --force        replace DIR if it is a dataset mkdata made before\n"
           "  --quiet        no progress output\n";
}

static const char *k_flags = "--out DIR, --classes N, --train N, --val N, --size S, --width W, --height H, "
                             "--seed S, --quality Q, --threads T, --force, --quiet, --help";

static int parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out, dt_err *err) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno) return dt_errf(err, "%s: '%s' is not an integer", flag, v);
    if (x < lo || x > hi) return dt_errf(err, "%s %lld is out of range (%lld .. %lld)", flag, x, lo, hi);
    *out = x;
    return 0;
}

int dt_synth_parse_args(int argc, char **argv, dt_synth_opts *o, dt_err *err) {
    int size = -1, width = -1, height = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!strcmp(a, "--force")) {
            o->force = 1;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
            continue;
        }
        /* --flag VALUE or --flag=VALUE */
        char name[64];
        const char *val = NULL, *eq = strchr(a, '=');
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
        }
        static const char *const valued[] = {"--out",  "--classes", "--train",   "--val",   "--size",
                                             "--width", "--height", "--seed", "--quality", "--threads"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(name, valued[k]);
        if (!known) {
            if (a[0] != '-') return dt_errf(err, "unexpected argument '%s'; valid flags: %s", a, k_flags);
            return dt_errf(err, "unknown flag %s; valid flags: %s", name, k_flags);
        }
        if (!val) {
            if (i + 1 >= argc) return dt_errf(err, "%s needs a value", name);
            val = argv[++i];
        }
        long long x = 0;
        if (!strcmp(name, "--out")) {
            if (!*val) return dt_errf(err, "--out needs a folder name");
            o->out = val;
        } else if (!strcmp(name, "--classes")) {
            if (parse_int(name, val, 1, DT_SYNTH_MAX_CLASSES, &x, err)) return -1;
            o->classes = (int)x;
        } else if (!strcmp(name, "--train")) {
            if (parse_int(name, val, 0, 10000000, &x, err)) return -1;
            o->train_per_class = (int)x;
        } else if (!strcmp(name, "--val")) {
            if (parse_int(name, val, 0, 10000000, &x, err)) return -1;
            o->val_per_class = (int)x;
        } else if (!strcmp(name, "--size")) {
            if (parse_int(name, val, 8, 8192, &x, err)) return -1;
            size = (int)x;
        } else if (!strcmp(name, "--width")) {
            if (parse_int(name, val, 8, 8192, &x, err)) return -1;
            width = (int)x;
        } else if (!strcmp(name, "--height")) {
            if (parse_int(name, val, 8, 8192, &x, err)) return -1;
            height = (int)x;
        } else if (!strcmp(name, "--seed")) {
            if (parse_int(name, val, 0, INT64_MAX, &x, err)) return -1;
            o->seed = (uint64_t)x;
        } else if (!strcmp(name, "--quality")) {
            if (parse_int(name, val, 1, 100, &x, err)) return -1;
            o->quality = (int)x;
        } else if (!strcmp(name, "--threads")) {
            if (parse_int(name, val, 0, 1024, &x, err)) return -1;
            o->threads = (int)x;
        }
    }
    if (size > 0) o->width = o->height = size;
    if (width > 0) o->width = width;
    if (height > 0) o->height = height;
    if (!o->out) return dt_errf(err, "--out DIR is required; valid flags: %s", k_flags);
    if (o->train_per_class + o->val_per_class == 0) return dt_errf(err, "--train and --val are both 0: nothing to write");
    return 0;
}

/* ---- writing ---- */

static int rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return -1;
        struct dirent *e;
        int rc = 0;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            size_t n = strlen(path) + strlen(e->d_name) + 2;
            char *sub = dt_xmalloc(n);
            snprintf(sub, n, "%s/%s", path, e->d_name);
            rc |= rm_rf(sub);
            free(sub);
        }
        closedir(d);
        return rmdir(path) | rc;
    }
    return unlink(path);
}

/* Folder state: -1 missing, 0 empty, 1 holds only what mkdata writes, 2 holds other things
 * (*other names one of them). */
static int folder_state(const char *path, char *other, size_t cap) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int st = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!strcmp(e->d_name, "train") || !strcmp(e->d_name, "val") || !strcmp(e->d_name, "mkdata.txt")) {
            if (st == 0) st = 1;
        } else {
            st = 2;
            snprintf(other, cap, "%s", e->d_name);
            break;
        }
    }
    closedir(d);
    return st;
}

typedef struct {
    const dt_synth_opts *o;
    const char *tmp;
    int64_t total, per_split[2];
    atomic_llong next, done, bytes;
    atomic_int failed;
    pthread_mutex_t mu;
    dt_err err;
} job;

typedef struct {
    FILE *f;
    int64_t n;
    int error;
} sink;

static void sink_write(void *ctx, void *data, int size) {
    sink *s = ctx;
    if (fwrite(data, 1, (size_t)size, s->f) != (size_t)size) s->error = 1;
    s->n += size;
}

static const char *split_name(int s) { return s ? "val" : "train"; }

/* Image k of the job: train images first, class-major. */
static void job_item(const job *j, int64_t k, int *split, int *cls, int64_t *i) {
    *split = k >= j->per_split[0];
    if (*split) k -= j->per_split[0];
    int64_t per = *split ? j->o->val_per_class : j->o->train_per_class;
    *cls = (int)(k / per);
    *i = k % per;
}

static void *writer_main(void *arg) {
    job *j = arg;
    const dt_synth_opts *o = j->o;
    uint8_t *rgb = dt_xmalloc((size_t)o->width * o->height * 3);
    char path[4096];
    for (;;) {
        int64_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->total || atomic_load(&j->failed)) break;
        int split, cls;
        int64_t i;
        job_item(j, k, &split, &cls, &i);
        dt_synth_render(cls, o->width, o->height, o->seed, (uint64_t)(split * 1000 + cls), (uint64_t)i, rgb);
        snprintf(path, sizeof path, "%s/%s/%02d_%s/%02d_%s_%06lld.jpg", j->tmp, split_name(split), cls, k_names[cls],
                 cls, k_names[cls], (long long)i);
        sink s = {fopen(path, "wb"), 0, 0};
        int ok = s.f != NULL;
        int e = errno;
        if (ok) {
            ok = stbi_write_jpg_to_func(sink_write, &s, o->width, o->height, 3, rgb, o->quality) && !s.error;
            e = errno;
            ok &= fclose(s.f) == 0;
        }
        if (!ok) {
            pthread_mutex_lock(&j->mu);
            if (!atomic_load(&j->failed)) dt_errf(&j->err, "cannot write %s: %s", path, e ? strerror(e) : "encoder failed");
            atomic_store(&j->failed, 1);
            pthread_mutex_unlock(&j->mu);
            break;
        }
        atomic_fetch_add(&j->bytes, s.n);
        long long d = atomic_fetch_add(&j->done, 1) + 1;
        if (!o->quiet && (d % 2000 == 0 || d == j->total)) {
            fprintf(stderr, "\rmkdata: %lld / %lld images", d, (long long)j->total);
            if (d == j->total) fputc('\n', stderr);
        }
    }
    free(rgb);
    return NULL;
}

static int make_dir(const char *path, dt_err *err) {
    if (mkdir(path, 0777) != 0 && errno != EEXIST) return dt_errf(err, "cannot create %s: %s", path, strerror(errno));
    return 0;
}

int dt_synth_write(const dt_synth_opts *o, dt_synth_report *rep, dt_err *err) {
    double t0 = dt_now_ms();
    if (!o->out || !*o->out) return dt_errf(err, "mkdata: no output folder given (--out DIR)");
    if (o->classes < 1 || o->classes > DT_SYNTH_MAX_CLASSES)
        return dt_errf(err, "mkdata: %d classes is out of range (1 .. %d)", o->classes, DT_SYNTH_MAX_CLASSES);
    if (o->width < 8 || o->height < 8) return dt_errf(err, "mkdata: image size %d x %d is too small", o->width, o->height);
    char other[256] = "";
    struct stat st;
    int out_state = -1;
    if (stat(o->out, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return dt_errf(err, "%s exists and is not a folder", o->out);
        out_state = folder_state(o->out, other, sizeof other);
        if (out_state > 0 && !o->force)
            return dt_errf(err, "%s is not empty; pass --force to replace it", o->out);
        if (out_state == 2)
            return dt_errf(err, "refusing to replace %s: it holds '%s', which mkdata did not write; remove it yourself",
                           o->out, other);
    }
    size_t n = strlen(o->out) + 64;
    char *tmp = dt_xmalloc(n), *old = dt_xmalloc(n), *p = dt_xmalloc(n + 64);
    snprintf(tmp, n, "%s.tmp", o->out);
    snprintf(old, n, "%s.old.%d", o->out, (int)getpid());
    int rc = -1, made_tmp = 0;
    job j;
    memset(&j, 0, sizeof j);
    pthread_mutex_init(&j.mu, NULL);
    /* A leftover OUT.tmp is an interrupted run: remove it (only if it looks like one). */
    int tmp_state = folder_state(tmp, other, sizeof other);
    if (tmp_state == 2) {
        dt_errf(err, "%s exists and holds '%s', which mkdata did not write; remove it yourself", tmp, other);
        goto done;
    }
    if (tmp_state >= 0 && rm_rf(tmp) != 0) {
        dt_errf(err, "cannot remove the leftover %s: %s", tmp, strerror(errno));
        goto done;
    }
    if (make_dir(tmp, err)) goto done;
    made_tmp = 1;
    j.o = o;
    j.tmp = tmp;
    j.per_split[0] = (int64_t)o->classes * o->train_per_class;
    j.per_split[1] = (int64_t)o->classes * o->val_per_class;
    j.total = j.per_split[0] + j.per_split[1];
    for (int s = 0; s < 2; s++) {
        if (!j.per_split[s]) continue;
        snprintf(p, n + 64, "%s/%s", tmp, split_name(s));
        if (make_dir(p, err)) goto done;
        for (int c = 0; c < o->classes; c++) {
            snprintf(p, n + 64, "%s/%s/%02d_%s", tmp, split_name(s), c, k_names[c]);
            if (make_dir(p, err)) goto done;
        }
    }
    int nt = o->threads ? o->threads : dt_num_cores();
    if (nt > j.total) nt = (int)j.total;
    pthread_t *th = dt_xcalloc((size_t)nt, sizeof *th);
    int started = 0;
    for (int t = 0; t < nt; t++) {
        if (pthread_create(&th[t], NULL, writer_main, &j) != 0) break;
        started++;
    }
    if (!started) writer_main(&j);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    free(th);
    if (atomic_load(&j.failed)) {
        if (err) *err = j.err;
        goto done;
    }
    /* The manifest, then the rename that makes the dataset visible. */
    snprintf(p, n + 64, "%s/mkdata.txt", tmp);
    FILE *f = fopen(p, "w");
    if (!f) {
        dt_errf(err, "cannot write %s: %s", p, strerror(errno));
        goto done;
    }
    fprintf(f, "made by build/mkdata\nclasses %d\ntrain_per_class %d\nval_per_class %d\nwidth %d\nheight %d\n"
               "seed %llu\nquality %d\n",
            o->classes, o->train_per_class, o->val_per_class, o->width, o->height, (unsigned long long)o->seed,
            o->quality);
    for (int c = 0; c < o->classes; c++) fprintf(f, "class %d %02d_%s\n", c, c, k_names[c]);
    if (fclose(f) != 0) {
        dt_errf(err, "cannot write %s: %s", p, strerror(errno));
        goto done;
    }
    if (out_state == 0 && rmdir(o->out) != 0) {
        dt_errf(err, "cannot replace the empty folder %s: %s", o->out, strerror(errno));
        goto done;
    }
    if (out_state > 0 && rename(o->out, old) != 0) {
        dt_errf(err, "cannot move %s aside: %s", o->out, strerror(errno));
        goto done;
    }
    if (rename(tmp, o->out) != 0) {
        dt_errf(err, "cannot rename %s to %s: %s", tmp, o->out, strerror(errno));
        goto done;
    }
    if (out_state > 0 && rm_rf(old) != 0) dt_warn("could not remove the previous dataset, now at %s", old);
    if (rep) {
        rep->images = j.total;
        rep->bytes = atomic_load(&j.bytes);
        rep->seconds = (dt_now_ms() - t0) / 1e3;
    }
    rc = 0;
done:
    if (rc != 0 && made_tmp) rm_rf(tmp); /* a failed run leaves nothing behind */
    pthread_mutex_destroy(&j.mu);
    free(tmp);
    free(old);
    free(p);
    return rc;
}
