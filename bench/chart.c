/* The bar chart's layout and drawing (chart.h): every size comes from the text it must hold. */
#include "bench/chart.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stb_image_write.h"

/* stb_easy_font is a header of static functions; silence its warnings here only. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wmissing-braces"
#include "stb_easy_font.h"
#pragma GCC diagnostic pop

#define SCALE 2      /* stb_easy_font's glyphs are ~6 x 7 px: twice that reads well */
#define MARGIN 20
#define MIN_W 900
#define BAR_W 360    /* the bars' room at least, for the largest value */
#define GAP 16       /* between the label column and the bars */
#define ROW 34       /* a bar is ROW - 8 px high */
#define LINE 24      /* a line of title or legend */
#define SWATCH 16

#define TICK 6       /* a tick of the value axis below it */

enum { INK = 1, FILL = 2, RULE = 4 }; /* what covered a pixel, to find text under a bar (rules do not count) */

typedef struct {
    dt_chart_image *img;
    unsigned char *mask;
} canvas;

static const unsigned char PALETTE[DT_CHART_MAX_GROUPS][3] = {
    {66, 106, 178}, {222, 125, 44}, {80, 158, 82}, {150, 86, 160}, {196, 64, 64}, {120, 120, 120}};

void dt_chart_colour(int g, unsigned char rgb[3]) { memcpy(rgb, PALETTE[g % DT_CHART_MAX_GROUPS], 3); }

/* s with every byte stb_easy_font has no glyph for (outside printable ASCII: its tables would
 * be read out of bounds) as '?'; malloc'ed. */
static char *printable(const char *s) {
    char *p = strdup(s);
    for (char *c = p; *c; c++)
        if (*c < 32 || *c > 126) *c = '?';
    return p;
}

static int text_width(const char *s) {
    char *p = printable(s);
    int w = stb_easy_font_width(p) * SCALE;
    free(p);
    return w;
}

static void fill(canvas *cv, int x0, int y0, int x1, int y1, const unsigned char rgb[3], int what) {
    dt_chart_image *im = cv->img;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            if (x < 0 || y < 0 || x >= im->w || y >= im->h) {
                if (what == INK) im->clipped++;
                continue;
            }
            memcpy(im->rgb + ((size_t)y * im->w + x) * 3, rgb, 3);
            cv->mask[(size_t)y * im->w + x] |= (unsigned char)what;
        }
}

/* stb_easy_font emits a quad of 4 vertices (x, y, z, colour: 16 floats) per glyph stroke. */
static void text(canvas *cv, int x, int y, const char *s) {
    static const unsigned char ink[3] = {30, 30, 30};
    char *p = printable(s);
    size_t cap = strlen(p) * 1024 + 1024; /* more than the strokes of any glyph need */
    float *v = malloc(cap);
    int q = stb_easy_font_print(0, 0, p, NULL, v, (int)cap);
    free(p);
    for (int i = 0; i < q; i++) {
        const float *a = v + i * 16, *c = a + 8;
        fill(cv, x + (int)(a[0] * SCALE), y + (int)(a[1] * SCALE), x + (int)(c[0] * SCALE), y + (int)(c[1] * SCALE), ink,
             INK);
    }
    free(v);
}

/* The title's lines: words joined while they fit `width`, each line a malloc'ed string. */
static int wrap(const char *title, int width, char ***lines) {
    int n = 0;
    *lines = NULL;
    const char *p = title;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        size_t len = strcspn(p, " "), fit = len;
        for (;;) { /* try one more word */
            size_t next = fit + strspn(p + fit, " ");
            if (!p[next]) break;
            size_t end = next + strcspn(p + next, " ");
            char *longer = strndup(p, end);
            int ok = text_width(longer) <= width;
            free(longer);
            if (!ok) break;
            fit = end;
        }
        *lines = realloc(*lines, (size_t)(n + 1) * sizeof **lines);
        (*lines)[n++] = strndup(p, fit);
        p += fit;
    }
    return n;
}

/* A round step for about `want` ticks up to vmax: 1, 2, 2.5 or 5 times a power of ten. */
static double tick_step(double vmax, int want) {
    double raw = vmax / want, p = pow(10, floor(log10(raw))), m[4] = {1, 2, 2.5, 5};
    for (int i = 0; i < 4; i++)
        if (m[i] * p >= raw) return m[i] * p;
    return 10 * p;
}

