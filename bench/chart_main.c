/* build/chart IN.csv OUT.png [TITLE [REF]]: a horizontal bar chart of `label,value[,note[,group]]`
 * rows (lines starting with # and blank lines are skipped), drawn by chart.c with stb_easy_font's
 * glyphs and written with stb_image_write - no plotting library needed. Bars of one group share
 * a colour, named in a legend. Used by `make reproduce` (bench/reproduce.sh).
 *
 * build/chart --lines IN.csv OUT.png [TITLE [XNAME [YNAME [COLS]]]]: line charts in small
 * multiples of `panel,series,x,y` rows (x and y numbers; # lines and blank lines skipped): one
 * panel per panel name, COLS to a row, one line per series, each panel's axes fitted to its
 * points (log scales where the range needs them, chart.h). Used by `make dw-chart`
 * (bench/dw_chart.py: docs/depthwise_dilation.png). */
#include <stdlib.h>

#include "core/dt_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/chart.h"

/* The next comma-separated field of *s, cut in place ("" when there is none). */
static char *field(char **s) {
    char *f = *s;
    if (!f) return "";
    char *c = strchr(f, ',');
    *s = c ? c + 1 : NULL;
    if (c) *c = 0;
    return f;
}

static int lines_main(int argc, char **argv) {
    if (argc < 4 || argc > 8) {
        fprintf(stderr, "usage: build/chart --lines IN.csv OUT.png [TITLE [XNAME [YNAME [COLS]]]]   (rows: "
                        "panel,series,x,y)\n");
        return 2;
    }
    dt_chart_lines_opts opts = {0, argc > 5 ? argv[5] : "", argc > 6 ? argv[6] : ""};
    if (argc > 7) {
        char *end;
        long c = strtol(argv[7], &end, 10);
        if (!argv[7][0] || *end || c < 1 || c > 100) {
            fprintf(stderr, "chart: COLS '%s' is not a number of panels to a row (1-100)\n", argv[7]);
            return 2;
        }
        opts.cols = (int)c;
    }
    char err[600];
    if (dt_chart_lines_csv(argv[2], argv[3], argc > 4 ? argv[4] : argv[2], &opts, err, sizeof err)) {
        fprintf(stderr, "chart: %s\n", err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    if (argc > 1 && !strcmp(argv[1], "--lines")) return lines_main(argc, argv);
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: build/chart IN.csv OUT.png [TITLE [REF]]   (rows: label,value[,note[,group]]; REF: a "
                        "dashed line at that value, 1 for ratios)\n"
                        "       build/chart --lines IN.csv OUT.png [TITLE [XNAME [YNAME [COLS]]]]   (rows: "
                        "panel,series,x,y: line charts in small multiples)\n");
        return 2;
    }
    double ref = 0;
    if (argc > 4) {
        char *end;
        ref = strtod(argv[4], &end);
        if (!argv[4][0] || *end || !(ref >= 0)) {
            fprintf(stderr, "chart: REF '%s' is not a number >= 0\n", argv[4]);
            return 2;
        }
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "chart: cannot read %s\n", argv[1]);
        return 1;
    }
    dt_chart_row *rows = NULL;
    int n = 0;
    char *line = NULL;
    size_t cap = 0;
    for (int ln = 1; getline(&line, &cap, f) >= 0; ln++) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == '#' || !line[0]) continue;
        char *rest = line, *label = field(&rest), *value = field(&rest), *note = field(&rest), *end;
        const char *group = rest ? rest : ""; /* the rest of the line */
        double v = strtod(value, &end);
        if (!value[0] || *end) {
            fprintf(stderr, "chart: %s:%d: expected label,value[,note[,group]] with a number as value, got '%s'\n",
                    argv[1], ln, value);
            return 1;
        }
        rows = realloc(rows, (size_t)(n + 1) * sizeof *rows);
        rows[n++] = (dt_chart_row){strdup(label), v, strdup(note), strdup(group)};
    }
    free(line);
    fclose(f);
    dt_chart_image img;
    char err[300];
    if (dt_chart_draw(rows, n, argc > 3 ? argv[3] : argv[1], ref, &img, err, sizeof err)) {
        fprintf(stderr, "chart: %s: %s\n", argv[1], err);
        return 1;
    }
    int rc = dt_chart_write_png(argv[2], &img, err, sizeof err);
    if (rc) fprintf(stderr, "chart: %s\n", err);
    free(img.rgb);
    for (int i = 0; i < n; i++) free((char *)rows[i].label), free((char *)rows[i].note), free((char *)rows[i].group);
    free(rows);
    return rc;
}
