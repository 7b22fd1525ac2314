/* The models (models/dt_resnet.h) on the CPU: torchvision's parameter counts and state_dict
 * names (ResNeXt-50 32x4d and MobileNetV2 too), the deformable placement and its syntax (and
 * its refusal for the grouped / depthwise models), tiny ResNet-50, ResNet-34, ResNeXt and
 * MobileNetV2 that train, and bad model names as clear errors. (A resume into another model: test_train.c.) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/dt_check.h"
#include "core/dt_autograd.h"
#include "train/dt_config.h"
#include "ops/dt_ops.h"
#include "train/dt_optim.h"
#include "models/dt_resnet.h"
#include "tests/dt_test.h"
#include "train/dt_trainer.h"

static dt_resnet_cfg cfg_of(dt_resnet_model model, float width, int classes, const char *deform) {
    dt_resnet_cfg c = dt_resnet_cfg_default(classes);
    c.model = model;
    c.width = width;
    c.deform_stages = (unsigned)dt_resnet_parse_stages(deform);
    return c;
}

/* The tensor of that name among the parameters, or among the buffers (running statistics). */
static const dt_tensor *find(const dt_resnet *m, const char *name, int buffer) {
    if (!buffer) {
        const dt_param *p = dt_params_find(&m->params, name);
        return p ? p->t : NULL;
    }
    for (int i = 0; i < m->n_buffers; i++)
        if (!strcmp(m->buffers[i]->name, name)) return m->buffers[i];
    return NULL;
}

/* name is in m (a parameter, or a buffer) with that shape (ndim values). */
static void expect_tensor(const dt_resnet *m, const char *name, int buffer, int ndim, const int64_t *shape) {
    const dt_tensor *t = find(m, name, buffer);
    EXPECT_MSG(t, "%s: no %s '%s'", dt_resnet_model_name(m->cfg.model), buffer ? "buffer" : "parameter", name);
    if (!t) return;
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    char s[96];
    EXPECT_MSG(same, "%s: '%s' is %s", dt_resnet_model_name(m->cfg.model), name, dt_shape_str(t, s, sizeof s));
}

/* The parameters of a plain model counted from its description (dt_resnet_arch), as
 * torchvision's ResNet builds them: the oracle the allocated models are held to. */
static int64_t counted(dt_resnet_model model, float width, int64_t classes) {
    const dt_resnet_arch *a = dt_resnet_arch_of(model);
    int64_t stem = (int64_t)(64 * width + 0.5f), cin = stem;
    int64_t n = stem * 3 * 7 * 7 + 2 * stem; /* conv1, bn1 */
    for (int s = 0; s < 4; s++) {
        int64_t p = (int64_t)(a->stages[s].planes * width + 0.5f);
        int bottleneck = a->stages[s].kind == DT_BLOCK_BOTTLENECK;
        int64_t out = bottleneck ? 4 * p : p;
        for (int b = 0; b < a->stages[s].blocks; b++) {
            if (bottleneck) n += cin * p + 2 * p + p * p * 9 + 2 * p + p * out + 2 * out;
            else n += cin * p * 9 + 2 * p + p * p * 9 + 2 * p;
            if ((b == 0 && a->stages[s].stride != 1) || cin != out) n += cin * out + 2 * out; /* downsample */
            cin = out;
        }
    }
    return n + cin * classes + classes; /* fc */
}

