/* chart.h: a horizontal bar chart with a value axis (and a reference line) drawn into an RGB image, sized to its text (build/chart, and
 * the tests): the label column as wide as the widest label, the image as wide as the bars'
 * value texts and the legend need (at least 900 px), the title wrapped at spaces to that width.
 * Bars are coloured by their group, named in a legend under the title; rows without groups get
 * one colour and no legend. Text is stb_easy_font at twice its size, printable ASCII only. */
#ifndef DT_CHART_H
#define DT_CHART_H

typedef struct {
    const char *label; /* left of the bar */
    double value;      /* the bar's length, against the largest value */
    const char *note;  /* after the value, right of the bar ("" for none) */
    const char *group; /* the bar's colour and legend entry ("" for none) */
} dt_chart_row;

#define DT_CHART_MAX_GROUPS 6 /* colours that stay apart */

typedef struct {
    unsigned char *rgb; /* w x h x 3, row-major; free() it */
    int w, h;
    int bar_x, rows_y, row_h; /* where bar i starts: (bar_x, rows_y + i * row_h) */
    int bar_room;             /* the length of a bar of the axis' largest value */
    int axis_y;               /* the value axis' line, under the bars (ticks and their values below it) */
    int ref_x;                /* the reference line's x (-1: none) */
    long clipped;             /* text pixels that fell outside the image (0: nothing cut) */
    long covered;             /* text pixels under a bar or a legend swatch (0: nothing hidden) */
} dt_chart_image;

/* The colour of the bars of group g (0 .. DT_CHART_MAX_GROUPS-1, in the order the groups first
 * appear in the rows), or of every bar when no row has a group (g = 0). */
void dt_chart_colour(int g, unsigned char rgb[3]);

/* Draws n rows under `title`, over a value axis from 0 (ticks at a round step, their values
 * below it); ref > 0 draws a dashed reference line at that value across the bars (1.0 for a
 * chart of ratios: what is longer is slower than the reference), the axis long enough to hold
 * it. 0, or -1 with a message in err (err_len bytes) when there are no rows, a value or ref is
 * negative or not finite, or there are more than DT_CHART_MAX_GROUPS groups. */
int dt_chart_draw(const dt_chart_row *rows, int n, const char *title, double ref, dt_chart_image *img, char *err,
                  int err_len);

#endif
