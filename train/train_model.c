/* The model a training configuration describes (train_model_cfg, train_run.h): used by the
 * replicas' setup, the run's checks and the weights' export. */
#include <stdio.h>
#include <string.h>

#include "models/dt_resnet.h"
#include "ops/deform/deform_plan.h"
#include "train/train_run.h"

void train_model_cfg(const dt_train_cfg *c, int classes, dt_resnet_cfg *mc) {
    *mc = dt_resnet_cfg_default(classes);
    dt_resnet_model_parse(c->model, &mc->model, NULL); /* the config's choices are the models */
    mc->deform_stages = (unsigned)dt_resnet_parse_stages(c->deform);
    mc->width = c->width;
    if (dt_config_dropout(c, &mc->dropout, NULL)) mc->dropout = 0.0f; /* checked by the run (dt_config_check) */
    mc->dropout_seed = c->seed;
    mc->deform_version = c->deform_version;
    mc->offset_groups = c->offset_groups;
    mc->offset_init_std = c->offset_init_std;
    mc->offset_lr_mult = c->offset_lr_mult;
    mc->deform_mode = (dt_deform_mode)dt_deform_mode_parse(c->deform_mode);
    dt_precision_parse(c->precision, &mc->precision); /* checked by the run */
    if (dt_layout_parse(c->layout, &mc->layout)) mc->layout = dt_precision_layout(mc->precision); /* auto */
    mc->conv_algo = (dt_conv_algo)dt_conv_algo_parse(c->conv_algo); /* the key's choices are the algorithms' names */
    dt_deform_knobs k = dt_deform_knobs_default();
    if (strcmp(c->tile, "auto")) sscanf(c->tile, "%dx%d", &k.tile_h, &k.tile_w);
    k.halo = c->halo;
    k.halo_refresh = c->halo_refresh;
    k.swizzle = c->swizzle;
    k.fuse_offset = c->fuse_offset;
    k.stage = c->stage;
    k.dx = dt_deform_dx_parse(c->dx);
    k.deterministic = c->deterministic;
    k.keep_cols = c->keep_cols;
    mc->knobs = k;
}