DT_TEST(models_have_torchvisions_parameters) {
    /* torchvision.models.resnetNN(): sum(p.numel() for p in m.parameters()), and the
     * descriptions' block counts: 8, 16, 16, 33 */
    const struct {
        dt_resnet_model model;
        int64_t numel;
        int blocks;
    } want[] = {{DT_RESNET18, 11689512, 8}, {DT_RESNET34, 21797672, 16}, {DT_RESNET50, 25557032, 16},
                {DT_RESNET101, 44549160, 33}};
    for (int i = 0; i < 4; i++) {
        const char *name = dt_resnet_model_name(want[i].model);
        EXPECT_MSG(counted(want[i].model, 1.0f, 1000) == want[i].numel, "%s: %lld parameters in its description, "
                   "torchvision's %lld", name, (long long)counted(want[i].model, 1.0f, 1000), (long long)want[i].numel);
        /* an allocated model holds what its description counts (at a quarter width: cheap) */
        dt_resnet m;
        dt_resnet_cfg c = cfg_of(want[i].model, 0.25f, 10, "none");
        dt_resnet_init(&m, &c, DT_CPU);
        EXPECT_MSG(dt_params_numel(&m.params) == counted(want[i].model, 0.25f, 10), "%s at width 0.25: %lld parameters, "
                   "its description %lld", name, (long long)dt_params_numel(&m.params),
                   (long long)counted(want[i].model, 0.25f, 10));
        EXPECT_EQ_INT(m.n_blocks, want[i].blocks);
        EXPECT_EQ_INT(m.n_deform, 0);
        dt_resnet_free(&m);
    }
}

DT_TEST(models_resnet50_is_torchvisions) {
    /* the whole model at width 1, 1000 classes: torchvision's parameter count, its tensors
     * (len(list(m.parameters())) = 161, 53 batch norms with running mean and var each; its
     * num_batches_tracked is not kept) and names in named_parameters() order */
    dt_resnet m;
    dt_resnet_cfg c = cfg_of(DT_RESNET50, 1.0f, 1000, "none");
    dt_resnet_init(&m, &c, DT_CPU);
    EXPECT_MSG(dt_params_numel(&m.params) == 25557032, "resnet50: %lld parameters, torchvision's 25557032",
               (long long)dt_params_numel(&m.params));
    EXPECT_EQ_INT(m.params.n, 161);
    EXPECT(m.n_bns == 53 && m.n_buffers == 106);
    const char *first[] = {"conv1.weight",           "bn1.weight",         "bn1.bias",
                           "layer1.0.conv1.weight",  "layer1.0.bn1.weight", "layer1.0.bn1.bias",
                           "layer1.0.conv2.weight",  "layer1.0.bn2.weight", "layer1.0.bn2.bias",
                           "layer1.0.conv3.weight",  "layer1.0.bn3.weight", "layer1.0.bn3.bias",
                           "layer1.0.downsample.0.weight", "layer1.0.downsample.1.weight",
                           "layer1.0.downsample.1.bias",   "layer1.1.conv1.weight"};
    for (int i = 0; i < (int)(sizeof first / sizeof *first); i++)
        EXPECT_MSG(!strcmp(m.params.items[i]->t->name, first[i]), "resnet50 parameter %d is '%s', torchvision's '%s'", i,
                   m.params.items[i]->t->name, first[i]);
    EXPECT(!strcmp(m.params.items[m.params.n - 2]->t->name, "fc.weight"));
    EXPECT(!strcmp(m.params.items[m.params.n - 1]->t->name, "fc.bias"));
    EXPECT(!strcmp(m.buffers[0]->name, "bn1.running_mean") && !strcmp(m.buffers[1]->name, "bn1.running_var"));
    expect_tensor(&m, "conv1.weight", 0, 4, (int64_t[]){64, 3, 7, 7});
    expect_tensor(&m, "layer1.0.conv1.weight", 0, 4, (int64_t[]){64, 64, 1, 1});
    expect_tensor(&m, "layer1.0.downsample.0.weight", 0, 4, (int64_t[]){256, 64, 1, 1});
    expect_tensor(&m, "layer2.0.conv2.weight", 0, 4, (int64_t[]){128, 128, 3, 3});
    expect_tensor(&m, "layer3.5.conv3.weight", 0, 4, (int64_t[]){1024, 256, 1, 1});
    expect_tensor(&m, "layer4.2.conv3.weight", 0, 4, (int64_t[]){2048, 512, 1, 1});
    expect_tensor(&m, "layer2.0.downsample.1.running_mean", 1, 1, (int64_t[]){512});
    expect_tensor(&m, "fc.weight", 0, 2, (int64_t[]){1000, 2048});
    EXPECT(!find(&m, "layer4.3.conv1.weight", 0) && !find(&m, "layer1.1.downsample.0.weight", 0));
    /* v1.5: a Bottleneck's stride is on its 3x3 conv (and the downsample), not its first 1x1 */
    const dt_resnet_block *b = &m.blocks[3]; /* layer2.0 */
    EXPECT(b->kind == DT_BLOCK_BOTTLENECK && b->n_convs == 3 && b->has_down);
    EXPECT(b->convs[0].g.sh == 1 && b->convs[1].g.sh == 2 && b->convs[2].g.sh == 1 && b->down.g.sh == 2);
    EXPECT(!m.blocks[4].has_down);
    dt_resnet_free(&m);
}

