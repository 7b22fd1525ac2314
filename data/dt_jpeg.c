#include "data/dt_jpeg.h"

#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "data/dt_image_limits.h"

#ifndef LIBJPEG_TURBO_VERSION
#error "JPEG=1 needs libjpeg-turbo (jpeg_mem_src, DCT scaling, gray to RGB); build with JPEG=0 for stb_image"
#endif

/* libjpeg's error manager, with a way back into the call that failed. */
typedef struct {
    struct jpeg_error_mgr pub;
    struct jpeg_progress_mgr progress;
    jmp_buf back;
    char msg[JMSG_LENGTH_MAX];
} guard;

static void fail(j_common_ptr c) {
    guard *g = (guard *)c->err;
    (*c->err->format_message)(c, g->msg);
    longjmp(g->back, 1);
}

/* level -1: a warning about corrupt data; only a file that ends early is an error. Higher
 * levels are trace messages. Nothing is printed. */
static void on_message(j_common_ptr c, int level) {
    if (level == -1 && c->err->msg_code == JWRN_JPEG_EOF) fail(c);
}

static void on_progress(j_common_ptr c) {
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > DT_JPEG_MAX_SCANS) {
        guard *g = (guard *)c->err;
        snprintf(g->msg, sizeof g->msg, "more than %d progressive scans", DT_JPEG_MAX_SCANS);
        longjmp(g->back, 1);
    }
}

/* Sets up a decompressor on the bytes with the guard installed. The caller has called setjmp
 * on g->back before. */
static void begin(j_decompress_ptr cinfo, guard *g, const void *data, size_t bytes) {
    cinfo->err = jpeg_std_error(&g->pub);
    g->pub.error_exit = fail;
    g->pub.emit_message = on_message;
    jpeg_create_decompress(cinfo);
    g->progress.progress_monitor = on_progress;
    cinfo->progress = &g->progress;
    jpeg_mem_src(cinfo, data, (unsigned long)bytes);
}

int dt_jpeg_probe(const void *data, size_t bytes, const char *name, int *w, int *h, dt_err *err) {
    struct jpeg_decompress_struct cinfo;
    guard g;
    memset(&cinfo, 0, sizeof cinfo); /* destroy is safe whenever the guard jumps back */
    if (setjmp(g.back)) {
        jpeg_destroy_decompress(&cinfo);
        return dt_errf(err, "cannot decode %s: %s", name, g.msg);
    }
    begin(&cinfo, &g, data, bytes);
    jpeg_read_header(&cinfo, TRUE);
    *w = (int)cinfo.image_width;
    *h = (int)cinfo.image_height;
    jpeg_destroy_decompress(&cinfo);
    return 0;
}

size_t dt_jpeg_coef_bytes(const struct jpeg_decompress_struct *cinfo) {
    if (!jpeg_has_multiple_scans((j_decompress_ptr)cinfo)) return 0;
    /* jdcoefct.c's whole-image buffer: every block of every component, padded to whole MCUs */
    size_t n = 0;
    for (int c = 0; c < cinfo->num_components; c++) {
        const jpeg_component_info *ci = &cinfo->comp_info[c];
        size_t bw = dt_ceil_div(ci->width_in_blocks, ci->h_samp_factor) * ci->h_samp_factor;
        size_t bh = dt_ceil_div(ci->height_in_blocks, ci->v_samp_factor) * ci->v_samp_factor;
        n += bw * bh * DCTSIZE2 * sizeof(JCOEF);
    }
    return n;
}

/* PIL's and stb_image's CMYK to RGB for Adobe files (stored inverted): v * k / 255, rounded. */
static uint8_t times_k(unsigned v, unsigned k) {
    unsigned t = v * k + 128;
    return (uint8_t)((t + (t >> 8)) >> 8);
}

int dt_jpeg_decode(const void *data, size_t bytes, const char *name, int64_t max_pixels, double min_scale, dt_image *img,
                   dt_err *err) {
    img->w = img->h = 0;
    img->pix = NULL;
    struct jpeg_decompress_struct cinfo;
    guard g;
    memset(&cinfo, 0, sizeof cinfo);
    /* Written between setjmp and longjmp, so volatile. */
    uint8_t *volatile pix = NULL, *volatile row4 = NULL;
    if (setjmp(g.back)) {
        jpeg_destroy_decompress(&cinfo);
        free(pix);
        free(row4);
        return dt_errf(err, "cannot decode %s: %s", name, g.msg);
    }
    begin(&cinfo, &g, data, bytes);
    jpeg_read_header(&cinfo, TRUE);
    if (dt_image_check_size(name, cinfo.image_width, cinfo.image_height, max_pixels, err)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    if (!cmyk && cinfo.num_components != 1 && cinfo.num_components != 3) {
        snprintf(g.msg, sizeof g.msg, "%d colour components", cinfo.num_components);
        longjmp(g.back, 1);
    }
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB; /* libjpeg turns YCCK into CMYK */
    unsigned m = 1;
    while (m < 8 && m < min_scale * 8) m *= 2;
    cinfo.scale_num = m;
    cinfo.scale_denom = 8;
    jpeg_calc_output_dimensions(&cinfo);
    int ow = (int)cinfo.output_width, oh = (int)cinfo.output_height;
    size_t pixels = (size_t)ow * oh * 3, coef = dt_jpeg_coef_bytes(&cinfo);
    /* the pixels, the DCT coefficients of every block when the file has several scans, and
     * the decoder's strips: up to 4 MCU rows of 32 samples per component, the CMYK row */
    size_t need = pixels + coef + (size_t)ow * cinfo.num_components * 4 * 32 + (size_t)ow * 4;
    if (dt_image_check_memory(name, cinfo.image_width, cinfo.image_height,
                              coef ? "multi-scan JPEG (its DCT coefficients and the pixels)" : "JPEG", need, max_pixels,
                              err)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    /* The same bound inside libjpeg, in case its buffers outgrow the estimate: a coefficient
     * buffer past it needs a backing store, which this build does not have (an error). */
    cinfo.mem->max_memory_to_use = (long)(dt_image_decode_budget(max_pixels) - pixels);
    jpeg_start_decompress(&cinfo);
    pix = dt_xmalloc((size_t)ow * oh * 3);
    if (cmyk) row4 = dt_xmalloc((size_t)ow * 4);
    while (cinfo.output_scanline < cinfo.output_height) {
        uint8_t *row = pix + (size_t)cinfo.output_scanline * ow * 3;
        JSAMPROW rp = cmyk ? row4 : row;
        jpeg_read_scanlines(&cinfo, &rp, 1);
        for (int x = 0; cmyk && x < ow; x++)
            for (int c = 0; c < 3; c++) row[x * 3 + c] = times_k(row4[x * 4 + c], row4[x * 4 + 3]);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    free(row4);
    img->w = ow;
    img->h = oh;
    img->pix = pix;
    return 0;
}
