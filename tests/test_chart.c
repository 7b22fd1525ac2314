/* The reproduction chart (bench/chart.c, build/chart): the longest labels of bench/reproduce.sh
 * and a long title are drawn whole - no text outside the image, none under a bar (the fixed
 * 900 px layout cut `deft_fuse1_stage1_swizzle0 f...` and titles over ~80 characters) - and the
 * bar colours mean the groups of the legend; a value axis with round ticks and, for ratios, the
 * dashed 1.0 line. */
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