DT_TEST(models_resnet101_and_resnet34_names) {
    /* resnet101's third stage has 23 blocks; resnet34's BasicBlocks have no conv3 */
    dt_resnet m;
    dt_resnet_cfg c = cfg_of(DT_RESNET101, 0.25f, 10, "none");
    dt_resnet_init(&m, &c, DT_CPU);
    expect_tensor(&m, "layer3.22.bn2.running_var", 1, 1, (int64_t[]){64});
    expect_tensor(&m, "layer3.22.conv3.weight", 0, 4, (int64_t[]){256, 64, 1, 1});
    EXPECT(!find(&m, "layer3.23.conv1.weight", 0));
    EXPECT(m.params.n == 314 && m.n_bns == 104);
    dt_resnet_free(&m);
    c = cfg_of(DT_RESNET34, 0.25f, 10, "none");
    dt_resnet_init(&m, &c, DT_CPU);
    expect_tensor(&m, "layer3.5.conv2.weight", 0, 4, (int64_t[]){64, 64, 3, 3});
    expect_tensor(&m, "layer2.0.downsample.0.weight", 0, 4, (int64_t[]){32, 16, 1, 1});
    EXPECT(!find(&m, "layer1.0.conv3.weight", 0) && !find(&m, "layer1.0.downsample.0.weight", 0));
    EXPECT(m.blocks[0].kind == DT_BLOCK_BASIC && m.blocks[0].n_convs == 2 && m.blocks[3].convs[0].g.sh == 2);
    EXPECT(m.params.n == 110 && m.n_bns == 36);
    dt_resnet_free(&m);
}

DT_TEST(models_deform_placement) {
    /* the syntax: stages 1..4, or the paper's conv2_x..conv5_x = layer1..layer4 */
    const struct {
        const char *s;
        int mask;
    } syn[] = {{"none", 0},   {"all", 15},   {"2,3,4", 14}, {"3,4", 12},   {"1", 1},      {"c3-c5", 14},
               {"c2-c5", 15}, {"c4-c5", 12}, {"c5", 8},     {"c2,c4", 5},  {"c3-c3", 2},  {"", -1},
               {"5", -1},     {"0", -1},     {"c1", -1},    {"c6", -1},    {"c5-c3", -1}, {"c2-c6", -1},
               {"c3-c", -1},  {"2,,3", -1},  {"3,", -1},    {" 3", -1},    {"c3-c5x", -1}, {"layer2", -1}};
    for (int i = 0; i < (int)(sizeof syn / sizeof *syn); i++)
        EXPECT_MSG(dt_resnet_parse_stages(syn[i].s) == syn[i].mask, "deform='%s': %d, expected %d", syn[i].s,
                   dt_resnet_parse_stages(syn[i].s), syn[i].mask);
    /* c3-c5 on resnet50: the 3x3 conv2 of every block of layer2..layer4 (4 + 6 + 3), nothing else */
    dt_resnet m;
    dt_resnet_cfg c = cfg_of(DT_RESNET50, 0.0625f, 10, "c3-c5");
    dt_resnet_init(&m, &c, DT_CPU);
    EXPECT_EQ_INT(m.n_deform, 13);
    for (int i = 0; i < m.n_deform; i++) {
        const char *n = dt_resnet_deform_layer(&m, i)->name;
        EXPECT_MSG(strncmp(n, "layer1.", 7) && !strcmp(n + strlen(n) - 6, ".conv2"), "deformable layer %d is %s", i, n);
    }
    EXPECT(!strcmp(dt_resnet_deform_layer(&m, 0)->name, "layer2.0.conv2"));
    EXPECT(!strcmp(dt_resnet_deform_layer(&m, 12)->name, "layer4.2.conv2") && !dt_resnet_deform_layer(&m, 13));
    EXPECT(find(&m, "layer2.0.conv2.weight", 0) && find(&m, "layer2.0.conv2.offset.weight", 0) &&
           find(&m, "layer2.0.conv2.offset.bias", 0));
    EXPECT(!find(&m, "layer2.0.conv1.offset.weight", 0) && !find(&m, "layer1.0.conv2.offset.weight", 0));
    EXPECT(!m.blocks[3].convs[0].deform && m.blocks[3].convs[1].deform && !m.blocks[3].convs[2].deform);
    EXPECT(!m.blocks[3].down.deform && !m.stem.deform);
    dt_resnet_free(&m);
    /* all on resnet18: both 3x3 convs of each of the 8 blocks; c5 on resnet34: layer4's 3 blocks */
    c = cfg_of(DT_RESNET18, 0.0625f, 10, "all");
    dt_resnet_init(&m, &c, DT_CPU);
    EXPECT_EQ_INT(m.n_deform, 16);
    EXPECT(!strcmp(dt_resnet_deform_layer(&m, 1)->name, "layer1.0.conv2"));
    dt_resnet_free(&m);
    c = cfg_of(DT_RESNET34, 0.0625f, 10, "c5");
    dt_resnet_init(&m, &c, DT_CPU);
    EXPECT_EQ_INT(m.n_deform, 6);
    EXPECT(!strcmp(dt_resnet_deform_layer(&m, 0)->name, "layer4.0.conv1"));
    dt_resnet_free(&m);
}

