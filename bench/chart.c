/* The bar chart's layout and drawing (chart.h): every size comes from the text it must hold. */
#include "bench/chart.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
