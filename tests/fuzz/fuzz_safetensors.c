/* libFuzzer target: a safetensors file as init_from= meets it. The reader
 * (dt_safetensors_parse) on any bytes; of what it accepts, every tensor converted to fp32 whole
 * (ASan checks that it lies inside the file), every name found again, and the file encoded
 * again (dt_safetensors_encode) and read back: the same tensors, bytes and metadata, or the
 * target aborts. Then the load into a small model's state (dt_weights_load_state, as
 * replica_setup does for init_from=), strict or partial by the last byte. The seed
 * tiny_state.safetensors holds that model's state, so that the copies are reached. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/dt_weights.h"

static volatile float g_sink; /* where the values read go, so that the reads stay */

/* The model (as tests/test_weights.c's): conv1.weight [2, 3, 1, 1] channels last, a deformable
 * layer's weight and offset conv, a batch norm, fc; made once, on the CPU. */
static dt_params g_ps;
static dt_tensor *g_buf[2];

static void setup(void) {
    int64_t c1[4] = {2, 3, 1, 1}, w[4] = {2, 2, 3, 3}, ow[4] = {18, 2, 3, 3}, ob[1] = {18}, c[1] = {2}, fw[2] = {3, 2},
            fb[1] = {3};
    dt_param_new(&g_ps, "conv1.weight", 4, c1, DT_CPU, DT_NHWC, 1);
    dt_param_new(&g_ps, "layer1.0.conv1.weight", 4, w, DT_CPU, DT_NCHW, 1);
    dt_param_new(&g_ps, "layer1.0.conv1.offset.weight", 4, ow, DT_CPU, DT_NCHW, 1);
    dt_param_new(&g_ps, "layer1.0.conv1.offset.bias", 1, ob, DT_CPU, DT_NCHW, 0);
    dt_param_new(&g_ps, "bn1.weight", 1, c, DT_CPU, DT_NCHW, 0);
    dt_param_new(&g_ps, "bn1.bias", 1, c, DT_CPU, DT_NCHW, 0);
    dt_param_new(&g_ps, "fc.weight", 2, fw, DT_CPU, DT_NCHW, 1);
    dt_param_new(&g_ps, "fc.bias", 1, fb, DT_CPU, DT_NCHW, 0);
    const char *bn[2] = {"bn1.running_mean", "bn1.running_var"};
    for (int i = 0; i < 2; i++) {
        g_buf[i] = dt_tensor_new_unscoped(1, c, DT_CPU, DT_F32, DT_NCHW);
        dt_tensor_set_name(g_buf[i], bn[i]);
    }
}

/* st written again and read back must be st. */
static void check_round_trip(const dt_safetensors *st) {
    dt_st_item *items = malloc((size_t)(st->n ? st->n : 1) * sizeof *items);
    for (int i = 0; i < st->n; i++)
        items[i] = (dt_st_item){st->t[i].name, st->t[i].dtype, st->t[i].ndim, st->t[i].shape, st->t[i].data};
    void *file;
    size_t size;
    dt_err err;
    dt_safetensors back;
    if (dt_safetensors_encode(items, st->n, st->meta, st->n_meta, &file, &size, &err) ||
        dt_safetensors_parse(file, size, "again", &back, &err))
        abort(); /* what the reader accepts, the writer writes and the reader reads */
    if (back.n != st->n || back.n_meta != st->n_meta) abort();
    for (int i = 0; i < st->n; i++) {
        const dt_st_tensor *a = &st->t[i], *b = dt_safetensors_find(&back, a->name);
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim || memcmp(b->shape, a->shape, sizeof a->shape) ||
            b->end - b->begin != a->end - a->begin || memcmp(b->data, a->data, a->end - a->begin))
            abort();
    }
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, back.meta[i].key) || strcmp(st->meta[i].value, back.meta[i].value)) abort();
    dt_safetensors_free(&back);
    free(items);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ps.n) setup();
    void *file = malloc(size ? size : 1);
    memcpy(file, data, size);
    dt_safetensors st;
    dt_err err;
    if (dt_safetensors_parse(file, size, "fuzz.safetensors", &st, &err)) return 0;
    for (int i = 0; i < st.n; i++) {
        const dt_st_tensor *t = &st.t[i];
        float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
        dt_st_tensor_to_f32(t, v);
        for (int64_t k = 0; k < t->numel; k++) g_sink += v[k];
        free(v);
        if (dt_safetensors_find(&st, t->name) != t) abort();
    }
    for (int i = 0; i < st.n_meta; i++)
        if (dt_safetensors_meta(&st, st.meta[i].key) == NULL) abort();
    check_round_trip(&st);
    dt_weights_report rep;
    int partial = size && (data[size - 1] & 1);
    if (dt_weights_load_state(&st, &g_ps, g_buf, 2, partial, "fuzz.safetensors", &rep, &err) == 0)
        g_sink += dt_data_f32(g_ps.items[0]->t)[0] + (float)rep.loaded;
    dt_safetensors_free(&st);
    return 0;
}