/* Trains m on one fixed batch of 2 random 64x64 images for `steps` SGD steps; the logits must
 * be [2, classes] and finite at every step, and the loss must fall: the mean of the last 3
 * steps below half the first (batch statistics of 2 images make single steps noisy). */
static void expect_trains_lr(dt_resnet_cfg c, int steps, float lr) {
    const char *name = dt_resnet_model_name(c.model);
    dt_resnet m;
    dt_resnet_init(&m, &c, DT_CPU);
    dt_tensor *x = dt_test_randn4(2, 3, 64, 64, 1.0f);
    int64_t sy[1] = {2};
    dt_tensor *y = dt_tensor_new_as(1, sy, DT_CPU, DT_I32, DT_NCHW);
    dt_data_i32(y)[0] = 1;
    dt_data_i32(y)[1] = c.num_classes - 1;
    dt_sgd opt;
    dt_sgd_init(&opt, &m.params, &(dt_sgd_opts){.momentum = 0.9f});
    double first = 0, last = 0, tail = 0;
    for (int s = 0; s < steps; s++) {
        dt_params_zero_grad(&m.params);
        dt_scope_begin();
        dt_tensor *logits = dt_resnet_forward(&m, x, 1);
        int finite = logits->ndim == 2 && logits->shape[0] == 2 && logits->shape[1] == c.num_classes;
        dt_set_grad_enabled(0); /* a look at the values, not part of the graph */
        dt_tensor *f = dt_convert(logits, DT_F32, DT_NCHW);
        dt_set_grad_enabled(1);
        for (int64_t i = 0; finite && i < f->numel; i++) finite = isfinite(dt_data_f32(f)[i]);
        EXPECT_MSG(finite, "%s step %d: logits not [2, %d] and finite", name, s, c.num_classes);
        dt_tensor *loss = dt_softmax_cross_entropy(logits, y, 0.0f);
        loss->retain = 1;
        dt_backward(loss);
        last = dt_item(loss);
        if (s == 0) first = last;
        if (s >= steps - 3) tail += last / 3;
        dt_sgd_step(&opt, lr);
        dt_scope_end();
    }
    if (dt_test_verbose())
        printf("    %s (%s): loss %.4f -> %.4f (last 3 steps)\n", name, dt_precision_name(c.precision), first, tail);
    EXPECT_MSG(isfinite(tail) && tail < 0.5 * first, "%s: the loss did not fall: %.4f -> %.4f (the last 3 steps)", name,
               first, tail);
    dt_sgd_free(&opt);
    dt_resnet_free(&m);
}

