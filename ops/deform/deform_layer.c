/* The deformable convolution layer: an offset conv (2GK channels, + GK mask logits through a
 * sigmoid for DCNv2) in front of the op. unfused: three tape nodes (conv2d, sigmoid, op);
 * deft: one node (dt_deform_conv2d_deft). The deft layer also keeps the halo of DefT's staging
 * up to date from its offset statistics. */
#include <stdio.h>
#include <string.h>

#include "core/dt_common.h"
#include "ops/deform/dt_deform.h"
#include "ops/init/dt_init.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"

/* ---- the layer ---- */

int64_t dt_deform_offset_channels(const dt_deform_conv *l) {
    return (l->version == 2 ? 3 : 2) * (int64_t)l->groups * l->g.kh * l->g.kw;
}

void dt_deform_conv_init(dt_deform_conv *l, dt_params *ps, const char *name, int64_t cin, int64_t cout,
                         dt_conv_geom g, int groups, int version, int with_bias, float offset_init_std, dt_dev dev,
                         dt_layout layout) {
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    if (version != 1 && version != 2) dt_fatal("deform_conv %s: version %d (must be 1 or 2)", name, version);
    if (groups < 1 || cin % groups) dt_fatal("deform_conv %s: %lld channels cannot be split into %d offset groups", name, (long long)cin, groups);
    l->cin = cin;
    l->cout = cout;
    l->g = g;
    l->groups = groups;
    l->version = version;
    l->mode = DT_DEFORM_UNFUSED;
    l->knobs = dt_deform_knobs_default();
    l->stats_halo = 1.0f;
    l->cur_halo = 1;
    char n[96];
    int64_t sw[4] = {cout, cin, g.kh, g.kw}, sb[1] = {cout};
    snprintf(n, sizeof n, "%s.weight", name);
    l->weight = dt_param_new(ps, n, 4, sw, dev, layout, 1);
    dt_init_kaiming_normal_fanout(l->weight);
    if (with_bias) {
        snprintf(n, sizeof n, "%s.bias", name);
        l->bias = dt_param_new(ps, n, 1, sb, dev, DT_NCHW, 0);
    }
    int64_t oc = dt_deform_offset_channels(l);
    int64_t so[4] = {oc, cin, g.kh, g.kw}, sob[1] = {oc};
    snprintf(n, sizeof n, "%s.offset.weight", name);
    l->off_weight = dt_param_new(ps, n, 4, so, dev, DT_NCHW, 1);
    if (offset_init_std > 0) dt_init_normal(l->off_weight, 0.0f, offset_init_std);
    snprintf(n, sizeof n, "%s.offset.bias", name);
    l->off_bias = dt_param_new(ps, n, 1, sob, dev, DT_NCHW, 0);
}

static dt_tensor *forward_unfused(dt_deform_conv *l, dt_tensor *x) {
    int64_t GK = (int64_t)l->groups * l->g.kh * l->g.kw;
    dt_tensor *om = dt_conv2d(x, l->off_weight, l->off_bias, l->g, l->math);
    dt_tensor *offset = om, *mask = NULL;
    if (l->version == 2) {
        offset = dt_slice_channels(om, 0, 2 * GK);
        mask = dt_sigmoid(dt_slice_channels(om, 2 * GK, 3 * GK));
    }
    if (l->collect_stats) {
        dt_offset_stats_compute(offset, l->stats_halo, &l->stats);
        l->stats_valid = 1;
    }
    return dt_deform_conv2d_mode(x, offset, mask, l->weight, l->bias, l->g, l->groups, DT_DEFORM_UNFUSED, &l->knobs,
                                 l->math);
}

/* deft: the halo comes from the knob, or from the offset statistics, refreshed on the first
 * call and every halo_refresh calls after (it only matters with stage = 1). */
static int halo_refresh_due(const dt_deform_conv *l) {
    int64_t call = l->calls + 1;
    return l->mode != DT_DEFORM_UNFUSED && l->knobs.stage && l->knobs.halo < 0 &&
           (call == 1 || (l->knobs.halo_refresh > 0 && call % l->knobs.halo_refresh == 0));
}

int dt_deform_conv_reads_back(const dt_deform_conv *l) { return l->collect_stats || halo_refresh_due(l); }

dt_tensor *dt_deform_conv_forward(dt_deform_conv *l, dt_tensor *x) {
    dt_require_ndim(l->name, "input", x, 4);
    if (x->shape[1] != l->cin) {
        char a[128];
        dt_fatal("deform_conv %s: input %s has %lld channels, the layer expects %lld", l->name,
                 dt_shape_str(x, a, sizeof a), (long long)x->shape[1], (long long)l->cin);
    }
    int refresh = halo_refresh_due(l);
    l->calls++;
    if (l->mode == DT_DEFORM_UNFUSED) return forward_unfused(l, x);
    if (l->knobs.halo >= 0) l->cur_halo = l->knobs.halo;
    dt_tensor *om = NULL;
    /* a bf16 input multiplies with the weight's bf16 working copy (refreshed once a step) */
    dt_tensor *w = x->dtype == DT_BF16 ? dt_param_work(l->weight) : l->weight;
    dt_tensor *y = dt_deform_conv2d_deft(x, l->off_weight, l->off_bias, w, l->bias, l->g, l->groups, l->version,
                                         &l->knobs, l->cur_halo, l->math, (refresh || l->collect_stats) ? &om : NULL);
    if (!om) return y;
    /* om [N*P, OCS]: pair j of image n at position p at n*P*OCS + p*OCS + 2j */
    int64_t N = x->shape[0], P = y->shape[2] * y->shape[3], OCS = om->shape[1];
    int64_t GK = (int64_t)l->groups * l->g.kh * l->g.kw;
    if (l->collect_stats) {
        dt_offset_stats_compute_view(om->dev, dt_data_f32(om), N, GK, P, P * OCS, OCS, 1, l->stats_halo, &l->stats);
        l->stats_valid = 1;
    }
    if (refresh) {
        dt_offset_stats st;
        dt_offset_stats_compute_view(om->dev, dt_data_f32(om), N, GK, P, P * OCS, OCS, 1, (float)l->cur_halo, &st);
        int h = dt_offset_stats_halo(&st, 2); /* cover the 99th percentile */
        l->cur_halo = h < 1 ? 1 : h > 8 ? 8 : h;
    }
    return y;
}