int dt_chart_draw(const dt_chart_row *rows, int n, const char *title, double ref, dt_chart_image *img, char *err,
                  int err_len) {
    memset(img, 0, sizeof *img);
    img->ref_x = -1;
    if (!(ref >= 0 && isfinite(ref))) return snprintf(err, err_len, "reference %g is not a finite non-negative number", ref), -1;
    if (n < 1) return snprintf(err, err_len, "no rows to draw"), -1;
    const char *groups[DT_CHART_MAX_GROUPS];
    int ng = 0, *gi = calloc((size_t)n, sizeof *gi);
    double vmax = 0;
    int label_w = 0, value_w = 0;
    char (*values)[160] = calloc((size_t)n, sizeof *values);
    for (int i = 0; i < n; i++) {
        if (!(rows[i].value >= 0 && isfinite(rows[i].value))) {
            snprintf(err, err_len, "row %d ('%s'): value %g is not a finite non-negative number", i + 1, rows[i].label,
                     rows[i].value);
            free(gi), free(values);
            return -1;
        }
        if (rows[i].value > vmax) vmax = rows[i].value;
        if ((rows[i].group[0] != 0) != (rows[0].group[0] != 0)) {
            snprintf(err, err_len, "row %d ('%s'): either every row names a group or none does", i + 1, rows[i].label);
            free(gi), free(values);
            return -1;
        }
        int g = 0;
        while (g < ng && strcmp(groups[g], rows[i].group)) g++;
        if (g == ng && rows[i].group[0]) {
            if (ng == DT_CHART_MAX_GROUPS) {
                snprintf(err, err_len, "more than %d groups (colours would repeat): '%s'", DT_CHART_MAX_GROUPS, rows[i].group);
                free(gi), free(values);
                return -1;
            }
            groups[ng++] = rows[i].group;
        }
        gi[i] = g;
        snprintf(values[i], sizeof values[i], rows[i].note[0] ? "%.2f %s" : "%.2f", rows[i].value, rows[i].note);
        if (text_width(rows[i].label) > label_w) label_w = text_width(rows[i].label);
        if (text_width(values[i]) > value_w) value_w = text_width(values[i]);
    }
    if (ref > vmax) vmax = ref; /* the reference line is on the axis */
    /* The value axis: ticks at a round step up to the largest value (its label fits above the
     * value texts' column). */
    double step = vmax > 0 ? tick_step(vmax, 5) : 1;
    int nticks = vmax > 0 ? (int)floor(vmax / step + 1e-9) + 1 : 1;
    /* The width: the rows, the legend, and the title's longest word must fit. */
    int legend_w = 0;
    for (int g = 0; g < ng; g++) legend_w += SWATCH + 8 + text_width(groups[g]) + 24;
    int w = MARGIN + label_w + GAP + BAR_W + 8 + value_w + MARGIN;
    if (w < MIN_W) w = MIN_W;
    if (2 * MARGIN + legend_w > w) w = 2 * MARGIN + legend_w;
    for (const char *p = title; *p; p += strspn(p, " ")) {
        char *word = strndup(p, strcspn(p, " "));
        if (2 * MARGIN + text_width(word) > w) w = 2 * MARGIN + text_width(word);
        p += strlen(word);
        free(word);
    }
    char **lines;
    int nl = wrap(title, w - 2 * MARGIN, &lines);
    int legend_y = 16 + nl * LINE + 4;
    img->w = w;
    img->bar_x = MARGIN + label_w + GAP;
    img->rows_y = legend_y + (ng ? LINE + 12 : 0) + 8;
    img->row_h = ROW;
    img->axis_y = img->rows_y + n * ROW;
    img->h = img->axis_y + TICK + LINE + 12;
    img->rgb = malloc((size_t)img->w * img->h * 3);
    memset(img->rgb, 255, (size_t)img->w * img->h * 3);
    canvas cv = {img, calloc((size_t)img->w * img->h, 1)};
    for (int l = 0; l < nl; l++) {
        text(&cv, MARGIN, 16 + l * LINE, lines[l]);
        free(lines[l]);
    }
    free(lines);
    for (int g = 0, x = MARGIN; g < ng; g++) {
        unsigned char rgb[3];
        dt_chart_colour(g, rgb);
        fill(&cv, x, legend_y, x + SWATCH, legend_y + SWATCH, rgb, FILL);
        text(&cv, x + SWATCH + 8, legend_y + 2, groups[g]);
        x += SWATCH + 8 + text_width(groups[g]) + 24;
    }
    int room = img->w - img->bar_x - 8 - value_w - MARGIN; /* >= BAR_W */
    img->bar_room = room;
    for (int i = 0; i < n; i++) {
        int y = img->rows_y + i * ROW, len = vmax > 0 ? (int)(room * rows[i].value / vmax) : 0;
        unsigned char rgb[3];
        dt_chart_colour(gi[i], rgb);
        fill(&cv, img->bar_x, y, img->bar_x + len, y + ROW - 8, rgb, FILL);
    }
    /* the axis with its ticks and their values, and the reference line (1.0 of a ratio) over
     * the bars, dashed; the texts after, on top */
    static const unsigned char axis[3] = {60, 60, 60}, refc[3] = {200, 30, 30};
    fill(&cv, img->bar_x, img->axis_y, img->bar_x + room + 1, img->axis_y + 1, axis, RULE);
    for (int t = 0; t < nticks; t++) {
        double v = t * step;
        int x = img->bar_x + (int)(room * v / vmax + 0.5);
        char lab[32];
        snprintf(lab, sizeof lab, "%g", v);
        fill(&cv, x, img->axis_y, x + 1, img->axis_y + TICK, axis, RULE);
        int tw = text_width(lab), tx = x - tw / 2;
        if (tx + tw > img->w - MARGIN) tx = img->w - MARGIN - tw;
        text(&cv, tx, img->axis_y + TICK + 4, lab);
    }
    if (ref > 0) {
        img->ref_x = img->bar_x + (int)(room * ref / vmax + 0.5);
        for (int y = img->rows_y - 4; y < img->axis_y; y += 6)
            fill(&cv, img->ref_x - 1, y, img->ref_x + 1, y + 4 < img->axis_y ? y + 4 : img->axis_y, refc, RULE);
    }
    for (int i = 0; i < n; i++) {
        int y = img->rows_y + i * ROW, len = vmax > 0 ? (int)(room * rows[i].value / vmax) : 0;
        text(&cv, MARGIN, y + 6, rows[i].label);
        text(&cv, img->bar_x + len + 8, y + 6, values[i]);
    }
    for (size_t p = 0; p < (size_t)img->w * img->h; p++) img->covered += cv.mask[p] == (INK | FILL);
    free(cv.mask);
    free(gi);
    free(values);
    return 0;
}