static void expect_trains(dt_resnet_cfg c, int steps) { expect_trains_lr(c, steps, 0.02f); }

DT_TEST(models_tiny_resnet50_and_resnet34_train) {
    /* width 1/16 (stem 4 channels, a Bottleneck's planes 4..32), 64 px, batch 2; resnet50 with
     * its DCNv2 placement in bf16 channels last (its 1x1 convs on the pointwise GEMMs),
     * resnet34 plain in fp32 NCHW. Measured over 20 seeds: resnet50 from 2.5-3.3 to 0.13-0.93,
     * resnet34 from 1.7-2.2 to 0.03-0.13. */
    dt_resnet_cfg c = cfg_of(DT_RESNET50, 0.0625f, 10, "c3-c5");
    c.deform_version = 2;
    c.precision = DT_PREC_BF16;
    c.layout = DT_NHWC;
    expect_trains(c, 8);
    expect_trains(cfg_of(DT_RESNET34, 0.0625f, 10, "none"), 8);
}

DT_TEST(models_resnext50_32x4d_is_torchvisions) {
    /* torchvision.models.resnext50_32x4d(): 25028904 parameters, resnet50's 161 tensors and
     * names; each Bottleneck's conv2 in 32 groups on 2 x planes channels (128 in layer1) */
    dt_resnet m;
    dt_resnet_cfg c = cfg_of(DT_RESNEXT50_32X4D, 1.0f, 1000, "none");
    dt_resnet_init(&m, &c, DT_CPU);
    EXPECT_MSG(dt_params_numel(&m.params) == 25028904, "resnext50_32x4d: %lld parameters, torchvision's 25028904",
               (long long)dt_params_numel(&m.params));
    EXPECT_EQ_INT(m.params.n, 161);
    EXPECT(m.n_bns == 53 && m.n_buffers == 106 && m.n_blocks == 16);
    expect_tensor(&m, "conv1.weight", 0, 4, (int64_t[]){64, 3, 7, 7});
    expect_tensor(&m, "layer1.0.conv1.weight", 0, 4, (int64_t[]){128, 64, 1, 1});
    expect_tensor(&m, "layer1.0.conv2.weight", 0, 4, (int64_t[]){128, 4, 3, 3});
    expect_tensor(&m, "layer1.0.conv3.weight", 0, 4, (int64_t[]){256, 128, 1, 1});
    expect_tensor(&m, "layer1.0.downsample.0.weight", 0, 4, (int64_t[]){256, 64, 1, 1});
    expect_tensor(&m, "layer2.0.conv2.weight", 0, 4, (int64_t[]){256, 8, 3, 3});
    expect_tensor(&m, "layer4.2.conv2.weight", 0, 4, (int64_t[]){1024, 32, 3, 3});
    expect_tensor(&m, "layer4.2.bn2.running_var", 1, 1, (int64_t[]){1024});
    expect_tensor(&m, "layer4.2.conv3.weight", 0, 4, (int64_t[]){2048, 1024, 1, 1});
    expect_tensor(&m, "fc.weight", 0, 2, (int64_t[]){1000, 2048});
    const dt_resnet_block *b = &m.blocks[3]; /* layer2.0: the stride on the grouped 3x3 */
    EXPECT(b->convs[1].groups == 32 && b->convs[1].g.sh == 2 && b->convs[0].groups == 1 && b->convs[2].groups == 1);
    dt_resnet_free(&m);
}

