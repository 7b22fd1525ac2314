/* A model's weights in safetensors under torchvision's names (train/dt_weights.h): an export
 * loads back bit for bit into a model of another seed, layout and precision, and exports again
 * to the same bytes; the names and counts are torchvision's state_dict's; every way a file can
 * disagree with the model (dtype, shape, a missing or an extra tensor, a NaN, a negative
 * variance, another fc) is its own error, leaving the model untouched; offset convs a file lacks
 * start at zero, so a plain network's weights make a deformable one that computes the same
 * function; a failed export leaves the previous file; init_from=, export= and
 * build/train --export through the trainer. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "train/dt_config.h"
#include "core/dt_device.h"
#include "ops/init/dt_init.h"
#include "tests/train_testutil.h"
#include "tests/dt_test.h"
#include "train/dt_trainer.h"
#include "train/dt_weights.h"
#include "train/train_cli.h"

/* ---- whole models ---- */

/* A small resnet18 (width 1/16: 4 to 32 channels) with deformable stages 2 and 4 (DCNv2, random
 * offset convs), built from `seed`. */
static void small_model(dt_resnet *m, uint64_t seed, dt_precision prec, dt_layout layout, dt_resnet_model model) {
    dt_resnet_cfg c = dt_resnet_cfg_default(5);
    c.model = model;
    c.width = 0.0625f;
    c.deform_stages = 2 | 8;
    c.deform_version = 2;
    c.offset_init_std = 0.05f;
    c.precision = prec;
    c.layout = layout;
    dt_set_seed(seed);
    dt_init_reseed();
    dt_resnet_init(m, &c, DT_CPU);
}

/* Every parameter and buffer of a and b: 1 when bitwise equal (in logical order). */
static int same_state(const dt_resnet *a, const dt_resnet *b, char *first_diff, size_t cap) {
    if (a->params.n != b->params.n || a->n_buffers != b->n_buffers) return snprintf(first_diff, cap, "counts"), 0;
    for (int i = 0; i < a->params.n + a->n_buffers; i++) {
        const dt_tensor *x = i < a->params.n ? a->params.items[i]->t : a->buffers[i - a->params.n];
        const dt_tensor *y = i < b->params.n ? b->params.items[i]->t : b->buffers[i - b->params.n];
        float *hx = dt_tensor_host_copy(x), *hy = dt_tensor_host_copy(y);
        int same = x->numel == y->numel && !memcmp(hx, hy, (size_t)x->numel * sizeof *hx);
        free(hx);
        free(hy);
        if (!same) return snprintf(first_diff, cap, "%s", x->name), 0;
    }
    return 1;
}