/* ---- line charts in small multiples (chart.h: dt_chart_lines) ---- */

#define PLOT_W 300   /* a panel's plot */
#define PLOT_H 190
#define PAD 8        /* between the plot's frame and its outermost points */
#define CELL_GAP 28  /* between panels */

static const unsigned char GRID[3] = {225, 225, 225}, FRAME[3] = {60, 60, 60};

/* The first index of `name` in names[0..*n) (appended when new; -1 when it would be the
 * (max+1)-th). */
static int intern(const char **names, int *n, int max, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(names[i], name)) return i;
    if (*n == max) return -1;
    names[*n] = name;
    return (*n)++;
}

static double tx(const dt_chart_panel_axes *a, double x) { return a->xlog ? log2(x) : x; }
static double ty(const dt_chart_panel_axes *a, double y) { return a->ylog ? log10(y) : y; }

void dt_chart_lines_where(const dt_chart_lines_image *li, int panel, double x, double y, int *px, int *py) {
    const dt_chart_panel_axes *a = &li->axes[panel];
    int w = li->plot_w - 2 * PAD, h = li->plot_h - 2 * PAD;
    *px = a->px + PAD + (int)lround(w * (tx(a, x) - a->x0) / (a->x1 - a->x0));
    *py = a->py + li->plot_h - PAD - (int)lround(h * (ty(a, y) - a->y0) / (a->y1 - a->y0));
}

void dt_chart_lines_free(dt_chart_lines_image *li) {
    free(li->img.rgb);
    free(li->axes);
    li->img.rgb = NULL, li->axes = NULL;
}