DT_TEST(models_mobilenet_v2_is_torchvisions) {
    /* torchvision.models.mobilenet_v2(): 3504872 parameters, 158 tensors (52 convs, 52 batch
     * norms, the linear), torchvision's names and shapes in named_parameters() order */
    dt_resnet m;
    dt_resnet_cfg c = cfg_of(DT_MOBILENET_V2, 1.0f, 1000, "none");
    dt_resnet_init(&m, &c, DT_CPU);
    EXPECT_MSG(dt_params_numel(&m.params) == 3504872, "mobilenet_v2: %lld parameters, torchvision's 3504872",
               (long long)dt_params_numel(&m.params));
    EXPECT_EQ_INT(m.params.n, 158);
    EXPECT(m.n_bns == 52 && m.n_buffers == 104 && m.n_blocks == 17);
    const char *first[] = {"features.0.0.weight",        "features.0.1.weight",        "features.0.1.bias",
                           "features.1.conv.0.0.weight", "features.1.conv.0.1.weight", "features.1.conv.0.1.bias",
                           "features.1.conv.1.weight",   "features.1.conv.2.weight",   "features.1.conv.2.bias",
                           "features.2.conv.0.0.weight", "features.2.conv.0.1.weight", "features.2.conv.0.1.bias",
                           "features.2.conv.1.0.weight", "features.2.conv.1.1.weight", "features.2.conv.1.1.bias",
                           "features.2.conv.2.weight",   "features.2.conv.3.weight",   "features.2.conv.3.bias"};
    for (int i = 0; i < (int)(sizeof first / sizeof *first); i++)
        EXPECT_MSG(!strcmp(m.params.items[i]->t->name, first[i]), "mobilenet_v2 parameter %d is '%s', torchvision's '%s'",
                   i, m.params.items[i]->t->name, first[i]);
    EXPECT(!strcmp(m.params.items[m.params.n - 4]->t->name, "features.18.1.weight"));
    EXPECT(!strcmp(m.params.items[m.params.n - 2]->t->name, "classifier.1.weight"));
    EXPECT(!strcmp(m.params.items[m.params.n - 1]->t->name, "classifier.1.bias"));
    expect_tensor(&m, "features.0.0.weight", 0, 4, (int64_t[]){32, 3, 3, 3});
    expect_tensor(&m, "features.1.conv.0.0.weight", 0, 4, (int64_t[]){32, 1, 3, 3});
    expect_tensor(&m, "features.1.conv.1.weight", 0, 4, (int64_t[]){16, 32, 1, 1});
    expect_tensor(&m, "features.2.conv.0.0.weight", 0, 4, (int64_t[]){96, 16, 1, 1});
    expect_tensor(&m, "features.2.conv.1.0.weight", 0, 4, (int64_t[]){96, 1, 3, 3});
    expect_tensor(&m, "features.2.conv.2.weight", 0, 4, (int64_t[]){24, 96, 1, 1});
    expect_tensor(&m, "features.17.conv.1.0.weight", 0, 4, (int64_t[]){960, 1, 3, 3});
    expect_tensor(&m, "features.17.conv.2.weight", 0, 4, (int64_t[]){320, 960, 1, 1});
    expect_tensor(&m, "features.17.conv.3.running_mean", 1, 1, (int64_t[]){320});
    expect_tensor(&m, "features.18.0.weight", 0, 4, (int64_t[]){1280, 320, 1, 1});
    expect_tensor(&m, "classifier.1.weight", 0, 2, (int64_t[]){1000, 1280});
    EXPECT(!find(&m, "fc.weight", 0) && !find(&m, "features.19.0.weight", 0));
    /* the residuals: stride 1 and the channels kept (features.3, 5, 6, 8, 9, 10, 12, 13, 15, 16) */
    const int residual[17] = {0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0};
    for (int i = 0; i < 17; i++)
        EXPECT_MSG(m.blocks[i].residual == residual[i] && m.blocks[i].kind == DT_BLOCK_INVERTED,
                   "features.%d: residual %d, torchvision's %d", i + 1, m.blocks[i].residual, residual[i]);
    EXPECT(m.blocks[0].n_convs == 2 && m.blocks[1].n_convs == 3 && m.blocks[1].convs[1].groups == 96 &&
           m.blocks[1].convs[1].g.sh == 2);
    /* the width multiplier rounds as torchvision's _make_divisible */
    EXPECT(dt_mobilenet_divisible(32 * 0.25) == 8 && dt_mobilenet_divisible(24 * 0.5) == 16 &&
           dt_mobilenet_divisible(320 * 0.35) == 112 && dt_mobilenet_divisible(1280) == 1280);
    dt_resnet_free(&m);
}