static void *file_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return *n = 0, NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*n + 1); /* NUL-terminated: logs are read as text */
    if (fread(b, 1, *n, f) != *n) *n = 0;
    b[*n] = 0;
    fclose(f);
    return b;
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    void *x = file_bytes(a, &na), *y = file_bytes(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

DT_TEST(weights_export_loads_back_bitwise_in_every_layout) {
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/a.safetensors", dt_test_tmpdir());
    snprintf(b, sizeof b, "%s/b.safetensors", dt_test_tmpdir());
    dt_err err;
    dt_resnet src;
    small_model(&src, 1, DT_PREC_FP32, DT_NCHW, DT_RESNET18);
    EXPECT_MSG(dt_weights_export(&src, 7, a, &err) == 0, "%s", err.msg);
    /* into another seed's model: f32 NCHW, f32 NHWC, bf16 NHWC (the masters are f32 in each) */
    struct {
        dt_precision p;
        dt_layout l;
    } kinds[3] = {{DT_PREC_FP32, DT_NCHW}, {DT_PREC_FP32, DT_NHWC}, {DT_PREC_BF16, DT_NHWC}};
    for (int k = 0; k < 3; k++) {
        dt_resnet dst;
        small_model(&dst, 2, kinds[k].p, kinds[k].l, DT_RESNET18);
        char diff[96] = "";
        EXPECT_MSG(!same_state(&src, &dst, diff, sizeof diff), "the two seeds made the same model");
        dt_safetensors st;
        dt_weights_report rep;
        EXPECT_MSG(dt_safetensors_read(a, &st, &err) == 0, "%s", err.msg);
        int rc = dt_weights_load_state(&st, &dst.params, dst.buffers, dst.n_buffers, 0, a, &rep, &err);
        EXPECT_MSG(rc == 0, "%s", err.msg);
        EXPECT_EQ_INT(rep.loaded, dst.params.n + dst.n_buffers);
        EXPECT_EQ_INT(rep.offset_zero, 0);
        EXPECT_EQ_INT(rep.ignored, dst.n_bns); /* the num_batches_tracked the export wrote */
        EXPECT_MSG(same_state(&src, &dst, diff, sizeof diff), "kind %d: tensor %s differs after the load", k, diff);
        /* and out again: the same bytes */
        EXPECT_MSG(dt_weights_export(&dst, 7, b, &err) == 0, "%s", err.msg);
        EXPECT_MSG(same_file(a, b), "kind %d: the second export differs from the first", k);
        dt_safetensors_free(&st);
        dt_resnet_free(&dst);
    }
    /* what the file holds besides the weights */
    dt_safetensors st;
    if (dt_safetensors_read(a, &st, &err) == 0) {
        const dt_st_tensor *nbt = dt_safetensors_find(&st, "layer2.0.bn1.num_batches_tracked");
        int64_t steps = 0;
        EXPECT(nbt && nbt->dtype == DT_ST_I64 && nbt->ndim == 0);
        if (nbt) memcpy(&steps, nbt->data, 8);
        EXPECT_EQ_INT(steps, 7);
        EXPECT(!strcmp(dt_safetensors_meta(&st, "deftc_model"), "resnet18"));
        EXPECT(!strcmp(dt_safetensors_meta(&st, "deform"), "2,4"));
        EXPECT(!strcmp(dt_safetensors_meta(&st, "deform_version"), "2"));
        EXPECT(!strcmp(dt_safetensors_meta(&st, "format"), "pt"));
        const dt_st_tensor *off = dt_safetensors_find(&st, "layer4.1.conv2.offset.weight");
        EXPECT(off && off->ndim == 4 && off->shape[0] == 27 && off->shape[1] == 32);
        dt_safetensors_free(&st);
    }
    dt_resnet_free(&src);
}

/* torchvision's state_dict of resnet18 has 122 entries, resnet50's 320 (62 / 161 parameters,
 * 2 statistics and a counter per batch norm); the names do not depend on the width. */
DT_TEST(weights_export_has_torchvision_names) {
    /* resnext50_32x4d's is resnet50's (320); mobilenet_v2's 314 (158 parameters, 52 batch norms) */
    struct { dt_resnet_model model; int entries; const char *names[4]; } want[4] = {
        {DT_RESNET18, 122, {"conv1.weight", "layer2.0.downsample.0.weight", "layer4.1.bn2.running_var", "fc.bias"}},
        {DT_RESNET50, 320, {"layer3.5.conv3.weight", "layer4.0.downsample.1.num_batches_tracked", "bn1.bias", "fc.weight"}},
        {DT_RESNEXT50_32X4D, 320, {"layer3.5.conv2.weight", "layer4.0.downsample.1.num_batches_tracked", "bn1.bias",
                                   "fc.weight"}},
        {DT_MOBILENET_V2, 314, {"features.0.0.weight", "features.1.conv.2.running_var", "features.17.conv.3.bias",
                                "classifier.1.weight"}},
    };
    for (int k = 0; k < 4; k++) {
        dt_resnet_cfg c = dt_resnet_cfg_default(1000);
        c.model = want[k].model;
        c.width = want[k].model == DT_RESNEXT50_32X4D ? 0.25f : 0.0625f;
        dt_resnet m;
        dt_resnet_init(&m, &c, DT_CPU);
        char p[700];
        snprintf(p, sizeof p, "%s/%d.safetensors", dt_test_tmpdir(), k);
        dt_err err;
        dt_safetensors st;
        EXPECT_MSG(dt_weights_export(&m, 0, p, &err) == 0 && dt_safetensors_read(p, &st, &err) == 0, "%s", err.msg);
        EXPECT_EQ_INT(st.n, want[k].entries);
        for (int i = 0; i < 4; i++) EXPECT_MSG(dt_safetensors_find(&st, want[k].names[i]), "no %s", want[k].names[i]);
        const dt_st_tensor *w = dt_safetensors_find(&st, k == 3 ? "features.0.0.weight" : "conv1.weight");
        int64_t stem = k == 2 ? 16 : k == 3 ? 8 : 4, kk = k == 3 ? 3 : 7;
        EXPECT(w && w->ndim == 4 && w->shape[0] == stem && w->shape[1] == 3 && w->shape[2] == kk);
        EXPECT(!strcmp(dt_safetensors_meta(&st, "deftc_model"), dt_resnet_model_name(want[k].model)));
        dt_safetensors_free(&st);
        dt_resnet_free(&m);
    }
}

/* resnext50_32x4d (grouped 3x3 weights [C, C/32, 3, 3]) and mobilenet_v2 (depthwise [C, 1, 3, 3])
 * at small widths: exported from one seed's model, loaded into another seed's in f32 NCHW, f32
 * NHWC and bf16 NHWC, every tensor bit for bit, and exported again to the same bytes. */
DT_TEST(weights_resnext_and_mobilenet_round_trip_bitwise) {
    const dt_resnet_model models[2] = {DT_RESNEXT50_32X4D, DT_MOBILENET_V2};
    const float widths[2] = {0.25f, 0.25f};
    struct {
        dt_precision p;
        dt_layout l;
    } kinds[3] = {{DT_PREC_FP32, DT_NCHW}, {DT_PREC_FP32, DT_NHWC}, {DT_PREC_BF16, DT_NHWC}};
    for (int mi = 0; mi < 2; mi++) {
        char a[700], b[700];
        snprintf(a, sizeof a, "%s/%s_a.safetensors", dt_test_tmpdir(), dt_resnet_model_name(models[mi]));
        snprintf(b, sizeof b, "%s/%s_b.safetensors", dt_test_tmpdir(), dt_resnet_model_name(models[mi]));
        dt_err err;
        dt_resnet_cfg c = dt_resnet_cfg_default(5);
        c.model = models[mi];
        c.width = widths[mi];
        dt_resnet src;
        dt_set_seed(1);
        dt_init_reseed();
        dt_resnet_init(&src, &c, DT_CPU);
        EXPECT_MSG(dt_weights_export(&src, 3, a, &err) == 0, "%s", err.msg);
        for (int k = 0; k < 3; k++) {
            dt_resnet_cfg d = c;
            d.precision = kinds[k].p;
            d.layout = kinds[k].l;
            dt_resnet dst;
            dt_set_seed(2);
            dt_init_reseed();
            dt_resnet_init(&dst, &d, DT_CPU);
            char diff[96] = "";
            EXPECT_MSG(!same_state(&src, &dst, diff, sizeof diff), "the two seeds made the same model");
            dt_safetensors st;
            dt_weights_report rep;
            EXPECT_MSG(dt_safetensors_read(a, &st, &err) == 0, "%s", err.msg);
            EXPECT_MSG(dt_weights_load_state(&st, &dst.params, dst.buffers, dst.n_buffers, 0, a, &rep, &err) == 0, "%s",
                       err.msg);
            EXPECT_EQ_INT(rep.loaded, dst.params.n + dst.n_buffers);
            EXPECT_EQ_INT(rep.ignored, dst.n_bns);
            EXPECT_MSG(same_state(&src, &dst, diff, sizeof diff), "%s kind %d: tensor %s differs after the load",
                       dt_resnet_model_name(models[mi]), k, diff);
            EXPECT_MSG(dt_weights_export(&dst, 3, b, &err) == 0, "%s", err.msg);
            EXPECT_MSG(same_file(a, b), "%s kind %d: the second export differs from the first",
                       dt_resnet_model_name(models[mi]), k);
            dt_safetensors_free(&st);
            dt_resnet_free(&dst);
        }
        dt_resnet_free(&src);
    }
}

/* ---- loading: a small state of named tensors ---- */

/* The model: conv1.weight [2, 3, 1, 1] (NHWC), a deformable layer's weight and offset conv,
 * a batch norm's parameters and statistics, fc. */
typedef struct {
    dt_params ps;
    dt_tensor *buf[2];
} tiny;

static void tiny_init(tiny *t) {
    memset(t, 0, sizeof *t);
    int64_t c1[4] = {2, 3, 1, 1}, w[4] = {2, 2, 3, 3}, ow[4] = {18, 2, 3, 3}, ob[1] = {18}, c[1] = {2}, fw[2] = {3, 2},
            fb[1] = {3};
    dt_param_new(&t->ps, "conv1.weight", 4, c1, DT_CPU, DT_NHWC, 1);
    dt_param_new(&t->ps, "layer1.0.conv1.weight", 4, w, DT_CPU, DT_NCHW, 1);
    dt_param_new(&t->ps, "layer1.0.conv1.offset.weight", 4, ow, DT_CPU, DT_NCHW, 1);
    dt_param_new(&t->ps, "layer1.0.conv1.offset.bias", 1, ob, DT_CPU, DT_NCHW, 0);
    dt_param_new(&t->ps, "bn1.weight", 1, c, DT_CPU, DT_NCHW, 0);
    dt_param_new(&t->ps, "bn1.bias", 1, c, DT_CPU, DT_NCHW, 0);
    dt_param_new(&t->ps, "fc.weight", 2, fw, DT_CPU, DT_NCHW, 1);
    dt_param_new(&t->ps, "fc.bias", 1, fb, DT_CPU, DT_NCHW, 0);
    const char *bn[2] = {"bn1.running_mean", "bn1.running_var"};
    for (int i = 0; i < 2; i++) {
        t->buf[i] = dt_tensor_new_unscoped(1, c, DT_CPU, DT_F32, DT_NCHW);
        dt_tensor_set_name(t->buf[i], bn[i]);
    }
    for (int i = 0; i < t->ps.n; i++) dt_tensor_fill(t->ps.items[i]->t, -1.0f); /* "its init" */
    for (int i = 0; i < 2; i++) dt_tensor_fill(t->buf[i], 0.5f);
}

static void tiny_free(tiny *t) {
    dt_params_free(&t->ps);
    for (int i = 0; i < 2; i++) dt_tensor_free(t->buf[i]);
}

/* The file's tensors: each of the model's with values i + k / 8 (exact in every float dtype),
 * plus `extra` (a name, or NULL); `drop` names one to leave out (or NULL), `dtype` is every
 * tensor's, `odd` names one whose shape gets a last dimension of 2, `bad` (element 1 of fc.weight)
 * a value to put in it. */
typedef struct {
    const char *drop, *extra, *odd, *drop2;
    dt_st_dtype dtype;
    double bad;
    int has_bad;
} file_spec;

static int tiny_file(const tiny *t, const file_spec *s, dt_safetensors *st) {
    dt_st_item items[16];
    int64_t shapes[16][DT_MAX_DIMS], scalar = 3;
    void *data[16];
    int n = 0;
    for (int i = 0; i < t->ps.n + 2; i++) {
        const dt_tensor *x = i < t->ps.n ? t->ps.items[i]->t : t->buf[i - t->ps.n];
        if ((s->drop && !strcmp(x->name, s->drop)) || (s->drop2 && !strcmp(x->name, s->drop2))) continue;
        memcpy(shapes[n], x->shape, sizeof x->shape);
        int odd = s->odd && !strcmp(x->name, s->odd);
        if (odd) shapes[n][x->ndim - 1] = 2;
        int64_t numel = dt_numel(x->ndim, shapes[n]);
        size_t es = dt_st_dtype_size(s->dtype);
        data[n] = calloc((size_t)numel, es);
        for (int64_t k = 0; k < numel; k++) {
            double v = i + k / 8.0;
            if (s->has_bad && !strcmp(x->name, "fc.weight") && k == 1) v = s->bad;
            float f = (float)v;
            uint16_t h = s->dtype == DT_ST_BF16 ? dt_bf16_from_float(f) : dt_f16_from_float(f);
            int32_t i32 = (int32_t)v;
            if (s->dtype == DT_ST_F32) memcpy((char *)data[n] + 4 * k, &f, 4);
            else if (s->dtype == DT_ST_F64) memcpy((char *)data[n] + 8 * k, &v, 8);
            else if (s->dtype == DT_ST_I32) memcpy((char *)data[n] + 4 * k, &i32, 4);
            else memcpy((char *)data[n] + 2 * k, &h, 2);
        }
        items[n] = (dt_st_item){x->name, s->dtype, x->ndim, shapes[n], data[n]};
        n++;
    }
    int nd = n;
    items[n++] = (dt_st_item){"bn1.num_batches_tracked", DT_ST_I64, 0, NULL, &scalar};
    if (s->extra) items[n++] = (dt_st_item){s->extra, DT_ST_I64, 0, NULL, &scalar};
    void *file;
    size_t size;
    dt_err err;
    int rc = dt_safetensors_encode(items, n, NULL, 0, &file, &size, &err) ||
             dt_safetensors_parse(file, size, "t.safetensors", st, &err);
    for (int i = 0; i < nd; i++) free(data[i]);
    return rc;
}

/* Loads the file `s` describes into a fresh tiny model; returns the load's status, with its
 * message in err and report in rep; *model_kept = 1 when the model was left as it was. */
static int try_load(const file_spec *s, int partial, dt_weights_report *rep, dt_err *err, int *model_kept) {
    tiny t;
    tiny_init(&t);
    dt_safetensors st;
    int rc = -1;
    if (tiny_file(&t, s, &st) == 0) {
        rc = dt_weights_load_state(&st, &t.ps, t.buf, 2, partial, "t.safetensors", rep, err);
        dt_safetensors_free(&st);
    }
    *model_kept = dt_data_f32(t.ps.items[0]->t)[0] == -1.0f && dt_data_f32(t.buf[0])[0] == 0.5f;
    tiny_free(&t);
    return rc;
}

static void expect_refused_at(const file_spec *s, int partial, const char *needle, int line) {
    dt_weights_report rep;
    dt_err err = {{0}};
    int kept;
    if (try_load(s, partial, &rep, &err, &kept) == 0) dt_test_fail(__FILE__, line, "the load was accepted");
    else if (!strstr(err.msg, needle) || !strstr(err.msg, "t.safetensors"))
        dt_test_fail(__FILE__, line, "message '%s' lacks '%s'", err.msg, needle);
    if (!kept) dt_test_fail(__FILE__, line, "a refused load changed the model");
    if (dt_test_verbose()) printf("    %s\n", err.msg);
}
#define EXPECT_REFUSED(spec, partial, needle) expect_refused_at(spec, partial, needle, __LINE__)

DT_TEST(weights_load_converts_and_zeroes_offset_convs) {
    for (int d = 0; d < 4; d++) {
        dt_st_dtype dts[4] = {DT_ST_F32, DT_ST_BF16, DT_ST_F16, DT_ST_F64};
        tiny t;
        tiny_init(&t);
        file_spec s = {.dtype = dts[d], .drop = d == 1 ? "layer1.0.conv1.offset.weight" : NULL,
                       .drop2 = d == 1 ? "layer1.0.conv1.offset.bias" : NULL};
        dt_safetensors st;
        dt_weights_report rep;
        dt_err err;
        EXPECT_EQ_INT(tiny_file(&t, &s, &st), 0);
        EXPECT_MSG(dt_weights_load_state(&st, &t.ps, t.buf, 2, 0, "t.safetensors", &rep, &err) == 0, "%s", err.msg);
        EXPECT_EQ_INT(rep.loaded, d == 1 ? 8 : 10);
        EXPECT_EQ_INT(rep.offset_zero, d == 1);
        EXPECT_EQ_INT(rep.ignored, 1);
        /* conv1.weight is NHWC in the model: its logical values are the file's */
        float *c1 = dt_tensor_host_copy(t.ps.items[0]->t);
        for (int k = 0; k < 6; k++) EXPECT_NEAR(c1[k], k / 8.0, 0);
        free(c1);
        EXPECT_NEAR(dt_data_f32(t.buf[1])[1], 9 + 1 / 8.0, 0);
        float off = dt_data_f32(t.ps.items[2]->t)[5], ob = dt_data_f32(t.ps.items[3]->t)[17];
        EXPECT_NEAR(off, d == 1 ? 0.0 : 2 + 5 / 8.0, 0); /* absent: zero, whatever it was */
        EXPECT_NEAR(ob, d == 1 ? 0.0 : 3 + 17 / 8.0, 0);
        char line[600];
        dt_weights_describe(&rep, "t.safetensors", 2, line, sizeof line);
        if (d == 1)
            EXPECT_MSG(strstr(line, "; 1 offset conv starts at zero offsets and zero mask logits: a mask of 0.5"), "%s", line);
        dt_safetensors_free(&st);
        tiny_free(&t);
    }
}

DT_TEST(weights_load_refuses_what_does_not_fit_the_model) {
    file_spec s = {.dtype = DT_ST_I32};
    EXPECT_REFUSED(&s, 0, "tensor 'conv1.weight' is I32: the model's weights need a float dtype");
    s = (file_spec){.dtype = DT_ST_F32, .odd = "layer1.0.conv1.weight"};
    EXPECT_REFUSED(&s, 0, "tensor 'layer1.0.conv1.weight' is [2, 2, 3, 2] in the file but [2, 2, 3, 3] in the model");
    s = (file_spec){.dtype = DT_ST_F32, .drop = "bn1.weight"};
    EXPECT_REFUSED(&s, 0, "t.safetensors lacks 1 tensor of the model: 'bn1.weight'");
    s = (file_spec){.dtype = DT_ST_F32, .drop = "bn1.running_var", .drop2 = "conv1.weight"};
    EXPECT_REFUSED(&s, 0, "lacks 2 tensors of the model: 'conv1.weight', 'bn1.running_var'");
    s = (file_spec){.dtype = DT_ST_F32, .extra = "layer9.0.conv1.weight"};
    EXPECT_REFUSED(&s, 0, "has 1 tensor the model does not: 'layer9.0.conv1.weight'");
    s = (file_spec){.dtype = DT_ST_F32, .extra = "bn7.num_batches_tracked"}; /* a counter of a BN the model lacks */
    EXPECT_REFUSED(&s, 0, "'bn7.num_batches_tracked'");
    s = (file_spec){.dtype = DT_ST_F32, .has_bad = 1, .bad = NAN};
    EXPECT_REFUSED(&s, 0, "tensor 'fc.weight' holds a NaN at element 1");
    s = (file_spec){.dtype = DT_ST_F64, .has_bad = 1, .bad = 1e300};
    EXPECT_REFUSED(&s, 0, "holds an infinity at element 1 (an F64 infinity, or a value beyond the float range)");
    s = (file_spec){.dtype = DT_ST_F32, .odd = "fc.bias"};
    EXPECT_REFUSED(&s, 0, "'fc.bias' is [2] in the file but [3] in the model (another class count? init_from_partial=1");
    /* a negative variance: the statistics are the last tensors; a file whose running_var holds
     * -1 comes from the model's own values being negative: built by hand */
    tiny t;
    tiny_init(&t);
    float neg[2] = {1.0f, -1.0f}, *vals[10];
    dt_st_item items[10];
    for (int i = 0; i < t.ps.n + 2; i++) {
        const dt_tensor *x = i < t.ps.n ? t.ps.items[i]->t : t.buf[i - t.ps.n];
        vals[i] = calloc((size_t)x->numel, sizeof(float));
        items[i] = (dt_st_item){x->name, DT_ST_F32, x->ndim, x->shape, i == t.ps.n + 1 ? neg : vals[i]};
    }
    void *file;
    size_t size;
    dt_err err;
    dt_safetensors st;
    dt_weights_report rep;
    EXPECT(dt_safetensors_encode(items, t.ps.n + 2, NULL, 0, &file, &size, &err) == 0 &&
           dt_safetensors_parse(file, size, "t.safetensors", &st, &err) == 0);
    EXPECT(dt_weights_load_state(&st, &t.ps, t.buf, 2, 0, "t.safetensors", &rep, &err) != 0 &&
           strstr(err.msg, "'bn1.running_var' holds a negative variance at element 1"));
    for (int i = 0; i < t.ps.n + 2; i++) free(vals[i]);
    dt_safetensors_free(&st);
    tiny_free(&t);
}

DT_TEST(weights_partial_load_keeps_another_fc) {
    dt_weights_report rep;
    dt_err err;
    int kept;
    file_spec s = {.dtype = DT_ST_F32, .odd = "fc.bias"}; /* [2] where the model has [3] */
    EXPECT_MSG(try_load(&s, 1, &rep, &err, &kept) == 0, "%s", err.msg);
    EXPECT_EQ_INT(rep.fc_kept, 1);
    EXPECT_EQ_INT(rep.loaded, 9);
    s = (file_spec){.dtype = DT_ST_F32, .drop = "fc.weight", .drop2 = "fc.bias"};
    EXPECT_MSG(try_load(&s, 1, &rep, &err, &kept) == 0, "%s", err.msg);
    EXPECT_EQ_INT(rep.fc_kept, 2);
    char line[600];
    dt_weights_describe(&rep, "t.safetensors", 1, line, sizeof line);
    EXPECT_MSG(strstr(line, "8 tensors from t.safetensors; fc.weight and fc.bias are of another shape in the file or "
                              "absent: left at their initialization"), "%s", line);
    /* partial does not excuse anything else */
    s = (file_spec){.dtype = DT_ST_F32, .odd = "layer1.0.conv1.weight"};
    EXPECT_REFUSED(&s, 1, "'layer1.0.conv1.weight' is [2, 2, 3, 2] in the file");
}

/* ---- writing ---- */

typedef struct {
    const char *path;
} export_case;

/* In a child whose files may not grow past 4 KiB (a full disk): the export fails. */
static void export_limited(void *arg) {
    export_case *e = arg;
    dt_resnet m;
    small_model(&m, 3, DT_PREC_FP32, DT_NCHW, DT_RESNET18);
    signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead of killing the process */
    struct rlimit r = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &r);
    dt_err err;
    if (dt_weights_export(&m, 0, e->path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    exit(0);
}

DT_TEST(weights_export_is_atomic_and_refuses_odd_paths) {
    char p[700], copy[700];
    snprintf(p, sizeof p, "%s/w.safetensors", dt_test_tmpdir());
    snprintf(copy, sizeof copy, "%s/copy.safetensors", dt_test_tmpdir());
    dt_resnet m;
    small_model(&m, 1, DT_PREC_FP32, DT_NCHW, DT_RESNET18);
    dt_err err;
    EXPECT(dt_weights_export(&m, 0, p, &err) == 0 && dt_weights_export(&m, 0, copy, &err) == 0);
    export_case e = {p};
    EXPECT_DEATH(export_limited, &e, "File too large");
    EXPECT_MSG(same_file(p, copy), "a failed export changed the previous file");
    DIR *d = opendir(dt_test_tmpdir());
    struct dirent *de;
    int tmp = 0;
    while (d && (de = readdir(d))) tmp += strstr(de->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    EXPECT_EQ_INT(tmp, 0);
    EXPECT(dt_weights_export(&m, 0, dt_test_tmpdir(), &err) != 0 && strstr(err.msg, "a folder"));
    EXPECT(dt_weights_export_prepare("/dev/null", &err) != 0 && strstr(err.msg, "a device"));
    snprintf(p, sizeof p, "%s/new/folder/w.safetensors", dt_test_tmpdir());
    EXPECT_MSG(dt_weights_export_prepare(p, &err) == 0, "%s", err.msg); /* the folders are made */
    dt_resnet_free(&m);
}

/* ---- through the trainer ---- */

/* Two synthetic steps of a quarter-width resnet18 on the CPU, logging to PREFIX.log. */
static void run_cfg(dt_train_cfg *c, const char *name) {
    dt_test_run_cfg(c, NULL, 64, 0.25f, 4);
    c->classes = 4;
    c->steps = 2;
    c->quiet = 1;
    c->seed = 5;
    snprintf(c->log, sizeof c->log, "%s/%s", dt_test_tmpdir(), name);
}

static int log_has(const dt_train_cfg *c, const char *needle) {
    char p[700];
    snprintf(p, sizeof p, "%s.log", c->log);
    size_t n;
    char *b = file_bytes(p, &n);
    int has = b && strstr(b, needle) != NULL;
    free(b);
    return has;
}

/* build/train --export CHECKPOINT OUT in a child: its exit status is the program's. */
static void cli_export(void *arg) { exit(dt_train_cli(4, arg)); }

DT_TEST(weights_through_the_trainer_and_build_train_export) {
    dt_set_quiet(1);
    dt_train_cfg a, b, p;
    dt_train_result r;
    dt_err err;
    char plain[400], deformed[400], again[400];
    snprintf(plain, sizeof plain, "%s/plain.safetensors", dt_test_tmpdir());
    snprintf(deformed, sizeof deformed, "%s/deformed.safetensors", dt_test_tmpdir());
    snprintf(again, sizeof again, "%s/again.safetensors", dt_test_tmpdir());
    /* a plain run that exports its end */
    run_cfg(&a, "a");
    snprintf(a.export_path, sizeof a.export_path, "%s", plain);
    snprintf(a.checkpoint, sizeof a.checkpoint, "%s/a.ckpt", dt_test_tmpdir());
    char *ckpt = a.checkpoint;
    EXPECT_MSG(dt_train_run(&a, &r, &err) == 0, "%s", err.msg);
    dt_train_result_free(&r);
    EXPECT_MSG(log_has(&a, "export: the weights at step 2 to"), "no export line");
    /* from it: a plain run and an all-deformable (DCNv1) one start with the same function, so
     * the same first loss */
    run_cfg(&p, "p");
    snprintf(p.init_from, sizeof p.init_from, "%s", plain);
    float first[2];
    EXPECT_MSG(dt_train_run(&p, &r, &err) == 0, "%s", err.msg);
    first[0] = (float)r.first_loss;
    dt_train_result_free(&r);
    EXPECT_MSG(log_has(&p, "init_from: 102 tensors from") && log_has(&p, "20 num_batches_tracked ignored"), "no init_from line");
    run_cfg(&b, "b");
    snprintf(b.init_from, sizeof b.init_from, "%s", plain);
    strcpy(b.deform, "all");
    snprintf(b.export_path, sizeof b.export_path, "%s", deformed);
    EXPECT_MSG(dt_train_run(&b, &r, &err) == 0, "%s", err.msg);
    first[1] = (float)r.first_loss;
    dt_train_result_free(&r);
    EXPECT_MSG(log_has(&b, "102 tensors from") && log_has(&b, "; 16 offset convs start at zero offsets;"), "no offset line");
    EXPECT_NEAR(first[1], first[0], 1e-5 * first[0]);
    /* the deformable export resumes the deformable model strictly; a plain one refuses it */
    dt_train_cfg c;
    run_cfg(&c, "c");
    c.overwrite = 1; /* the runs below reuse the log prefix c */
    snprintf(c.init_from, sizeof c.init_from, "%s", deformed);
    EXPECT(dt_train_run(&c, &r, &err) != 0 && strstr(err.msg, "has 32 tensors the model does not"));
    dt_train_result_free(&r);
    strcpy(c.deform, "all");
    EXPECT_MSG(dt_train_run(&c, &r, &err) == 0, "%s", err.msg);
    dt_train_result_free(&r);
    /* two CPU replicas: each loads the file (and replica 0's state is broadcast anyway) */
    snprintf(c.gpus, sizeof c.gpus, "2");
    c.batch = 2;
    EXPECT_MSG(dt_train_run(&c, &r, &err) == 0, "%s", err.msg);
    dt_train_result_free(&r);
    EXPECT_MSG(log_has(&c, "data parallel: 2 replicas") && log_has(&c, "init_from: 134 tensors from"), "replicas");
    snprintf(c.init_from, sizeof c.init_from, "%s/missing.safetensors", dt_test_tmpdir());
    EXPECT(dt_train_run(&c, &r, &err) == 1 && strstr(err.msg, "cannot open safetensors file"));
    dt_train_result_free(&r);
    /* a checkpoint of the end, exported without training two ways: the bytes of export= */
    char *argv[4] = {"train", "--export", ckpt, again};
    EXPECT_OUTPUT(cli_export, argv, "are in");
    EXPECT_MSG(same_file(again, plain), "build/train --export differs from export=");
    remove(again);
    run_cfg(&c, "d");
    c.log[0] = 0;
    snprintf(c.resume, sizeof c.resume, "%s", ckpt);
    snprintf(c.export_path, sizeof c.export_path, "%s", again);
    EXPECT_MSG(dt_train_run(&c, &r, &err) == 0, "%s", err.msg);
    dt_train_result_free(&r);
    EXPECT_MSG(same_file(again, plain), "a finished resume's export differs from export=");
    char *bad[4] = {"train", "--export", plain, again};
    EXPECT_DEATH(cli_export, bad, "is not a deftc checkpoint");
}