/* Panel p's scales and ranges from its points (of pi[] == p). */
static void panel_axes(const dt_chart_point *pts, const int *pi, int n, int p, dt_chart_panel_axes *a) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < n; i++)
        if (pi[i] == p) {
            xmin = fmin(xmin, pts[i].x), xmax = fmax(xmax, pts[i].x);
            ymin = fmin(ymin, pts[i].y), ymax = fmax(ymax, pts[i].y);
        }
    a->xlog = xmin > 0 && xmax >= 8 * xmin;
    a->ylog = ymin > 0 && ymax > 10 * ymin;
    a->x0 = tx(a, xmin), a->x1 = tx(a, xmax);
    if (a->x1 == a->x0) a->x0 -= 1, a->x1 += 1;
    if (a->ylog) {
        double span = log10(ymax) - log10(ymin);
        a->y0 = log10(ymin) - 0.04 * span, a->y1 = log10(ymax) + 0.04 * span;
    } else {
        a->y0 = ymin < 0 ? ymin : 0, a->y1 = ymax > a->y0 ? ymax + 0.04 * (ymax - a->y0) : a->y0 + 1;
    }
}

/* The y ticks of a panel (values, at most `max`): decades on a log scale (and their 2 and 5
 * times when fewer than 3 decades are in range), round steps on a linear one. */
static int y_ticks(const dt_chart_panel_axes *a, double *v, int max) {
    int n = 0;
    if (a->ylog) {
        int dec = (int)(floor(a->y1) - ceil(a->y0)) + 1;
        static const double M[3] = {1, 2, 5};
        for (int d = (int)floor(a->y0); d <= (int)ceil(a->y1) && n < max; d++)
            for (int m = 0; m < (dec < 3 ? 3 : 1) && n < max; m++) {
                double t = M[m] * pow(10, d);
                if (log10(t) >= a->y0 - 1e-9 && log10(t) <= a->y1 + 1e-9) v[n++] = t;
            }
    } else {
        double step = tick_step(a->y1 - a->y0, 4);
        for (double t = ceil(a->y0 / step - 1e-9) * step; t <= a->y1 + 1e-9 * step && n < max; t += step)
            v[n++] = fabs(t) < 1e-12 * step ? 0 : t;
    }
    return n;
}

/* The x ticks (transformed values: exponents of 2 on a log2 scale). */
static int x_ticks(const dt_chart_panel_axes *a, double *v, int max) {
    int n = 0;
    double step = a->xlog ? 1 : tick_step(a->x1 - a->x0, 5);
    for (double t = ceil(a->x0 / step - 1e-9) * step; t <= a->x1 + 1e-9 * step && n < max; t += step)
        v[n++] = fabs(t) < 1e-12 * step ? 0 : t;
    return n;
}

static void tick_label(char *s, int len, double v) { snprintf(s, (size_t)len, "%g", v); }

/* A line of 3 px from (x0, y0) to (x1, y1). */
static void segment(canvas *cv, int x0, int y0, int x1, int y1, const unsigned char rgb[3]) {
    int steps = abs(x1 - x0) > abs(y1 - y0) ? abs(x1 - x0) : abs(y1 - y0);
    for (int i = 0; i <= steps; i++) {
        int x = steps ? x0 + (int)lround((double)(x1 - x0) * i / steps) : x0;
        int y = steps ? y0 + (int)lround((double)(y1 - y0) * i / steps) : y0;
        fill(cv, x - 1, y - 1, x + 2, y + 2, rgb, RULE);
    }
}

#define MAX_TICKS 64

