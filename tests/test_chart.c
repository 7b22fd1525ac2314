/* The reproduction chart (bench/chart.c, build/chart): the longest labels of bench/reproduce.sh
 * and a long title are drawn whole - no text outside the image, none under a bar (the fixed
 * 900 px layout cut `deft_fuse1_stage1_swizzle0 f...` and titles over ~80 characters) - and the
 * bar colours mean the groups of the legend; a value axis with round ticks and, for ratios, the
 * dashed 1.0 line. The line charts in small multiples (build/chart --lines, the depthwise
 * dilation chart): panels in a grid, log scales where the range needs them, each series' points
 * in its colour where they belong, the CSV read into a PNG and bad rows refused by line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/chart.h"
#include "tests/dt_test.h"

static const dt_chart_row ROWS[] = {
    {"plain fp32 b64", 1.00, "(28.7 ms)", "plain"},
    {"unfused fp32 b64", 2.16, "(62.0 ms)", "all-deformable unfused"},
    {"deft fp32 b64", 1.39, "(39.9 ms)", "all-deformable deft"},
    {"deft_fuse1_stage1_swizzle0 fp32 b64", 1.69, "(48.7 ms)", "all-deformable deft"},
    {"deft_fuse1_stage1_swizzle0 bf16 b256", 0.69, "(75.6 ms)", "all-deformable deft"},
    {"unfused_det fp32 b64", 2.38, "(68.4 ms)", "all-deformable unfused"},
    {"plain bf16 b256", 0.47, "(51.6 ms)", "plain"},
};
#define NROWS ((int)(sizeof ROWS / sizeof *ROWS))

static void pixel(const dt_chart_image *im, int x, int y, unsigned char rgb[3]) {
    memcpy(rgb, im->rgb + ((size_t)y * im->w + x) * 3, 3);
}

DT_TEST(chart_fits_its_text_and_colours_by_group) {
    const char *title = "ResNet-18 step time on an H200, normalized to plain fp32 at the same batch (lower is better), "
                        "commit 5982a9b, median of 30 steps after 10 warm-up steps";
    dt_chart_image im;
    char err[200];
    EXPECT_MSG(dt_chart_draw(ROWS, NROWS, title, 1.0, &im, err, sizeof err) == 0, "%s", err);
    EXPECT_MSG(im.clipped == 0, "%ld text pixels fell outside the %d x %d image", im.clipped, im.w, im.h);
    EXPECT_MSG(im.covered == 0, "%ld text pixels are under a bar or a swatch", im.covered);
    EXPECT_MSG(im.w >= 900 && im.w <= 1400, "width %d", im.w);
    /* every bar starts in its group's colour; groups in the order they first appear */
    const char *order[] = {"plain", "all-deformable unfused", "all-deformable deft"};
    for (int i = 0; i < NROWS; i++) {
        int g = 0;
        while (strcmp(order[g], ROWS[i].group)) g++;
        unsigned char want[3], got[3];
        dt_chart_colour(g, want);
        pixel(&im, im.bar_x + 1, im.rows_y + i * im.row_h + 4, got);
        EXPECT_MSG(!memcmp(want, got, 3), "row %d (%s): bar colour %d,%d,%d, its group's %d,%d,%d", i, ROWS[i].label, got[0],
                   got[1], got[2], want[0], want[1], want[2]);
    }
    /* the value axis under the bars, and the dashed 1.0 line across them, where 1.0 is */
    unsigned char c[3];
    pixel(&im, im.bar_x + im.bar_room / 2, im.axis_y, c);
    EXPECT_MSG(c[0] < 100 && c[0] == c[1] && c[1] == c[2], "no axis line at y %d: %d,%d,%d", im.axis_y, c[0], c[1], c[2]);
    EXPECT_MSG(im.axis_y >= im.rows_y + NROWS * im.row_h - 8 && im.axis_y < im.h - 20, "axis at %d of %d", im.axis_y, im.h);
    EXPECT_EQ_INT(im.ref_x, im.bar_x + (int)(im.bar_room * 1.0 / 2.38 + 0.5)); /* 2.38: the largest value */
    int red = 0;
    for (int y = im.rows_y; y < im.axis_y; y++) {
        pixel(&im, im.ref_x, y, c);
        red += c[0] == 200 && c[1] == 30 && c[2] == 30;
    }
    EXPECT_MSG(red > (im.axis_y - im.rows_y) / 2, "the 1.0 line covers %d of %d px", red, im.axis_y - im.rows_y);
    /* tick values under the axis: dark pixels in the band below it, left and right */
    int ink_left = 0, ink_right = 0;
    for (int y = im.axis_y + 8; y < im.h; y++)
        for (int x = im.bar_x - 10; x < im.bar_x + im.bar_room + 20 && x < im.w; x++) {
            pixel(&im, x, y, c);
            if (c[0] < 100) *(x < im.bar_x + im.bar_room / 2 ? &ink_left : &ink_right) += 1;
        }
    EXPECT_MSG(ink_left > 20 && ink_right > 20, "tick values: %d, %d dark px", ink_left, ink_right);
    /* the legend: one swatch of each group's colour above the bars */
    for (int g = 0; g < 3; g++) {
        unsigned char want[3], got[3];
        dt_chart_colour(g, want);
        int seen = 0;
        for (int y = 0; y < im.rows_y && !seen; y++)
            for (int x = 0; x < im.w && !seen; x++) pixel(&im, x, y, got), seen = !memcmp(want, got, 3);
        EXPECT_MSG(seen, "no legend swatch for group %d (%s)", g, order[g]);
    }
    free(im.rgb);
    /* without groups: one colour, no legend; bad rows are errors */
    dt_chart_row plain[2] = {{"a", 1, "", ""}, {"b", 2, "", ""}};
    EXPECT(dt_chart_draw(plain, 2, "t", 0, &im, err, sizeof err) == 0);
    unsigned char c0[3], c1[3], want[3];
    dt_chart_colour(0, want);
    pixel(&im, im.bar_x + 1, im.rows_y + 4, c0);
    pixel(&im, im.bar_x + 1, im.rows_y + im.row_h + 4, c1);
    EXPECT(!memcmp(c0, want, 3) && !memcmp(c1, want, 3));
    EXPECT_EQ_INT(im.ref_x, -1); /* no reference asked: none drawn */
    free(im.rgb);
    /* a reference beyond the values stretches the axis to hold it */
    EXPECT(dt_chart_draw(plain, 2, "t", 4.0, &im, err, sizeof err) == 0 && im.ref_x == im.bar_x + im.bar_room);
    EXPECT(im.clipped == 0 && im.covered == 0);
    free(im.rgb);
    EXPECT(dt_chart_draw(plain, 2, "t", NAN, &im, err, sizeof err) != 0 && strstr(err, "reference"));
    dt_chart_row mixed[2] = {{"a", 1, "", "g"}, {"b", 2, "", ""}};
    EXPECT(dt_chart_draw(mixed, 2, "t", 0, &im, err, sizeof err) != 0 && strstr(err, "every row names a group or none"));
    dt_chart_row nan_row[1] = {{"a", NAN, "", ""}};
    EXPECT(dt_chart_draw(nan_row, 1, "t", 0, &im, err, sizeof err) != 0 && strstr(err, "not a finite non-negative number"));
    dt_chart_row many[DT_CHART_MAX_GROUPS + 1];
    char names[DT_CHART_MAX_GROUPS + 1][4];
    for (int i = 0; i <= DT_CHART_MAX_GROUPS; i++) {
        names[i][0] = (char)('a' + i), names[i][1] = 0;
        many[i] = (dt_chart_row){names[i], 1, "", names[i]};
    }
    EXPECT(dt_chart_draw(many, DT_CHART_MAX_GROUPS + 1, "t", 0, &im, err, sizeof err) != 0 && strstr(err, "more than 6 groups"));
    /* bytes the font has no glyph for are drawn as '?', not read out of its tables */
    dt_chart_row odd[1] = {{"caf\xc3\xa9\x01", 1, "\x7f", ""}};
    EXPECT(dt_chart_draw(odd, 1, "t\xff", 0, &im, err, sizeof err) == 0 && im.clipped == 0);
    free(im.rgb);
}