#ifndef MOBILE_STEPS
#define MOBILE_STEPS 10
#endif
#ifndef MOBILE_LR
#define MOBILE_LR 0.01f
#endif
DT_TEST(models_tiny_resnext_and_mobilenet_v2_train) {
    /* resnext50_32x4d at width 1/4 (stem 16 channels, grouped 3x3s of 32 x 1..8 channels) in
     * fp32 NCHW and bf16 NHWC; mobilenet_v2 at width 1/4 (8..80 channels, depthwise 3x3s, ReLU6, residual
     * adds) in fp32 NCHW, fp32 NHWC and bf16 NHWC; 64 px, batch 2. Measured over 40 seeds:
     * resnext from 2.2-2.9 to 0.0004-0.72 in 8 steps; mobilenet_v2 at lr 0.01 in 10 steps from
     * 2.1-2.6 to at most 0.72 (at the ResNets' 0.02 a momentum step now and then throws the
     * fitted batch back to a loss of 3-5: its last layers' batch statistics come from 2 x 2 x 2
     * values). */
    dt_resnet_cfg x = cfg_of(DT_RESNEXT50_32X4D, 0.25f, 10, "none");
    expect_trains(x, 8);
    x.precision = DT_PREC_BF16; /* the grouped 3x3s in bf16 channels last */
    x.layout = DT_NHWC;
    expect_trains(x, 8);
    expect_trains_lr(cfg_of(DT_MOBILENET_V2, 0.25f, 10, "none"), MOBILE_STEPS, MOBILE_LR);
    dt_resnet_cfg c = cfg_of(DT_MOBILENET_V2, 0.25f, 10, "none");
    c.layout = DT_NHWC;
    expect_trains_lr(c, MOBILE_STEPS, MOBILE_LR);
    c.precision = DT_PREC_BF16;
    expect_trains_lr(c, MOBILE_STEPS, MOBILE_LR);
}

DT_TEST(models_resnext_and_mobilenet_refuse_deform) {
    /* their 3x3 convs are grouped / depthwise: deform= other than none is a clear error of the
     * config check (and of the model's tensor walk), naming the model */
    const char *models[2] = {"resnext50_32x4d", "mobilenet_v2"};
    for (int i = 0; i < 2; i++) {
        dt_train_cfg c;
        dt_config_defaults(&c);
        dt_err err;
        char kv[64];
        snprintf(kv, sizeof kv, "model=%s", models[i]);
        EXPECT(dt_config_set(&c, kv, &err) == 0 && dt_config_set(&c, "synthetic=1", &err) == 0);
        EXPECT_MSG(dt_config_check(&c, &err) == 0, "%s", err.msg);
        EXPECT(dt_config_set(&c, "deform=c3-c5", &err) == 0);
        EXPECT(dt_config_check(&c, &err) != 0);
        char want[96];
        snprintf(want, sizeof want, "deform=c3-c5: %s has no deformable placement", models[i]);
        EXPECT_MSG(strstr(err.msg, want) && strstr(err.msg, "use deform=none"), "%s", err.msg);
        dt_resnet_model model = DT_RESNET18;
        EXPECT(dt_resnet_model_parse(models[i], &model, &err) == 0);
        EXPECT(dt_resnet_deform_refusal(model) != NULL);
    }
    EXPECT(dt_resnet_deform_refusal(DT_RESNET50) == NULL);
}

