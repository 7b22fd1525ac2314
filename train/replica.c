/* A training replica: the training loop in stages (train_run.h), run by one host thread per
 * device.
 *
 * Pipelining: the host enqueues step i, then waits for step i-1 to finish (its events, its
 * loss copied to pinned memory) and logs it. The GPU therefore always has the next step
 * queued while the host reads the previous one, and no step waits for a log line. The batch
 * of step i-1 is released to the loader at that point, once its copy has landed.
 *
 * CUDA graph (graphs=1, GPU): after GRAPH_WARMUP eager steps the device half of the step
 * (step_body) is captured once and replayed every step; the host half (the batch into fixed
 * input buffers, the learning rate into device memory, the loss read-back) is queued around
 * the replay, so the pipelining above is unchanged (docs/training.md).
 *
 * Data parallel (several replicas): every replica takes its shard of each epoch (the loader's
 * DistributedSampler semantics), averages its gradients with the others' during the backward
 * (dt_grad_sync.h), and applies the same update to the same weights, so the replicas stay
 * identical without ever exchanging weights after the initial broadcast. Replica 0 alone logs
 * and writes checkpoints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_device.h"
#include "core/dt_graph.h"
#include "ops/init/dt_init.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "core/dt_rng.h"
#include "core/dt_timer.h"
#include "data/dt_transform.h"
#include "train/dt_weights.h"
#include "train/train_run.h"

/* ---- step timing ---- */

static void marks_init(step_marks *m, int gpu) {
    memset(m, 0, sizeof *m);
    m->gpu = gpu;
    for (int i = 0; i < 4; i++) dt_event_init(&m->ev[i], gpu ? DT_GPU : DT_CPU);
    m->loss_host = dt_host_alloc(2 * sizeof(float), 1);
}

static void marks_free(step_marks *m) {
    for (int i = 0; i < 4; i++) dt_event_destroy(&m->ev[i]);
    dt_host_free(m->loss_host, 1);
}

static void mark(step_marks *m, int i) { dt_event_record(&m->ev[i]); }

/* Waits for a GPU event; with peers, watching for the run's abort (then -1). */
static int wait_event(replica *r, step_marks *m, int i) {
    if (r->dist) return dt_dist_wait_event(r->dist, m->ev[i].cuda);
    dt_event_sync(&m->ev[i]);
    return 0;
}

/* Waits for the step and returns its phase times t[0..2] and its period t[3]: from its start
 * to the start of the next step (`next`, already recorded), which includes any time the
 * device sat idle waiting for data; the last step of a run has no next and counts its own
 * phases. A step replayed from a CUDA graph (graphed) has no events between its phases:
 * t[0..2] are NaN. -1 when the run was aborted meanwhile. */