/* Panel p: grid, frame, tick values, names, then its lines and their points. */
static void draw_panel(canvas *cv, const dt_chart_lines_image *li, int p, const char *name, const dt_chart_point *pts,
                       const int *pi, const int *si, const int *order, int n, const char *xname, const char *yname,
                       int ycol_w) {
    const dt_chart_panel_axes *a = &li->axes[p];
    double tv[MAX_TICKS];
    char lab[64], axname[300];
    int nt = y_ticks(a, tv, MAX_TICKS), px, py;
    for (int t = 0; t < nt; t++) {
        dt_chart_lines_where(li, p, a->xlog ? exp2(a->x0) : a->x0, tv[t], &px, &py);
        fill(cv, a->px, py, a->px + li->plot_w, py + 1, GRID, RULE);
        fill(cv, a->px - TICK, py, a->px, py + 1, FRAME, RULE);
        tick_label(lab, sizeof lab, tv[t]);
        text(cv, a->px - TICK - 4 - text_width(lab), py - 6, lab);
    }
    nt = x_ticks(a, tv, MAX_TICKS);
    int plot_in = li->plot_w - 2 * PAD, every = 1, widest = 0;
    for (int t = 0; t < nt; t++) {
        tick_label(lab, sizeof lab, a->xlog ? exp2(tv[t]) : tv[t]);
        if (text_width(lab) > widest) widest = text_width(lab);
    }
    double gap = nt > 1 ? plot_in * (tv[1] - tv[0]) / (a->x1 - a->x0) : plot_in;
    while (every < nt && gap * every < widest + 10) every *= 2; /* thin the labels until they part */
    for (int t = 0; t < nt; t++) {
        double x = a->xlog ? exp2(tv[t]) : tv[t];
        dt_chart_lines_where(li, p, x, a->ylog ? pow(10, a->y0) : a->y0, &px, &py);
        fill(cv, px, a->py, px + 1, a->py + li->plot_h, GRID, RULE);
        fill(cv, px, a->py + li->plot_h, px + 1, a->py + li->plot_h + TICK, FRAME, RULE);
        if (t % every) continue;
        tick_label(lab, sizeof lab, x);
        text(cv, px - text_width(lab) / 2, a->py + li->plot_h + TICK + 4, lab);
    }
    fill(cv, a->px, a->py, a->px + li->plot_w, a->py + 1, FRAME, RULE);
    fill(cv, a->px, a->py + li->plot_h - 1, a->px + li->plot_w, a->py + li->plot_h, FRAME, RULE);
    fill(cv, a->px, a->py, a->px + 1, a->py + li->plot_h, FRAME, RULE);
    fill(cv, a->px + li->plot_w - 1, a->py, a->px + li->plot_w, a->py + li->plot_h, FRAME, RULE);
    text(cv, a->px + (li->plot_w - text_width(name)) / 2, a->py - 2 * LINE + 2, name);
    snprintf(axname, sizeof axname, "%s%s%s", yname, a->ylog && yname[0] ? ", " : "", a->ylog ? "log scale" : "");
    text(cv, a->px - ycol_w, a->py - LINE + 2, axname);
    snprintf(axname, sizeof axname, "%s%s%s", xname, a->xlog && xname[0] ? ", " : "", a->xlog ? "log2 scale" : "");
    text(cv, a->px + (li->plot_w - text_width(axname)) / 2, a->py + li->plot_h + TICK + 4 + LINE, axname);
    /* the lines: each series' points in x order (order[] sorts every point by x) */
    for (int s = 0; s < li->nseries; s++) {
        unsigned char rgb[3];
        dt_chart_colour(s, rgb);
        int have = 0, lx = 0, ly = 0;
        for (int k = 0; k < n; k++) {
            int i = order[k];
            if (pi[i] != p || si[i] != s) continue;
            dt_chart_lines_where(li, p, pts[i].x, pts[i].y, &px, &py);
            if (have) segment(cv, lx, ly, px, py, rgb);
            fill(cv, px - 3, py - 3, px + 4, py + 4, rgb, RULE);
            have = 1, lx = px, ly = py;
        }
    }
}

static const dt_chart_point *SORT_PTS;
static int by_x(const void *a, const void *b) {
    double xa = SORT_PTS[*(const int *)a].x, xb = SORT_PTS[*(const int *)b].x;
    return xa < xb ? -1 : xa > xb ? 1 : *(const int *)a - *(const int *)b;
}

/* Checks the points and numbers their panels and series (pi, si); 0 or -1 with err. */
static int lines_index(const dt_chart_point *pts, int n, dt_chart_lines_image *li, const char **panels,
                       const char **series, int *pi, int *si, char *err, int err_len) {
    for (int i = 0; i < n; i++) {
        const dt_chart_point *q = &pts[i];
        li->bad = i;
        if (!isfinite(q->x) || !isfinite(q->y))
            return snprintf(err, err_len, "point %d (panel '%s', series '%s'): x %g, y %g: not finite numbers", i + 1,
                            q->panel, q->series, q->x, q->y), -1;
        pi[i] = intern(panels, &li->npanels, n, q->panel);
        si[i] = intern(series, &li->nseries, DT_CHART_MAX_GROUPS, q->series);
        if (si[i] < 0)
            return snprintf(err, err_len, "point %d: more than %d series (colours would repeat): '%s'", i + 1,
                            DT_CHART_MAX_GROUPS, q->series), -1;
        for (int j = 0; j < i; j++)
            if (pi[j] == pi[i] && si[j] == si[i] && pts[j].x == q->x)
                return snprintf(err, err_len, "point %d: panel '%s', series '%s' has a second point at x %g (the first: point %d)",
                                i + 1, q->panel, q->series, q->x, j + 1), -1;
    }
    li->bad = -1;
    return 0;
}

