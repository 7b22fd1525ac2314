/* build/chart IN.csv OUT.png [TITLE]: a horizontal bar chart of `label,value[,note]` rows
 * (lines starting with # are skipped), drawn with stb_easy_font's glyph quads and written
 * with stb_image_write - no plotting library needed. Used by `make reproduce`. */
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
#include "stb_image_write.h"

#define W 900
#define ROW 34

static unsigned char *img;
static int H;

static void rect(int x0, int y0, int x1, int y1, unsigned char r, unsigned char g, unsigned char b) {
    for (int y = y0 < 0 ? 0 : y0; y < y1 && y < H; y++)
        for (int x = x0 < 0 ? 0 : x0; x < x1 && x < W; x++) {
            unsigned char *p = img + (y * W + x) * 3;
            p[0] = r, p[1] = g, p[2] = b;
        }
}

/* stb_easy_font emits quads of 4 vertices (x, y, z, color) per glyph stroke; scale 2x. */
static void text(int x, int y, const char *s) {
    static char buf[60000];
    int q = stb_easy_font_print(0, 0, (char *)s, NULL, buf, sizeof buf);
    float *v = (float *)buf;
    for (int i = 0; i < q; i++) {
        float *a = v + i * 16, *c = a + 8;
        rect(x + (int)(a[0] * 2), y + (int)(a[1] * 2), x + (int)(c[0] * 2), y + (int)(c[1] * 2), 30, 30, 30);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: build/chart IN.csv OUT.png [TITLE]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "chart: cannot read %s\n", argv[1]);
        return 1;
    }
    char labels[64][96], notes[64][64], line[512];
    double vals[64], vmax = 0;
    int n = 0;
    while (n < 64 && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char *c1 = strchr(line, ',');
        if (!c1) continue;
        *c1 = 0;
        snprintf(labels[n], sizeof labels[n], "%.95s", line);
        char *c2 = strchr(c1 + 1, ',');
        notes[n][0] = 0;
        if (c2) {
            *c2 = 0;
            snprintf(notes[n], sizeof notes[n], "%s", c2 + 1);
            notes[n][strcspn(notes[n], "\r\n")] = 0;
        }
        vals[n] = atof(c1 + 1);
        if (vals[n] > vmax) vmax = vals[n];
        n++;
    }
    fclose(f);
    if (!n) {
        fprintf(stderr, "chart: no rows in %s\n", argv[1]);
        return 1;
    }
    H = 70 + n * ROW + 20;
    img = malloc((size_t)W * H * 3);
    memset(img, 255, (size_t)W * H * 3);
    text(20, 16, argc > 3 ? argv[3] : argv[1]);
    int x0 = 330, xw = W - x0 - 220;
    for (int i = 0; i < n; i++) {
        int y = 60 + i * ROW;
        text(20, y + 6, labels[i]);
        int len = vmax > 0 ? (int)(xw * vals[i] / vmax) : 0;
        rect(x0, y, x0 + len, y + ROW - 8, (unsigned char)(70 + 20 * (i % 3)), 110, 180);
        char v[96];
        snprintf(v, sizeof v, "%.2f %s", vals[i], notes[i]);
        text(x0 + len + 8, y + 6, v);
    }
    if (!stbi_write_png(argv[2], W, H, 3, img, W * 3)) {
        fprintf(stderr, "chart: cannot write %s\n", argv[2]);
        return 1;
    }
    free(img);
    return 0;
}
