/* chart.h: build/chart's drawing into RGB images, sized to their text (build/chart, and the tests).
 * The horizontal bar chart: a value axis (and a reference line), the label column as wide as the
 * widest label, the image as wide as the bars' value texts and the legend need (at least 900 px),
 * the title wrapped at spaces to that width. Bars are coloured by their group, named in a legend
 * under the title; rows without groups get one colour and no legend. Line charts in small
 * multiples (dt_chart_lines, below; build/chart --lines). Text is stb_easy_font at twice its size,
 * printable ASCII only. */
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

/* Line charts in small multiples (build/chart --lines): a grid of panels, `cols` to a row, each
 * a plot of its points' lines, one per series (a colour, named in the legend under the title;
 * at most DT_CHART_MAX_GROUPS series). Panels and series in the order they first appear; a
 * series' points joined in x order. Each panel's axes fit its own points: x on a log2 scale when
 * every x > 0 and the largest is >= 8x the smallest, y on a log10 scale when every y > 0 and the
 * largest is > 10x the smallest (the axis name then says "log2 scale" / "log scale"), linear
 * otherwise (y from 0 when no y is negative). */
typedef struct {
    const char *panel;  /* the panel's name, above it */
    const char *series; /* the line's colour and legend entry */
    double x, y;
} dt_chart_point;

typedef struct {
    int cols;                 /* panels to a row (<= 0: about the square root of their number) */
    const char *xname, *yname; /* the axes' names ("" for none) */
} dt_chart_lines_opts;

typedef struct {
    double x0, x1, y0, y1; /* the ranges the plot spans (their logs on a log scale) */
    int xlog, ylog;        /* the scales: log2 x, log10 y */
    int px, py;            /* the plot's top left corner (plot_w x plot_h) */
} dt_chart_panel_axes;

typedef struct {
    dt_chart_image img;        /* rgb, w, h, clipped and covered as for the bar chart (the rest unused) */
    int npanels, nseries, cols, rows;
    int plot_w, plot_h;        /* every panel's plot */
    dt_chart_panel_axes *axes; /* npanels, in the order the panels first appear */
    int bad;                   /* on an error about one point: its index (else -1) */
} dt_chart_lines_image;

/* Point p's pixel in panel `panel`'s plot (after a successful dt_chart_lines; for the tests). */
void dt_chart_lines_where(const dt_chart_lines_image *li, int panel, double x, double y, int *px, int *py);

/* Frees what dt_chart_lines allocated (the image and the axes). */
void dt_chart_lines_free(dt_chart_lines_image *li);

/* Draws n points under `title`. 0, or -1 with a message in err (and li->bad the point's index
 * where one is to blame) when there are no points, an x or y is not finite, two points of one
 * panel and series share an x, or there are more than DT_CHART_MAX_GROUPS series. */
int dt_chart_lines(const dt_chart_point *pts, int n, const char *title, const dt_chart_lines_opts *opts,
                   dt_chart_lines_image *li, char *err, int err_len);

/* build/chart --lines: the `panel,series,x,y` rows of the CSV file `in` (x and y numbers; lines
 * starting with # and blank lines skipped) drawn by dt_chart_lines and written to the PNG `out`.
 * 0, or -1 with a message in err naming the file and, where one is to blame, its line. */
int dt_chart_lines_csv(const char *in, const char *out, const char *title, const dt_chart_lines_opts *opts, char *err,
                       int err_len);

/* img as a PNG at path, whole or not at all (a failed write leaves the previous file): 0, or -1
 * with a message in err. */
int dt_chart_write_png(const char *path, const dt_chart_image *img, char *err, int err_len);

#endif