int dt_chart_lines(const dt_chart_point *pts, int n, const char *title, const dt_chart_lines_opts *opts,
                   dt_chart_lines_image *li, char *err, int err_len) {
    memset(li, 0, sizeof *li);
    li->bad = -1;
    if (n < 1) return snprintf(err, err_len, "no points to draw"), -1;
    const char **panels = malloc((size_t)n * sizeof *panels), *series[DT_CHART_MAX_GROUPS];
    int *pi = malloc((size_t)n * sizeof *pi), *si = malloc((size_t)n * sizeof *si), *order = malloc((size_t)n * sizeof *order);
    if (lines_index(pts, n, li, panels, series, pi, si, err, err_len)) {
        free(panels), free(pi), free(si), free(order);
        return -1;
    }
    const char *xname = opts && opts->xname ? opts->xname : "", *yname = opts && opts->yname ? opts->yname : "";
    li->cols = opts && opts->cols > 0 ? opts->cols : (int)ceil(sqrt(li->npanels));
    if (li->cols > li->npanels) li->cols = li->npanels;
    li->rows = (li->npanels + li->cols - 1) / li->cols;
    li->plot_w = PLOT_W, li->plot_h = PLOT_H;
    li->axes = calloc((size_t)li->npanels, sizeof *li->axes);
    /* the tick value column: as wide as the widest y tick value of any panel (and the y name) */
    int ycol_w = 0;
    for (int p = 0; p < li->npanels; p++) {
        panel_axes(pts, pi, n, p, &li->axes[p]);
        double tv[MAX_TICKS];
        char lab[64];
        int nt = y_ticks(&li->axes[p], tv, MAX_TICKS);
        for (int t = 0; t < nt; t++) {
            tick_label(lab, sizeof lab, tv[t]);
            if (TICK + 4 + text_width(lab) > ycol_w) ycol_w = TICK + 4 + text_width(lab);
        }
    }
    int cell_w = ycol_w + PLOT_W + CELL_GAP, cell_h = 2 * LINE + PLOT_H + TICK + 4 + 2 * LINE + CELL_GAP;
    int w = 2 * MARGIN + li->cols * cell_w - CELL_GAP, legend_w = 0;
    for (int s = 0; s < li->nseries; s++)
        if (2 * MARGIN + 32 + text_width(series[s]) > w) w = 2 * MARGIN + 32 + text_width(series[s]);
    for (const char *p = title; *p; p += strspn(p, " ")) {
        char *word = strndup(p, strcspn(p, " "));
        if (2 * MARGIN + text_width(word) > w) w = 2 * MARGIN + text_width(word);
        p += strlen(word);
        free(word);
    }
    /* the legend's lines: entries while they fit the width */
    int legend_lines = li->nseries ? 1 : 0;
    for (int s = 0; s < li->nseries; s++) {
        int ew = 32 + text_width(series[s]) + 24;
        if (legend_w && MARGIN + legend_w + ew - 24 > w - MARGIN) legend_lines++, legend_w = 0;
        legend_w += ew;
    }
    char **tl;
    int nl = wrap(title, w - 2 * MARGIN, &tl), legend_y = 16 + nl * LINE + 4;
    int grid_y = legend_y + legend_lines * LINE + 12;
    dt_chart_image *img = &li->img;
    img->w = w, img->h = grid_y + li->rows * cell_h - CELL_GAP + 12;
    img->rgb = malloc((size_t)img->w * img->h * 3);
    memset(img->rgb, 255, (size_t)img->w * img->h * 3);
    canvas cv = {img, calloc((size_t)img->w * img->h, 1)};
    for (int l = 0; l < nl; l++) text(&cv, MARGIN, 16 + l * LINE, tl[l]), free(tl[l]);
    free(tl);
    for (int s = 0, x = MARGIN, y = legend_y; s < li->nseries; s++) {
        int ew = 32 + text_width(series[s]) + 24;
        if (x > MARGIN && x + ew - 24 > w - MARGIN) x = MARGIN, y += LINE;
        unsigned char rgb[3];
        dt_chart_colour(s, rgb);
        fill(&cv, x, y + 6, x + 24, y + 9, rgb, FILL);
        fill(&cv, x + 9, y + 4, x + 16, y + 11, rgb, FILL);
        text(&cv, x + 32, y + 2, series[s]);
        x += ew;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    SORT_PTS = pts;
    qsort(order, (size_t)n, sizeof *order, by_x);
    for (int p = 0; p < li->npanels; p++) {
        dt_chart_panel_axes *a = &li->axes[p];
        a->px = MARGIN + (p % li->cols) * cell_w + ycol_w;
        a->py = grid_y + (p / li->cols) * cell_h + 2 * LINE;
        draw_panel(&cv, li, p, panels[p], pts, pi, si, order, n, xname, yname, ycol_w);
    }
    for (size_t q = 0; q < (size_t)img->w * img->h; q++) img->covered += cv.mask[q] == (INK | FILL);
    free(cv.mask);
    free(panels), free(pi), free(si), free(order);
    return 0;
}

int dt_chart_write_png(const char *path, const dt_chart_image *img, char *err, int err_len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%.4000s.tmp.%ld", path, (long)getpid());
    if (!stbi_write_png(tmp, img->w, img->h, 3, img->rgb, img->w * 3) || rename(tmp, path)) {
        remove(tmp);
        return snprintf(err, err_len, "cannot write %s", path), -1;
    }
    return 0;
}

/* The next comma-separated field of *s, cut in place ("" when there is none). */
static char *csv_field(char **s) {
    char *f = *s;
    if (!f) return "";
    char *c = strchr(f, ',');
    *s = c ? c + 1 : NULL;
    if (c) *c = 0;
    return f;
}

/* The next field as a number into *v; 0 when it is one. */
static int csv_number(char **rest, double *v) {
    char *f = csv_field(rest), *end;
    *v = strtod(f, &end);
    return !f[0] || *end;
}

/* The points of the CSV file `in` (*at: each one's line); 0, or -1 with err. */
static int read_points(const char *in, dt_chart_point **pts, int **at, int *n, char *err, int err_len) {
    FILE *f = fopen(in, "r");
    if (!f) return snprintf(err, err_len, "cannot read %s", in), -1;
    int rc = 0;
    char *line = NULL, *copy = NULL;
    size_t cap = 0;
    for (int ln = 1; getline(&line, &cap, f) >= 0; ln++) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == '#' || !line[0]) continue;
        free(copy);
        copy = strdup(line);
        char *rest = line, *panel = csv_field(&rest), *series = csv_field(&rest);
        double x, y;
        if (csv_number(&rest, &x) || csv_number(&rest, &y) || rest) {
            snprintf(err, err_len, "%s:%d: expected panel,series,x,y (x and y numbers), got '%.200s'", in, ln, copy);
            rc = -1;
            break;
        }
        *pts = realloc(*pts, (size_t)(*n + 1) * sizeof **pts);
        *at = realloc(*at, (size_t)(*n + 1) * sizeof **at);
        (*pts)[*n] = (dt_chart_point){strdup(panel), strdup(series), x, y};
        (*at)[(*n)++] = ln;
    }
    free(line), free(copy);
    fclose(f);
    return rc;
}

int dt_chart_lines_csv(const char *in, const char *out, const char *title, const dt_chart_lines_opts *opts, char *err,
                       int err_len) {
    dt_chart_point *pts = NULL;
    int n = 0, *at = NULL, rc = read_points(in, &pts, &at, &n, err, err_len);
    dt_chart_lines_image li;
    char why[400];
    if (!rc && dt_chart_lines(pts, n, title, opts, &li, why, sizeof why)) {
        if (li.bad >= 0) snprintf(err, err_len, "%s:%d: %s", in, at[li.bad], why);
        else snprintf(err, err_len, "%s: %s", in, why);
        rc = -1;
    } else if (!rc) {
        rc = dt_chart_write_png(out, &li.img, err, err_len);
        dt_chart_lines_free(&li);
    }
    for (int i = 0; i < n; i++) free((char *)pts[i].panel), free((char *)pts[i].series);
    free(pts), free(at);
    return rc;
}