/* 2 panels x 2 series: panel "a" over 1..8 with a 100x range (log2 x, log10 y), panel "b" over a
 * narrow range (linear both). */
static const dt_chart_point PTS[] = {
    {"a", "fast", 1, 0.01}, {"a", "fast", 2, 0.02}, {"a", "fast", 8, 0.05}, {"a", "slow", 4, 1.0}, {"a", "slow", 1, 0.5},
    {"b", "fast", 1, 2.0},  {"b", "slow", 1, 3.0},  {"b", "slow", 3, 4.0},  {"b", "fast", 3, 2.5},
};
#define NPTS ((int)(sizeof PTS / sizeof *PTS))

DT_TEST(chart_lines_draw_panels_with_their_scales) {
    dt_chart_lines_image li;
    char err[300];
    dt_chart_lines_opts opts = {0, "dilation", "ms"};
    EXPECT_MSG(dt_chart_lines(PTS, NPTS, "a title long enough to be wrapped at least once across the panels of this chart "
                                         "so that the wrapping is exercised as well",
                              &opts, &li, err, sizeof err) == 0,
               "%s", err);
    EXPECT_EQ_INT(li.npanels, 2);
    EXPECT_EQ_INT(li.nseries, 2);
    EXPECT(li.cols == 2 && li.rows == 1); /* about the square root of 2 panels to a row */
    EXPECT_MSG(li.img.clipped == 0 && li.img.covered == 0, "clipped %ld, covered %ld", li.img.clipped, li.img.covered);
    EXPECT(li.axes[0].xlog && li.axes[0].ylog && !li.axes[1].xlog && !li.axes[1].ylog);
    EXPECT(li.axes[1].y0 == 0); /* a linear y from 0 */
    EXPECT(li.axes[1].px > li.axes[0].px + li.plot_w && li.axes[1].py == li.axes[0].py);
    /* every point's marker in its series' colour, inside its panel's plot */
    for (int i = 0; i < NPTS; i++) {
        int p = PTS[i].panel[0] - 'a', s = strcmp(PTS[i].series, "fast") != 0, x, y;
        dt_chart_lines_where(&li, p, PTS[i].x, PTS[i].y, &x, &y);
        const dt_chart_panel_axes *a = &li.axes[p];
        EXPECT_MSG(x > a->px && x < a->px + li.plot_w && y > a->py && y < a->py + li.plot_h, "point %d at %d,%d", i, x, y);
        unsigned char want[3], got[3];
        dt_chart_colour(s, want);
        pixel(&li.img, x, y, got);
        EXPECT_MSG(!memcmp(want, got, 3), "point %d: %d,%d,%d, not its series' colour", i, got[0], got[1], got[2]);
    }
    /* log10 y: 0.01 -> 0.1 and 0.1 -> 1 the same height apart */
    int x, y1, y2, y3;
    dt_chart_lines_where(&li, 0, 1, 0.01, &x, &y1);
    dt_chart_lines_where(&li, 0, 1, 0.1, &x, &y2);
    dt_chart_lines_where(&li, 0, 1, 1.0, &x, &y3);
    EXPECT_MSG(abs((y1 - y2) - (y2 - y3)) <= 1, "decades %d and %d px high", y1 - y2, y2 - y3);
    dt_chart_lines_free(&li);
    /* one to a row: a column of panels */
    opts.cols = 1;
    EXPECT(dt_chart_lines(PTS, NPTS, "t", &opts, &li, err, sizeof err) == 0 && li.rows == 2 && li.axes[1].py > li.axes[0].py);
    EXPECT(li.img.clipped == 0 && li.img.covered == 0);
    dt_chart_lines_free(&li);
    /* bad points: errors naming the point */
    dt_chart_point dup[2] = {{"a", "s", 1, 1}, {"a", "s", 1, 2}};
    EXPECT(dt_chart_lines(dup, 2, "t", NULL, &li, err, sizeof err) != 0 && li.bad == 1 && strstr(err, "second point at x 1"));
    dt_chart_point inf[1] = {{"a", "s", 1, INFINITY}};
    EXPECT(dt_chart_lines(inf, 1, "t", NULL, &li, err, sizeof err) != 0 && li.bad == 0 && strstr(err, "not finite"));
    EXPECT(dt_chart_lines(inf, 0, "t", NULL, &li, err, sizeof err) != 0 && strstr(err, "no points"));
    dt_chart_point many[DT_CHART_MAX_GROUPS + 1];
    char names[DT_CHART_MAX_GROUPS + 1][4];
    for (int i = 0; i <= DT_CHART_MAX_GROUPS; i++) {
        names[i][0] = (char)('a' + i), names[i][1] = 0;
        many[i] = (dt_chart_point){"p", names[i], 1, 1};
    }
    EXPECT(dt_chart_lines(many, DT_CHART_MAX_GROUPS + 1, "t", NULL, &li, err, sizeof err) != 0 &&
           li.bad == DT_CHART_MAX_GROUPS && strstr(err, "more than 6 series"));
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* The PNG's size from its IHDR chunk (bytes 16-23, big-endian); 0 when unreadable. */
static int png_size(const char *path, int *w, int *h) {
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int ok = fread(b, 1, 24, f) == 24 && !memcmp(b + 1, "PNG", 3) && !memcmp(b + 12, "IHDR", 4);
    fclose(f);
    *w = b[16] << 24 | b[17] << 16 | b[18] << 8 | b[19];
    *h = b[20] << 24 | b[21] << 16 | b[22] << 8 | b[23];
    return ok;
}

DT_TEST(chart_lines_csv_to_png_and_bad_rows_named_by_line) {
    char in[600], out[600], err[800];
    snprintf(in, sizeof in, "%s/lines.csv", dt_test_tmpdir());
    snprintf(out, sizeof out, "%s/lines.png", dt_test_tmpdir());
    write_file(in, "# panel,series,x,y\n\nk 1,rb,1,0.04\nk 1,rb,2,0.05\nk 1,cudnn,1,0.3\nk 1,cudnn,2,0.2\n"
                   "k 4,rb,1,0.1\r\nk 4,rb,2,0.12\n");
    dt_chart_lines_opts opts = {2, "dilation", "ms"};
    EXPECT_MSG(dt_chart_lines_csv(in, out, "two panels", &opts, err, sizeof err) == 0, "%s", err);
    int w = 0, h = 0;
    EXPECT_MSG(png_size(out, &w, &h), "no PNG at %s", out);
    dt_chart_lines_image li;
    dt_chart_point two[1] = {{"k 1", "rb", 1, 0.04}};
    EXPECT(dt_chart_lines(two, 1, "two panels", &opts, &li, err, sizeof err) == 0);
    EXPECT_MSG(w > 2 * li.plot_w && h > li.plot_h && h < 3 * li.plot_h + 200, "a %d x %d PNG for 2 panels in a row", w, h);
    dt_chart_lines_free(&li);
    /* a row that is not panel,series,x,y: refused, its line named, the PNG left as it was */
    write_file(in, "# c\nk 1,rb,1,0.04\nk 1,rb,two,0.05\n");
    EXPECT(dt_chart_lines_csv(in, out, "t", &opts, err, sizeof err) != 0);
    EXPECT_MSG(strstr(err, "lines.csv:3: expected panel,series,x,y") && strstr(err, "'k 1,rb,two,0.05'"), "%s", err);
    write_file(in, "k 1,rb,1,0.04,extra\n");
    EXPECT(dt_chart_lines_csv(in, out, "t", &opts, err, sizeof err) != 0 && strstr(err, "lines.csv:1: expected"));
    write_file(in, "k 1,rb,1\n");
    EXPECT(dt_chart_lines_csv(in, out, "t", &opts, err, sizeof err) != 0 && strstr(err, "lines.csv:1: expected"));
    /* a point the chart refuses: the line it came from */
    write_file(in, "k 1,rb,1,0.04\n\nk 1,rb,1,0.05\n");
    EXPECT_MSG(dt_chart_lines_csv(in, out, "t", &opts, err, sizeof err) != 0 && strstr(err, "lines.csv:3: ") &&
                   strstr(err, "second point"),
               "%s", err);
    write_file(in, "# nothing\n");
    EXPECT(dt_chart_lines_csv(in, out, "t", &opts, err, sizeof err) != 0 && strstr(err, "no points"));
    EXPECT_MSG(png_size(out, &w, &h), "the PNG of the good CSV is gone");
    snprintf(in, sizeof in, "%s/missing.csv", dt_test_tmpdir());
    EXPECT(dt_chart_lines_csv(in, out, "t", &opts, err, sizeof err) != 0 && strstr(err, "cannot read"));
}
