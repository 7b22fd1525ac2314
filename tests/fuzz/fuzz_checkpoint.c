/* libFuzzer target: a checkpoint as a resume meets it. First the parser (dt_checkpoint_parse)
 * on any bytes; the checksum guards the contents, so the input's checksum field is recomputed
 * first half of the time (otherwise nearly every input would stop at the checksum, never
 * reaching the parser of the contents that a crafted file, with a valid checksum, reaches).
 * Then what the trainer does with what was parsed: the stored config parsed and compared with
 * the resuming run's (dt_config_diff), the position checked against the run that wrote it and
 * mapped onto the resuming one, whose global batch differs for some inputs
 * (dt_checkpoint_plan_resume), and the tensors copied into a small model's state - two
 * parameters, their momentum, a buffer - as replica_setup does (dt_checkpoint_load_state). The
 * seed model_state.ckpt is a checkpoint of that model, so that the copies are reached. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/dt_checkpoint.h"

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* Where the values read go, so that the reads are not optimized away. */
static volatile float g_sink;

/* The resuming run and its model, made once: conv1.weight [2, 3], fc.bias [2] and the buffer
 * bn1.running_mean [3], on the CPU; momentum made by the first checkpoint that holds it. */
static dt_params g_ps;
static dt_tensor *g_mom[2], *g_buf[1];
static dt_train_cfg g_now;

static void setup(void) {
    int64_t w[2] = {2, 3}, b[1] = {2}, m[1] = {3};
    dt_param_new(&g_ps, "conv1.weight", 2, w, DT_CPU, DT_NCHW, 1);
    dt_param_new(&g_ps, "fc.bias", 1, b, DT_CPU, DT_NCHW, 0);
    g_buf[0] = dt_tensor_new_unscoped(1, m, DT_CPU, DT_F32, DT_NCHW);
    dt_tensor_set_name(g_buf[0], "bn1.running_mean");
    dt_config_defaults(&g_now);
    g_now.batch = 8;
    g_now.epochs = 3;
}

static void count_diff(const char *key, const char *was, const char *now, void *ctx) {
    (void)key;
    *(size_t *)ctx += strlen(was) + strlen(now);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ps.n) setup();
    unsigned char *file = malloc(size ? size : 1);
    memcpy(file, data, size);
    if (size > 28 && (data[size - 1] & 1)) { /* magic(8) version(4) length(8) checksum(8) */
        uint64_t sum = fnv1a(file + 28, size - 28);
        memcpy(file + 20, &sum, 8);
    }
    dt_checkpoint ck;
    dt_err err;
    if (dt_checkpoint_parse(file, size, "fuzz.ckpt", &ck, &err) == 0) {
        /* every tensor is read whole: ASan checks it lies inside the file */
        for (int i = 0; i < ck.n; i++) {
            int64_t n = dt_numel(ck.ndim[i], ck.shape[i]);
            for (int64_t k = 0; k < n; k++) {
                float v;
                memcpy(&v, (const char *)ck.data[i] + 4 * k, 4);
                g_sink += v;
            }
            dt_checkpoint_find(&ck, ck.names[i]);
        }
        /* the resume: 1000 training images, 1 replica or 3 (another global batch) */
        int world = size > 1 && (data[size - 2] & 1) ? 3 : 1;
        dt_ckpt_run now;
        dt_ckpt_resume rs;
        if (dt_ckpt_run_of(&g_now, world, 1000, &now, &err) == 0 &&
            dt_checkpoint_plan_resume(&ck, &now, 1, 1000, "fuzz.ckpt", &rs, &err) == 0) {
            size_t changed = 0;
            if (rs.have_config) dt_config_diff(&rs.config, &g_now, count_diff, &changed);
            g_sink += (float)(rs.pos.step + rs.pos.batch + rs.pos.epoch) + (float)changed;
            if (dt_checkpoint_load_state(&ck, &g_ps, g_mom, g_buf, 1, "fuzz.ckpt", &err) == 0)
                g_sink += dt_data_f32(g_ps.items[0]->t)[0];
        }
        dt_checkpoint_free(&ck);
    }
    return 0;
}
