/* chart.h: a horizontal bar chart drawn into an RGB image, sized to its text (build/chart, and
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
    long clipped;             /* text pixels that fell outside the image (0: nothing cut) */
    long covered;             /* text pixels under a bar or a legend swatch (0: nothing hidden) */
} dt_chart_image;

/* The colour of the bars of group g (0 .. DT_CHART_MAX_GROUPS-1, in the order the groups first
 * appear in the rows), or of every bar when no row has a group (g = 0). */
void dt_chart_colour(int g, unsigned char rgb[3]);

/* Draws n rows under `title`. 0, or -1 with a message in err (err_len bytes) when there are no
 * rows, a value is negative or not finite, or there are more than DT_CHART_MAX_GROUPS groups. */
int dt_chart_draw(const dt_chart_row *rows, int n, const char *title, dt_chart_image *img, char *err, int err_len);

#endif