static int marks_read(replica *r, step_marks *m, int graphed, step_marks *next, float t[4]) {
    if (m->gpu) {
        if (wait_event(r, m, 3)) return -1;
        for (int i = 0; i < 3; i++) t[i] = NAN;
        if (!graphed)
            for (int i = 0; i < 3; i++) t[i] = dt_event_ms(&m->ev[i], &m->ev[i + 1]);
        if (next) {
            if (wait_event(r, next, 0)) return -1;
            t[3] = dt_event_ms(&m->ev[0], &next->ev[0]);
        } else {
            t[3] = dt_event_ms(&m->ev[0], &m->ev[3]);
        }
        return 0;
    }
    /* the CPU's events are host clocks, read when the step's work is done */
    if (r->dist && dt_dist_aborted(dt_dist_group_of(r->dist))) return -1;
    for (int i = 0; i < 3; i++) t[i] = dt_event_ms(&m->ev[i], &m->ev[i + 1]);
    t[3] = next ? dt_event_ms(&m->ev[0], &next->ev[0]) : t[0] + t[1] + t[2];
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of the values that are not NaN (a graph-replayed step has no phase times),
 * NaN when there are none; reorders v. */
static double percentile(double *v, int64_t n, double q) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i])) v[k++] = v[i];
    n = k;
    if (n <= 0) return NAN;
    qsort(v, n, sizeof *v, cmp_d);
    int64_t i = (int64_t)(q * (n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Replica 0 speaks; the others are silent. */
#define SAY(r, ...) \
    do { if ((r)->rank == 0) train_say(&(r)->run->out, __VA_ARGS__); } while (0)

/* The abort reason as this replica's error (it stops because another one failed). */
static int aborted_error(replica *r) {
    return dt_errf(&r->err, "stopped: %s", dt_dist_abort_reason(dt_dist_group_of(r->dist))), 1;
}

/* ---- setup ---- */

static int make_loaders(replica *r) {
    train_run *run = r->run;
    const dt_train_cfg *c = run->c;
    if (c->synthetic) return 0;
    for (int train = 1; train >= 0; train--) { /* the train loader, then the val one */
        dt_loader_opts o = dt_loader_default_opts(train);
        o.batch = c->batch;
        o.image_size = c->image_size;
        /* the cores are shared by the replicas' loaders */
        o.workers = c->workers ? c->workers : (dt_num_cores() + run->local - 1) / run->local;
        o.seed = c->seed;
        o.cache = c->cache;
        o.decode = run->dev != DT_GPU ? DT_DECODE_CPU
                   : !strcmp(c->decode, "gpu") ? DT_DECODE_GPU
                   : !strcmp(c->decode, "cpu") ? DT_DECODE_CPU
                                               : DT_DECODE_AUTO;
        o.prefetch = c->prefetch;
        o.gpu_decoders = c->gpu_decoders;
        o.crop_scale_min = c->crop_scale_min;
        o.max_pixels = c->max_image_pixels;
        o.shard = r->rank;
        o.shards = run->world;
        /* evaluation on a budget: a fixed sample of max_val_batches batches, stratified by
         * class, the same for every evaluation and any number of replicas (the first batches
         * in folder order would be the first classes only) */
        if (!train) o.subset = (int64_t)c->max_val_batches * c->batch;
        dt_loader **l = train ? &r->train_ld : &r->val_ld;
        *l = dt_loader_new(train ? &run->train_ds : &run->val_ds, &o, &r->err);
        if (!*l) return 1;
        if (train) SAY(r, "loader: %d workers, decode %s", o.workers, dt_loader_decoder(*l));
        if (!train && dt_loader_size(*l) < run->val_ds.count)
            SAY(r, "evaluating on %lld of %lld images, stratified over %d classes (max_val_batches = %d x batch %d; the "
                "same images every evaluation)", (long long)dt_loader_size(*l), (long long)run->val_ds.count,
                dt_loader_classes(*l), c->max_val_batches, c->batch);
    }
    return 0;
}

/* init_from: the state_dict's weights into this replica's model. Every replica loads the same
 * file (the broadcast that follows would make them equal anyway); replica 0 says what it did. */
static int load_init(replica *r) {
    train_run *run = r->run;
    dt_weights_report rep;
    if (dt_weights_load_state(&run->init, &r->model.params, r->model.buffers, r->model.n_buffers,
                              run->c->init_from_partial, run->c->init_from, &rep, &r->err))
        return 1;
    char line[700];
    dt_weights_describe(&rep, run->c->init_from, r->model.cfg.deform_version, line, sizeof line);
    SAY(r, "init_from: %s", line);
    return 0;
}

/* export=: replica 0's weights at the end of the run (a run stopped before it does not export). */
static int export_weights(replica *r) {
    train_run *run = r->run;
    const char *path = run->c->export_path;
    if (r->step < run->total_steps) {
        SAY(r, "export=%s is not written: the run stopped at step %lld of %lld (resume it to its end, or build/train "
            "--export CHECKPOINT %s writes a checkpoint's weights)", path, (long long)r->step, (long long)run->total_steps,
            path);
        return 0;
    }
    if (dt_weights_export(&r->model, r->step, path, &r->err)) return 1;
    SAY(r, "export: the weights at step %lld to %s", (long long)r->step, path);
    return 0;
}

/* Copies the resumed checkpoint's tensors into this replica's model and optimizer state. */
static int load_state(replica *r) {
    train_run *run = r->run;
    if (dt_checkpoint_load_state(&run->ck, &r->model.params, r->opt.bufs, r->model.buffers, r->model.n_buffers,
                                 run->c->resume, &r->err))
        return 1;
    r->opt.steps = run->pos.step;
    /* the dropout's counter ticks once per training step: where the interrupted run left it */
    if (r->model.drop_counter) {
        int64_t v = run->pos.step;
        dt_tensor_upload(r->model.drop_counter, &v); /* its 8 bytes */
    }
    return 0;
}

/* Synthetic data: one global batch of batch x world random images, the same whatever the
 * number of replicas (made whole on every replica, then cut); this replica keeps its part. */
static void make_synthetic(replica *r) {
    train_run *run = r->run;
    const dt_train_cfg *c = run->c;
    int64_t B = c->batch, G = B * run->world;
    int64_t sx[4] = {B, 3, c->image_size, c->image_size}, sy[1] = {B}, sg[4] = {G, 3, c->image_size, c->image_size};
    r->syn_x = dt_tensor_new_unscoped(4, sx, run->dev, DT_F32, DT_NCHW);
    r->syn_y = dt_tensor_new_unscoped(1, sy, run->dev, DT_I32, DT_NCHW);
    dt_tensor *all = dt_tensor_new_unscoped(4, sg, run->dev, DT_F32, DT_NCHW);
    dt_init_normal(all, 0.0f, 1.0f);
    dt_tensor *part = dt_tensor_view_at(all, r->rank * r->syn_x->numel, 4, sx, DT_NCHW);
    dt_tensor_copy(r->syn_x, part);
    dt_tensor_free(part);
    dt_tensor_free(all);
    dt_rng g;
    dt_rng_seed(&g, c->seed + 1);
    int32_t *labels = dt_xcalloc(G, sizeof *labels);
    for (int64_t i = 0; i < G; i++) labels[i] = (int32_t)dt_rng_below(&g, (uint32_t)c->classes);
    dt_tensor_upload(r->syn_y, labels + r->rank * B);
    free(labels);
}

/* All-reduce of batch-norm sums for sync_bn (dt_bn_sync's callback). */
static void bn_allreduce(void *ctx, double *sums, int64_t n) { dt_dist_allreduce_f64(ctx, sums, n); }

/* Every replica starts from replica 0's weights and buffers (they are equal already when all
 * build the model from the same seed; the broadcast makes it so by construction, as DDP). */
static void broadcast_state(replica *r, int with_params) {
    for (int i = 0; with_params && i < r->model.params.n; i++) {
        dt_tensor *p = r->model.params.items[i]->t;
        dt_dist_broadcast_f32(r->dist, dt_data_f32(p), p->numel, 0);
        if (r->opt.bufs[i]) dt_dist_broadcast_f32(r->dist, r->opt.bufs[i]->data, r->opt.bufs[i]->numel, 0);
    }
    for (int i = 0; i < r->model.n_buffers; i++)
        dt_dist_broadcast_f32(r->dist, dt_data_f32(r->model.buffers[i]), r->model.buffers[i]->numel, 0);
}

int replica_setup(replica *r) {
    train_run *run = r->run;
    const dt_train_cfg *c = run->c;
    int local = r->rank - run->first_rank;
    if (run->dev == DT_GPU) dt_gpu_use(run->gpus[local]);
    if (run->group && dt_dist_join(run->group, local, &r->dist, &r->err)) return 1;
    if (make_loaders(r)) return 1;
    dt_resnet_cfg mc;
    train_model_cfg(c, run->classes, &mc);
    /* each replica its own dropout masks (its own batch), all from the run's seed */
    mc.dropout_seed = c->seed + 0x9E3779B97F4A7C15ULL * (uint64_t)r->rank;
    /* The model's initialization and the synthetic batch draw from the process's RNGs (the
     * host one and this device's cuRAND, both reseeded): replicas build one at a time, each
     * from the start of the seed's streams, so every replica makes the same model. */
    pthread_mutex_lock(&run->init_mu);
    dt_init_reseed();
    dt_resnet_init(&r->model, &mc, run->dev);
    r->have_model = 1;
    if (c->synthetic) make_synthetic(r);
    pthread_mutex_unlock(&run->init_mu);
    SAY(r, "model %s: %lld parameters, %d deformable convs", dt_resnet_model_name(mc.model),
        (long long)dt_params_numel(&r->model.params), r->model.n_deform);
    dt_sgd_opts so = {.momentum = c->momentum, .weight_decay = c->weight_decay, .nesterov = c->nesterov,
                      .decay_all = c->decay_bn_bias};
    dt_sgd_init(&r->opt, &r->model.params, &so);
    r->sched = (dt_schedule){.kind = (dt_sched_kind)dt_schedule_kind(c->schedule), .base_lr = c->lr, .min_lr = c->min_lr,
                             .gamma = c->lr_gamma, .warmup_start = c->warmup_start, .total_steps = run->total_steps,
                             .step_size = (int64_t)c->lr_step_epochs * run->steps_per_epoch, .warmup_steps = c->warmup};
    if (run->have_init && load_init(r)) return 1;
    if (run->have_ck && load_state(r)) return 1;
    if (r->dist) {
        broadcast_state(r, 1);
        dt_grad_sync_init(&r->gs, &r->model.params, r->dist, (size_t)c->bucket_mb << 20);
        if (c->sync_bn) {
            r->bn_sync = (dt_bn_sync){.allreduce = bn_allreduce, .ctx = r->dist, .ranks = run->world};
            for (int i = 0; i < r->model.n_bns; i++) r->model.bns[i]->sync = &r->bn_sync;
        }
        int64_t one[1] = {1};
        r->stop_flag = dt_tensor_new_unscoped(1, one, run->dev, DT_F32, DT_NCHW);
        dt_tensor_fill(r->stop_flag, 0.0f);
    }
    if (!c->synthetic) {
        int64_t si[4] = {c->batch, c->image_size, c->image_size, 3}, sl[1] = {c->batch};
        r->in_u8 = dt_tensor_new_unscoped(4, si, run->dev, DT_U8, DT_NCHW);
        r->in_y = dt_tensor_new_unscoped(1, sl, run->dev, DT_I32, DT_NCHW);
    }
    marks_init(&r->pq[0].m, run->dev == DT_GPU);
    marks_init(&r->pq[1].m, run->dev == DT_GPU);
    r->have_marks = 1;
    r->step = run->pos.step;
    return 0;
}

void replica_teardown(replica *r) {
    train_run *run = r->run;
    for (int i = 0; i < 2; i++)
        if (r->pq[i].has_batch) dt_loader_release(r->train_ld, &r->pq[i].batch);
    if (r->have_marks) {
        marks_free(&r->pq[0].m);
        marks_free(&r->pq[1].m);
    }
    double *arr[5] = {r->t_step, r->t_fwd, r->t_bwd, r->t_opt, r->t_wait};
    for (int i = 0; i < 5; i++) free(arr[i]);
    if (r->dist) dt_grad_sync_free(&r->gs);
    dt_graph_free(r->graph);
    r->graph = NULL;
    if (r->have_model) {
        dt_sgd_free(&r->opt);
        dt_resnet_free(&r->model);
    }
    if (r->train_ld) dt_loader_free(r->train_ld);
    if (r->val_ld) dt_loader_free(r->val_ld);
    dt_tensor_free(r->syn_x);
    dt_tensor_free(r->syn_y);
    dt_tensor_free(r->in_u8);
    dt_tensor_free(r->in_y);
    dt_tensor_free(r->stop_flag);
    if (run->dev == DT_GPU) dt_gpu_sync();
    dt_dist_leave(r->dist);
    r->dist = NULL;
}

/* ---- a step ---- */

/* A loader batch's images (u8 [n, S, S, 3] in host memory, or in device memory with GPU
 * decode) as the model's input (evaluation): on the device and normalized there in one pass
 * into the model's dtype and layout, so that the forward's own conversion of its input is a
 * no-op. */
/* A batch into u8 [n, S, S, 3] and labels y [n] on the run's device - the one copy path of
 * training and evaluation: on the GPU queued on the stream from the loader's pinned slot (with
 * GPU decode: from its device buffer), so the slot is released only after something later on
 * the stream was waited for (the training step's last event; an evaluation batch's loss read
 * back); on the CPU copied. Training copies its whole batch (the train loader drops the last
 * partial batch and refills the slots of unreadable images) into the step's input buffers
 * (in_u8, in_y), whose earlier contents were read by the previous step, queued before. */
static void copy_batch(replica *r, const dt_batch *b, dt_tensor *u8, dt_tensor *y) {
    size_t img = dt_tensor_bytes(u8), lab = dt_tensor_bytes(y);
    if (r->run->dev == DT_GPU) {
        if (b->dev_images) dt_copy_d2d(u8->data, b->dev_images, img); /* GPU decode: already there */
        else dt_copy_h2d_async(u8->data, b->images, img);
        dt_copy_h2d_async(y->data, b->labels, lab);
    } else {
        memcpy(u8->data, b->images, img);
        memcpy(y->data, b->labels, lab);
    }
}

/* The device work of one step, its inputs in place: the batch normalized, forward, loss,
 * backward with the gradient exchange, the update (at the rate dt_sgd_begin_step wrote), the
 * stop request's all-reduce. It is what a CUDA graph captures; the step's host work (the batch
 * copy, the rate, the read-backs) stays outside. Returns where the loss is left (the replicas'
 * average with peers). timed: records the phase events (an eager step; a graph has no events
 * inside). */
static const float *step_body(replica *r, step_pending *p, int timed) {
    train_run *run = r->run;
    const dt_train_cfg *c = run->c;
    dt_tensor *x, *y;
    if (c->synthetic) {
        x = r->syn_x;
        y = r->syn_y;
    } else {
        x = dt_normalize_images(r->in_u8, dt_imagenet_mean, dt_imagenet_std, r->model.act, r->model.cfg.layout);
        y = r->in_y;
        dt_graph_note_op("normalize_images", 0);
    }
    dt_params_zero_grad(&r->model.params);
    dt_tensor *logits = dt_resnet_forward(&r->model, x, 1);
    dt_tensor *loss = dt_softmax_cross_entropy(logits, y, c->label_smoothing);
    loss->retain = 1;
    if (timed) mark(&p->m, 1);
    /* With peers the loss rides in the first gradient bucket: read back averaged. */
    const float *loss_src = dt_data_f32(loss);
    if (r->dist) {
        float *slot = dt_grad_sync_loss_slot(&r->gs);
        if (run->dev == DT_GPU) dt_copy_d2d(slot, loss_src, sizeof(float));
        else *slot = loss_src[0];
        loss_src = slot;
        dt_grad_sync_begin(&r->gs);
    }
    dt_backward(loss);
    if (r->dist) dt_grad_sync_end(&r->gs), dt_graph_note_op("gradient all-reduce", 1);
    if (timed) mark(&p->m, 2);
    dt_sgd_apply(&r->opt);
    dt_graph_note_op("sgd", 0);
    /* The stop request, averaged over the replicas in stream order like the gradients (raised
     * before the step by replica_enqueue_step). */
    if (r->dist) {
        dt_dist_allreduce_f32(r->dist, dt_data_f32(r->stop_flag), 1, 1);
        dt_graph_note_op("stop request all-reduce", 0);
    }
    return loss_src;
}

/* Captures the step body as a CUDA graph and launches it: 0 (r->graph_loss is where it leaves
 * the loss), or -1 (the run goes on eagerly, with one warning naming what could not be
 * captured). Nothing of a failed capture ran on the device; its host bookkeeping did - the
 * deformable layers counted one call more, which moves a halo-refresh schedule by one call. */
static int capture_step(replica *r, step_pending *p) {
    dt_graph *g = dt_graph_begin();
    dt_scope_begin();
    const float *src = step_body(r, p, 0);
    dt_scope_end();
    char why[900];
    double ms = 0;
    if (dt_graph_end(g, why, sizeof why, &ms)) {
        r->graphs_off = 1;
        if (r->rank == 0)
            train_warn(&r->run->out, "graphs=1: the training step cannot be captured as a CUDA graph (%s); it runs eagerly "
                       "from step %lld on (graphs=0 says so up front)", why, (long long)p->step + 1);
        return -1;
    }
    r->graph = g;
    r->graph_loss = src;
    r->captures++;
    r->capture_ms = ms;
    if (r->captures == 1)
        SAY(r, "CUDA graph: the step captured at step %lld (%zu nodes, %.1f ms to capture and instantiate); replayed "
            "from there on", (long long)p->step + 1, dt_graph_nodes(g), ms);
    /* The eager steps' blocks stay cached in the device's pool; the graph has its own. */
    dt_gpu_empty_cache();
    dt_graph_launch(g);
    return 0;
}

/* The step's loss (at loss_src, the replicas' average with peers) and the stop request copied
 * to the pending step's pinned slots: queued before the step's last event, so that a finished
 * event means they have landed (a step with no next one is read after that event alone). */
static void read_back(replica *r, step_pending *p, const float *loss_src) {
    const float *stop_src = r->dist ? dt_data_f32(r->stop_flag) : NULL;
    if (r->run->dev == DT_GPU) {
        dt_copy_d2h_async(p->m.loss_host, loss_src, sizeof(float));
        if (stop_src) dt_copy_d2h_async(p->m.loss_host + 1, stop_src, sizeof(float));
    } else {
        p->m.loss_host[0] = *loss_src;
        if (stop_src) p->m.loss_host[1] = *stop_src;
    }
}

/* The step's device work: replayed from the graph, captured now, or run eagerly. A step that
 * reads device values on the host inside (a deformable layer's halo refresh) runs eagerly; once
 * a halo changed (by such a step or in an evaluation) the graph's launches are stale: it is
 * dropped and captured again GRAPH_WARMUP steps later. Every training step has the same shape
 * (whole batches), so nothing else re-captures; evaluation runs eagerly between steps, outside
 * the graph. */
static void run_step(replica *r, step_pending *p) {
    const dt_train_cfg *c = r->run->c;
    uint64_t key = dt_resnet_launch_key(&r->model);
    if (r->graph && key != r->graph_key) {
        dt_graph_free(r->graph);
        r->graph = NULL;
        r->eager_run = 0;
    }
    int graphable = c->graphs && r->run->dev == DT_GPU && !r->graphs_off && !dt_resnet_forward_reads_back(&r->model);
    p->graphed = 0;
    if (graphable && r->graph) {
        dt_graph_launch(r->graph);
        dt_resnet_replayed(&r->model);
        p->graphed = 1;
        read_back(r, p, r->graph_loss); /* its blocks are the graph's: nothing else writes them */
        return;
    }
    if (graphable && r->eager_run >= GRAPH_WARMUP && capture_step(r, p) == 0) {
        r->graph_key = key;
        p->graphed = 1;
        read_back(r, p, r->graph_loss);
        return;
    }
    r->eager_run++;
    dt_scope_begin();
    read_back(r, p, step_body(r, p, 1)); /* before the scope frees the loss */
    dt_scope_end();
}

/* Enqueues one step into p: its batch (this replica's shard) to the device, the learning rate,
 * the stop request, then the device work and the read-backs (run_step). *epoch_over = 1 (and
 * nothing enqueued) when the loader has no batch left in this epoch. */
int replica_enqueue_step(replica *r, step_pending *p, int64_t epoch, int *epoch_over) {
    train_run *run = r->run;
    const dt_train_cfg *c = run->c;
    *epoch_over = 0;
    if (r->dist && dt_dist_aborted(dt_dist_group_of(r->dist))) return aborted_error(r);
    p->step = r->step;
    p->epoch = epoch;
    double w0 = dt_now_ms();
    if (c->synthetic) {
        p->n = c->batch;
        p->wait_ms = 0;
        mark(&p->m, 0);
    } else {
        int got = dt_loader_next(r->train_ld, &p->batch);
        if (got != 1) {
            if (got < 0) return dt_errf(&r->err, "%s", dt_loader_error(r->train_ld)), 1;
            *epoch_over = 1;
            return 0;
        }
        p->has_batch = 1;
        p->wait_ms = dt_now_ms() - w0;
        mark(&p->m, 0);
        p->n = p->batch.n;
        if (p->n != c->batch)
            return dt_errf(&r->err, "the train loader gave a batch of %d images, not %d", p->n, c->batch), 1;
        copy_batch(r, &p->batch, r->in_u8, r->in_y);
    }
    p->active = 1;
    p->lr = dt_schedule_lr(&r->sched, r->step);
    dt_sgd_begin_step(&r->opt, p->lr);
    /* The stop request: this process's interrupt, raised in the flag the step all-reduces, so
     * that every replica reads the same value for this step - a signal that reaches one process
     * (or lands between two replicas' polls) stops all of them after the same step. Raised once,
     * it stays raised. */
    int want = train_interrupt_pending() != 0;
    if (r->dist && want && !r->stop_sent) dt_tensor_fill(r->stop_flag, 1.0f), r->stop_sent = 1;
    run_step(r, p);
    if (!r->dist) p->m.loss_host[1] = (float)want;
    mark(&p->m, 3);
    r->step++;
    return 0;
}

static int log_step(replica *r, const step_pending *p, float loss, const float tt[4]);

/* Reads back a finished step: loss, times; logs it (replica 0); releases its batch. */
int replica_finish_step(replica *r, step_pending *p, step_pending *next) {
    train_run *run = r->run;
    if (!p->active) return 0;
    float tt[4];
    if (marks_read(r, &p->m, p->graphed, next && next->active ? &next->m : NULL, tt)) return aborted_error(r);
    p->active = 0;
    if (p->has_batch) dt_loader_release(r->train_ld, &p->batch);
    p->has_batch = 0;
    double step_ms = tt[3];
    float loss = p->m.loss_host[0];
    if (p->m.loss_host[1] > 0) r->stopping = 1;
    dt_train_result *res = run->res;
    if (r->ntimed == r->cap) { /* grown as steps finish: a run of 10^9 steps asks nothing up front */
        r->cap = r->cap ? 2 * r->cap : 256;
        double **arr[5] = {&r->t_step, &r->t_fwd, &r->t_bwd, &r->t_opt, &r->t_wait};
        for (int i = 0; i < 5; i++) *arr[i] = dt_xrealloc(*arr[i], (size_t)r->cap * sizeof(double));
        if (r->rank == 0) res->losses = dt_xrealloc(res->losses, (size_t)r->cap * sizeof(float));
    }
    if (r->rank == 0) {
        res->graph_steps += p->graphed;
        res->losses[r->ntimed] = loss;
        if (res->steps == 0) res->first_loss = loss;
        res->last_loss = loss;
        res->steps++;
    }
    r->epoch_loss += loss;
    r->epoch_steps++;
    /* every step; the warm-up is cut when the statistics are taken */
    r->t_step[r->ntimed] = step_ms;
    r->t_fwd[r->ntimed] = tt[0];
    r->t_bwd[r->ntimed] = tt[1];
    r->t_opt[r->ntimed] = tt[2];
    r->t_wait[r->ntimed++] = p->wait_ms;
    if (r->rank == 0 && log_step(r, p, loss, tt)) return 1;
    /* The loss is the replicas' average: all of them see the same NaN and stop together. */
    if (!isfinite(loss))
        return dt_errf(&r->err, "the loss is %f at step %lld: training diverged (lower lr?)", loss, (long long)p->step + 1),
               1;
    return 0;
}

/* "1h02m", "3m07s", "42s". */
static void duration_text(double s, char *b, size_t cap) {
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(b, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(b, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(b, cap, "%lds", t);
}

/* "elapsed 1m05s, ETA 3m10s": the time since this run's first step, and the rest at the mean
 * rate of the steps so far (evaluations included, as they recur). */
static void eta_text(const replica *r, int64_t done_step, char *b, size_t cap) {
    const train_run *run = r->run;
    double el = (dt_now_ms() - r->run_t0) / 1e3;
    int64_t done = done_step - run->pos.step, left = run->stop - done_step;
    char e[24], rest[24];
    duration_text(el, e, sizeof e);
    if (done > 0 && left > 0) {
        duration_text(el / (double)done * (double)left, rest, sizeof rest);
        snprintf(b, cap, "elapsed %s, ETA %s", e, rest);
    } else {
        snprintf(b, cap, "elapsed %s", e);
    }
}

/* Replica 0's record of a step: the steps CSV, a log line every log_every steps, the live line. */
static int log_step(replica *r, const step_pending *p, float loss, const float tt[4]) {
    train_run *run = r->run;
    const dt_train_cfg *c = run->c;
    double step_ms = tt[3];
    int global_n = p->n * run->world;
    train_output *o = &run->out;
    if (o->steps_csv)
        fprintf(o->steps_csv, "%lld,%lld,%.6f,%.6g,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f\n", (long long)p->step + 1,
                (long long)p->epoch, loss, p->lr, tt[0], tt[1], tt[2], step_ms, p->wait_ms, global_n / step_ms * 1e3);
    if ((p->step + 1) % c->log_every == 0 || p->step + 1 == run->stop) {
        train_output_check(o, o->steps_csv, o->steps_path);
        char phases[96] = "CUDA graph";
        if (!p->graphed) snprintf(phases, sizeof phases, "fwd %.2f bwd %.2f opt %.2f ms", tt[0], tt[1], tt[2]);
        char eta[64];
        eta_text(r, p->step + 1, eta, sizeof eta);
        train_say(o, "step %6lld/%lld epoch %lld  loss %.4f  lr %.4g  %s  step %.2f ms  data %.2f ms  %.0f img/s  %s",
                  (long long)p->step + 1, (long long)run->total_steps, (long long)p->epoch, loss, p->lr, phases, step_ms,
                  p->wait_ms, global_n / step_ms * 1e3, eta);
    } else if (o->tty) {
        char eta[64];
        eta_text(r, p->step + 1, eta, sizeof eta);
        printf("\r\033[Kstep %lld/%lld loss %.4f %.2f ms/step  %s", (long long)p->step + 1, (long long)run->total_steps,
               loss, step_ms, eta);
        fflush(stdout);
    }
    if (!run->plan_logged && o->log) { /* every conv has planned once the first step has run */
        dt_conv_plan_print(o->log);
        run->plan_logged = 1;
    }
    if (o->failed[0]) return dt_errf(&r->err, "%s", o->failed), 1;
    return 0;
}

/* ---- an epoch's end ---- */

/* Evaluates this replica's shard of the val set: sums of top-1 and top-5 hits and of the loss,
 * and the image count, in m[0..3]. Collects the offset statistics of every deformable layer
 * on the first batch. 1 (with err set) when the val loader fails. */
static int evaluate_shard(replica *r, int64_t epoch, double m[4], int stats) {
    dt_set_grad_enabled(0);
    /* the training epoch it evaluates: what the val loader's messages name (its order and
     * transforms do not depend on it) */
    dt_loader_start_epoch(r->val_ld, (int)epoch);
    dt_batch b;
    int64_t nbat = 0;
    int got;
    while ((got = dt_loader_next(r->val_ld, &b)) == 1) { /* max_val_batches: the loader's subset */
        dt_scope_begin();
        for (int i = 0; stats && nbat == 0; i++) {
            dt_deform_conv *dl = dt_resnet_deform_layer(&r->model, i);
            if (!dl) break;
            dl->collect_stats = 1;
            dl->stats_halo = dl->cur_halo;
        }
        int S = r->run->c->image_size;
        int64_t sx[4] = {b.n, S, S, 3}, sy[1] = {b.n};
        dt_tensor *u8 = dt_tensor_new_as(4, sx, r->run->dev, DT_U8, DT_NCHW);
        dt_tensor *y = dt_tensor_new_as(1, sy, r->run->dev, DT_I32, DT_NCHW);
        copy_batch(r, &b, u8, y);
        dt_tensor *x = dt_normalize_images(u8, dt_imagenet_mean, dt_imagenet_std, r->model.act, r->model.cfg.layout);
        dt_tensor *logits = dt_resnet_forward(&r->model, x, 0);
        float cc[2];
        dt_topk_correct(logits, y, cc);
        m[2] += dt_item(dt_softmax_cross_entropy(logits, y, 0.0f)) * b.n;
        m[0] += cc[0];
        m[1] += cc[1];
        m[3] += b.n;
        nbat++;
        for (int i = 0;; i++) {
            dt_deform_conv *dl = dt_resnet_deform_layer(&r->model, i);
            if (!dl) break;
            dl->collect_stats = 0;
        }
        dt_scope_end();
        dt_loader_release(r->val_ld, &b);
    }
    dt_set_grad_enabled(1);
    return got < 0 ? dt_errf(&r->err, "%s", dt_loader_error(r->val_ld)), 1 : 0;
}

static void log_offset_stats(replica *r, int64_t epoch) {
    for (int i = 0;; i++) {
        dt_deform_conv *dl = dt_resnet_deform_layer(&r->model, i);
        if (!dl) break;
        if (!dl->stats_valid) continue;
        char buf[512];
        dt_offset_stats_format(&dl->stats, buf, sizeof buf);
        SAY(r, "epoch %lld offsets %-18s %s (halo in use %d)", (long long)epoch, dl->name, buf, dl->cur_halo);
        dl->stats_valid = 0;
    }
}

/* The checkpoint of this replica's state at `np` (replica 0): serialized here - the tensors
 * copied to the host, after which training may change them - and written to the run's path by
 * its background writer (ckpt_writer.h) while the next steps run - never waiting for the
 * disk, which a slower disk answers by superseding a checkpoint still waiting for it; wait:
 * written before this returns (the run stops after it: an interrupt, stop_at). An earlier
 * write's failure is this call's. */
static int save_ckpt(replica *r, const dt_ckpt_pos *np, int wait) {
    train_run *run = r->run;
    const double t0 = dt_now_ms();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) dt_fatal("open_memstream failed");
    dt_config_write(run->c, f);
    fclose(f);
    if (r->dist) dt_dist_watch(r->dist, 0); /* no collective while writing: no stall timeout */
    dt_ckpt_image img = {0};
    dt_ckpt_writer_spare(run->ckpt_writer, &img);
    dt_checkpoint_serialize_state(text, np, &r->model.params, r->opt.bufs, r->model.buffers, r->model.n_buffers, &img);
    free(text);
    int rc = dt_ckpt_writer_submit(run->ckpt_writer, run->ckpt_path, &img, &r->err);
    if (!rc && wait) rc = dt_ckpt_writer_wait(run->ckpt_writer, NULL, &r->err);
    if (r->dist) dt_dist_watch(r->dist, 1);
    r->epoch_ckpt_ms += dt_now_ms() - t0;
    if (rc) return 1;
    r->last_ckpt_ms = dt_now_ms();
    snprintf(run->res->checkpoint, sizeof run->res->checkpoint, "%s", run->ckpt_path);
    SAY(r, "checkpoint %s (epoch %lld, batch %lld, step %lld)%s", run->ckpt_path, (long long)np->epoch,
        (long long)np->batch, (long long)np->step, wait ? "" : ": being written in the background");
    return 0;
}

/* checkpoint_every / checkpoint_minutes ask for a checkpoint after the step just done. */
static int periodic_due(const replica *r) {
    const dt_train_cfg *c = r->run->c;
    if (r->rank != 0) return 0;
    if (c->checkpoint_every > 0 && r->step % c->checkpoint_every == 0) return 1;
    return c->checkpoint_minutes > 0 && dt_now_ms() - r->last_ckpt_ms >= c->checkpoint_minutes * 60e3;
}

/* The stop request ends the run early: it was seen before the run's last step. */
static int interrupted(const replica *r) { return r->stopping && r->step < r->run->stop; }

/* Evaluation when due (every replica its shard; the sums reduced), the epoch's log line, the
 * checkpoint (replica 0). Every replica calls it at the end of every epoch it trained in. */
int replica_end_epoch(replica *r, int64_t epoch, int epoch_done, int64_t batches_done) {
    train_run *run = r->run;
    const dt_train_cfg *c = run->c;
    train_output *o = &run->out;
    double ep_s = (dt_now_ms() - r->epoch_t0) / 1e3;
    double v1 = NAN, v5 = NAN, vl = NAN;
    int last = r->step >= run->total_steps;
    /* Evaluate every eval_every epochs, and at the end of the run even mid-epoch (a
     * steps-limited run); not when stop_at or an interrupt stops it (it will resume). */
    int eval = r->val_ld && !interrupted(r) &&
               ((epoch_done && c->eval_every && (epoch + 1) % c->eval_every == 0) || last);
    /* m: top-1 hits, top-5 hits, loss sum, images (evaluation), skipped train images */
    double m[5] = {0, 0, 0, 0, r->train_ld ? (double)dt_loader_epoch_stats(r->train_ld).skipped : 0};
    const double eval_t0 = dt_now_ms();
    if (eval) {
        if (r->dist) broadcast_state(r, 0); /* replica 0's BN statistics, as DDP's broadcast_buffers */
        if (r->dist) dt_dist_watch(r->dist, 0); /* no collective while evaluating: no stall timeout */
        int bad = evaluate_shard(r, epoch, m, 1);
        if (r->dist) dt_dist_watch(r->dist, 1);
        if (bad) {
            if (r->dist) dt_dist_abort(dt_dist_group_of(r->dist), "replica %d: %s", r->rank, r->err.msg);
            return 1;
        }
    }
    if (r->dist && dt_dist_allreduce_host(r->dist, m, 5)) return aborted_error(r);
    const double eval_s = (dt_now_ms() - eval_t0) / 1e3;
    double stats_s = 0;
    if (eval) {
        v1 = m[3] ? m[0] / m[3] : NAN;
        v5 = m[3] ? m[1] / m[3] : NAN;
        vl = m[3] ? m[2] / m[3] : NAN;
        if (r->rank == 0) {
            run->res->val_top1 = v1;
            run->res->val_top5 = v5;
        }
        SAY(r, "epoch %lld done in %.1f s: train loss %.4f, val loss %.4f, val top-1 %.2f%%, top-5 %.2f%%%s", (long long)epoch,
            ep_s, r->epoch_steps ? r->epoch_loss / r->epoch_steps : NAN, vl, 100 * v1, 100 * v5,
            run->world > 1 ? " (all replicas' shards)" : "");
        const double stats_t0 = dt_now_ms();
        log_offset_stats(r, epoch);
        stats_s = (dt_now_ms() - stats_t0) / 1e3;
        if (r->train_ld && r->rank == 0) {
            dt_loader_stats ls = dt_loader_epoch_stats(r->train_ld);
            char lb[1024];
            dt_loader_stats_str(&ls, lb, sizeof lb);
            SAY(r, "loader%s: %s", run->world > 1 ? " (replica 0)" : "", lb);
        }
    }
    if (r->rank != 0) return 0;
    if (o->epochs_csv)
        fprintf(o->epochs_csv, "%lld,%lld,%.6f,%.6f,%.6f,%.6f,%.3f,%lld\n", (long long)epoch, (long long)r->epoch_steps,
                r->epoch_steps ? r->epoch_loss / r->epoch_steps : NAN, vl, v1, v5, ep_s, (long long)m[4]);
    train_output_check(o, o->epochs_csv, o->epochs_path);
    train_output_check(o, o->steps_csv, o->steps_path);
    if (o->failed[0]) return dt_errf(&r->err, "%s", o->failed), 1;
    /* checkpoint= asks for one at every epoch's end and at the end; a stop that will be
     * resumed (stop_at, an interrupt) and checkpoint_every / _minutes write one anyway */
    int by_stop_at = r->step == run->stop && run->stop < run->total_steps;
    if (c->checkpoint[0] || by_stop_at || interrupted(r) || periodic_due(r)) {
        dt_ckpt_pos np = {epoch_done ? epoch + 1 : epoch, epoch_done ? 0 : batches_done, r->step};
        if (save_ckpt(r, &np, by_stop_at || interrupted(r))) return 1;
    }
    /* where the epoch's wall time went: its steps (with their data waits), the evaluation,
     * the offset statistics' report, and the checkpoints' time on this thread */
    SAY(r, "epoch %lld wall time: training %.2f s, evaluation %.2f s, offset statistics %.3f s, checkpoint %.3f s",
        (long long)epoch, ep_s, eval_s, stats_s, r->epoch_ckpt_ms / 1e3);
    r->epoch_ckpt_ms = 0;
    return 0;
}

/* ---- the loop ---- */

static void summarize(replica *r) {
    train_run *run = r->run;
    const dt_train_cfg *c = run->c;
    dt_train_result *res = run->res;
    dt_mem_stats ms = dt_gpu_mem_stats();
    res->peak_mem = ms.peak_in_use;
    char peak[64] = "n/a (CPU run)";
    if (run->dev == DT_GPU)
        snprintf(peak, sizeof peak, "%.2f GiB%s", res->peak_mem / 1073741824.0, run->world > 1 ? " per GPU" : "");
    /* Statistics after the warm-up steps; a run shorter than the warm-up uses all of them. */
    int64_t w = r->ntimed > c->timing_warmup ? c->timing_warmup : 0, n = r->ntimed - w;
    if (!w && r->ntimed)
        SAY(r, "note: only %lld steps, fewer than timing_warmup=%d: times include the warm-up", (long long)r->ntimed,
            c->timing_warmup);
    res->graph_captures = r->captures;
    res->median_step_ms = percentile(r->t_step + w, n, 0.5);
    res->p90_step_ms = percentile(r->t_step + w, n, 0.9);
    res->median_fwd_ms = percentile(r->t_fwd + w, n, 0.5);
    res->median_bwd_ms = percentile(r->t_bwd + w, n, 0.5);
    res->median_opt_ms = percentile(r->t_opt + w, n, 0.5);
    res->img_per_s = (double)c->batch * run->world / res->median_step_ms * 1e3;
    double wsum = 0;
    for (int64_t i = w; i < r->ntimed; i++) wsum += r->t_wait[i];
    res->data_wait_ms = n ? wsum / n : 0;
    char split[160];
    if (isnan(res->median_fwd_ms)) /* every timed step replayed from the graph */
        snprintf(split, sizeof split, " (one CUDA graph: no phase split)");
    else
        snprintf(split, sizeof split, " = fwd %.2f + bwd %.2f + opt %.2f%s", res->median_fwd_ms, res->median_bwd_ms,
                 res->median_opt_ms, r->captures ? " (the eager steps' phases)" : "");
    char graph[160] = "";
    if (r->captures)
        snprintf(graph, sizeof graph, "; CUDA graph: %lld capture%s, the last %.1f ms", (long long)r->captures,
                 r->captures == 1 ? "" : "s", r->capture_ms);
    SAY(r, "summary: %lld steps in %.1f s; after %d warm-up steps: step median %.2f ms (p90 %.2f)%s; %.0f img/s%s; data "
        "wait %.2f ms/step; peak GPU memory %s%s", (long long)res->steps, (dt_now_ms() - r->run_t0) / 1e3, (int)w,
        res->median_step_ms, res->p90_step_ms, split, res->img_per_s, run->world > 1 ? " (all replicas)" : "",
        res->data_wait_ms, peak, graph);
    /* a run stopped before its end (an interrupt, stop_at) has no final evaluation */
    const char *stopped = interrupted(r)                                    ? "interrupted"
                          : r->step == run->stop && run->stop < run->total_steps ? "stopped by stop_at"
                                                                                 : NULL;
    if (res->val_top1 >= 0)
        SAY(r, "%s val top-1 %.2f%%, top-5 %.2f%%%s", stopped ? "last" : "final", 100 * res->val_top1, 100 * res->val_top5,
            stopped ? " (an earlier epoch's: the run stopped before its end; resume to continue)" : "");
    else if (c->synthetic) SAY(r, "no evaluation (synthetic data)");
    else if (stopped) SAY(r, "no evaluation (%s; resume to continue)", stopped);
    else SAY(r, "no evaluation (no val image was evaluated)");
}

static int train_epochs(replica *r) {
    train_run *run = r->run;
    dt_ckpt_pos pos = run->pos;
    for (int64_t epoch = pos.epoch; r->step < run->stop; epoch++) {
        r->epoch_t0 = dt_now_ms();
        r->epoch_loss = 0;
        r->epoch_steps = 0;
        if (r->train_ld) dt_loader_start_epoch(r->train_ld, (int)epoch);
        int64_t b = 0;
        if (epoch == pos.epoch && pos.batch > 0) { /* resume inside an epoch: skip what was done */
            dt_batch skip;
            for (; b < pos.batch; b++) {
                if (!r->train_ld) continue;
                if (dt_loader_next(r->train_ld, &skip) != 1) break;
                dt_loader_release(r->train_ld, &skip);
            }
        }
        int over = 0;
        while (b < run->steps_per_epoch && r->step < run->stop && !r->stopping) {
            if (replica_enqueue_step(r, &r->pq[r->cur], epoch, &over)) return 1;
            if (over) break;
            b++;
            r->cur ^= 1;
            /* the previous step; the one just queued is next */
            if (replica_finish_step(r, &r->pq[r->cur], &r->pq[r->cur ^ 1])) return 1;
            /* A mid-epoch checkpoint (an epoch's end writes its own): the step just queued is
             * finished first, so that the weights saved are those of the position saved. */
            if (b < run->steps_per_epoch && r->step < run->stop && !r->stopping && periodic_due(r)) {
                if (replica_finish_step(r, &r->pq[r->cur ^ 1], NULL)) return 1;
                dt_ckpt_pos np = {epoch, b, r->step};
                if (!r->stopping && save_ckpt(r, &np, 0)) return 1;
            }
        }
        if (replica_finish_step(r, &r->pq[r->cur ^ 1], NULL) || replica_finish_step(r, &r->pq[r->cur], NULL)) return 1;
        int epoch_done = b >= run->steps_per_epoch;
        if (replica_end_epoch(r, epoch, epoch_done, b)) return 1;
        if (!epoch_done || r->stopping) break; /* stopped inside the epoch, or asked to stop */
    }
    return 0;
}

int replica_main(replica *r) {
    train_run *run = r->run;
    int rc = replica_setup(r);
    if (!rc) {
        if (run->dev == DT_GPU) dt_gpu_reset_peak();
        r->run_t0 = r->last_ckpt_ms = dt_now_ms();
        rc = train_epochs(r);
        /* the last checkpoint on disk before the run reports its end */
        if (r->rank == 0 && dt_ckpt_writer_wait(run->ckpt_writer, NULL, rc ? NULL : &r->err)) rc = 1;
        const dt_ckpt_writer_counts wc = dt_ckpt_writer_counts_of(run->ckpt_writer);
        if (!rc && r->rank == 0 && wc.superseded)
            SAY(r, "checkpoints: %lld written, %lld superseded by a newer one before the disk took them",
                (long long)wc.written, (long long)wc.superseded);
        if (!rc && r->rank == run->first_rank && interrupted(r)) run->interrupted = 1;
    }
    /* A replica that fails ends the run on all (the others' waits see the abort). */
    if (rc && r->dist) dt_dist_abort(dt_dist_group_of(r->dist), "replica %d: %s", r->rank, r->err.msg);
    else if (rc && run->group) dt_dist_abort(run->group, "replica %d: %s", r->rank, r->err.msg);
    if (r->rank == 0) run->res->global_step = r->step;
    if (!rc && r->rank == 0) summarize(r);
    if (!rc && r->rank == 0 && run->c->export_path[0]) rc = export_weights(r);
    return rc;
}