DT_TEST(models_bad_names_are_clear_errors) {
    dt_resnet_model model = DT_RESNET18;
    dt_err err;
    EXPECT(dt_resnet_model_parse("resnet152", &model, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "unknown model 'resnet152': deftc builds resnet18, resnet34, resnet50, resnet101"), "%s",
               err.msg);
    /* the config accepts every model the library builds, by its name, and nothing else */
    dt_train_cfg c;
    dt_config_defaults(&c);
    EXPECT(!strcmp(c.model, "resnet18"));
    for (int i = 0; i < DT_RESNET_MODELS; i++) {
        char kv[64];
        snprintf(kv, sizeof kv, "model=%s", dt_resnet_model_name((dt_resnet_model)i));
        EXPECT_MSG(dt_config_set(&c, kv, &err) == 0, "%s: %s", kv, err.msg);
        EXPECT(dt_resnet_model_parse(c.model, &model, &err) == 0 && model == (dt_resnet_model)i);
    }
    EXPECT(dt_config_set(&c, "model=ResNet50", &err) != 0);
    EXPECT_MSG(strstr(err.msg, "bad value 'ResNet50' for 'model': expected one of resnet18|resnet34|resnet50|resnet101"),
               "%s", err.msg);
    /* (the last model listed, mobilenet_v2, has no deformable placement: back to resnet18) */
    EXPECT(dt_config_set(&c, "model=resnet18", &err) == 0);
    EXPECT(dt_config_set(&c, "deform=c3-c5", &err) == 0 && dt_config_set(&c, "synthetic=1", &err) == 0);
    EXPECT_MSG(dt_config_check(&c, &err) == 0, "%s", err.msg);
    EXPECT(dt_config_set(&c, "deform=c6", &err) == 0 && dt_config_check(&c, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "bad value 'c6' for 'deform': expected none, all, stages 1..4 like 2,3,4"), "%s", err.msg);
    /* a config made in code with a model the library does not build: the run refuses it */
    dt_config_defaults(&c);
    c.synthetic = 1;
    strcpy(c.device, "cpu");
    strcpy(c.model, "vgg16");
    dt_train_result r;
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 2);
    EXPECT_MSG(strstr(err.msg, "unknown model 'vgg16'"), "%s", err.msg);
    dt_train_result_free(&r);
}

/* What a trainer that replays the step as a CUDA graph asks of the model (dt_resnet.h): which
 * forwards read device values back (the deft halo refreshes: the first call, then every
 * halo_refresh calls; replayed forwards count as calls), and a launch key that changes with a
 * deformable layer's halo. */
DT_TEST(models_graph_replay_bookkeeping) {
    dt_resnet_cfg c = cfg_of(DT_RESNET18, 0.125f, 2, "all");
    c.deform_mode = DT_DEFORM_DEFT;
    c.knobs.stage = 1;
    c.knobs.halo = -1;
    c.knobs.halo_refresh = 4;
    dt_resnet m;
    dt_resnet_init(&m, &c, DT_CPU);
    int64_t s[4] = {2, 3, 64, 64};
    /* forwards 1..10, with 3, 7 and 8 "replayed" (bookkept, not run): reads back at 1, 4, 8 */
    const int replayed[10] = {0, 0, 1, 0, 0, 0, 1, 1, 0, 0}, want[10] = {1, 0, 0, 1, 0, 0, 0, 1, 0, 0};
    int got[10];
    dt_set_grad_enabled(0);
    for (int i = 0; i < 10; i++) {
        got[i] = dt_resnet_forward_reads_back(&m);
        if (replayed[i] && !got[i]) {
            dt_resnet_replayed(&m);
            continue;
        }
        dt_scope_begin();
        dt_tensor *x = dt_tensor_new_as(4, s, DT_CPU, DT_F32, DT_NCHW);
        dt_tensor_fill(x, 0.5f);
        dt_resnet_forward(&m, x, 1);
        dt_scope_end();
    }
    dt_set_grad_enabled(1);
    for (int i = 0; i < 10; i++) EXPECT_MSG(got[i] == want[i], "forward %d: reads back %d, expected %d", i + 1, got[i], want[i]);
    uint64_t k = dt_resnet_launch_key(&m);
    EXPECT(k == dt_resnet_launch_key(&m));
    dt_deform_conv *l = dt_resnet_deform_layer(&m, 3);
    l->cur_halo += 1;
    EXPECT_MSG(dt_resnet_launch_key(&m) != k, "the launch key does not see a deformable layer's halo");
    l->cur_halo -= 1;
    EXPECT(dt_resnet_launch_key(&m) == k);
    dt_resnet_free(&m);
}
