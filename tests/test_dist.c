/* Data parallelism, on the CPU twin of the NCCL path (replicas as threads, shared-memory
 * collectives) and, with two GPUs, on NCCL: the bucket plan, the loader's shards, the
 * collectives and the abort, the metric reduction, and whole runs: N replicas with sync_bn
 * against one replica with the same global batch, bitwise determinism for the same N,
 * checkpoints written on N replicas resumed on M, a diverging run stopping every replica. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/batchnorm/batchnorm.h"
#include "tests/train_testutil.h"
#include "tests/data_testutil.h"
#include "tests/dt_check.h"
#include "train/dt_checkpoint.h"
#include "train/dt_config.h"
#include "data/dt_dataset.h"
#include "core/dt_device.h"
#include "core/dt_dist.h"
#include "train/dt_grad_sync.h"
#include "ops/dt_layers.h"
#include "data/dt_loader.h"
#include "tests/dt_test.h"
#include "train/dt_trainer.h"

/* ---- the bucket plan ---- */

DT_TEST(dist_bucket_plan_covers_every_gradient_once) {
    dt_rng *g = dt_test_rng();
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + (int)dt_rng_below(g, 80);
        int64_t numel[80], offset[80], start[80], len[80];
        int bucket_of[80];
        int64_t total = 1, biggest = 0;
        for (int i = 0; i < n; i++) {
            numel[i] = 1 + dt_rng_below(g, 5000);
            total += numel[i];
            if (numel[i] > biggest) biggest = numel[i];
        }
        int64_t cap = 1 + dt_rng_below(g, 20000);
        int nb = dt_bucket_plan(numel, n, cap, offset, bucket_of, start, len);
        EXPECT(nb >= 1 && nb <= n);
        /* buckets tile [0, total) in order, bucket 0 from the loss slot */
        EXPECT_EQ_INT(start[0], 0);
        for (int b = 1; b < nb; b++) EXPECT_EQ_INT(start[b], start[b - 1] + len[b - 1]);
        EXPECT_EQ_INT(start[nb - 1] + len[nb - 1], total);
        /* backward order: the last parameter first, contiguous, each inside its bucket */
        int64_t at = 1;
        for (int i = n - 1; i >= 0; i--) {
            EXPECT_EQ_INT(offset[i], at);
            at += numel[i];
            int b = bucket_of[i];
            EXPECT(b >= 0 && b < nb);
            EXPECT(offset[i] >= start[b] && offset[i] + numel[i] <= start[b] + len[b]);
            if (i < n - 1) EXPECT(bucket_of[i] >= bucket_of[i + 1]);
        }
        /* a bucket closes once it reaches the cap: never more than cap + one parameter */
        for (int b = 0; b < nb; b++) EXPECT(len[b] <= cap + biggest + 1);
        for (int b = 0; b + 1 < nb; b++) EXPECT(len[b] - (b == 0) >= cap);
    }
}

/* ---- the loader's shards ---- */

/* The images of one epoch of a loader, keyed by label and the first pixels (an image's
 * identity here), in the order handed out: keys[batch][row]. */
static int epoch_keys(dt_loader *l, int epoch, double *keys, int max) {
    dt_loader_start_epoch(l, epoch);
    dt_batch b;
    int n = 0;
    while (dt_loader_next(l, &b) == 1) {
        for (int i = 0; i < b.n && n < max; i++) {
            const uint8_t *im = b.images + (size_t)i * 32 * 32 * 3; /* [32, 32, 3] u8 */
            double k = b.labels[i] * 1e6;
            for (int j = 0; j < 64; j++) k += im[j * 37] * (j + 1);
            keys[n++] = k;
        }
        dt_loader_release(l, &b);
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

DT_TEST(dist_loader_shards_make_the_same_global_batches) {
    const char *root = dt_test_shapes("shapes", 3, 11, 5, 40); /* 33 train, 15 val images */
    dt_dataset tr, va;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&tr, root, "train", NULL, &err), 0);
    EXPECT_EQ_INT(dt_dataset_open(&va, root, "val", &tr, &err), 0);
    for (int train = 1; train >= 0; train--) {
        const int B = 4, R = 3;
        dt_dataset *ds = train ? &tr : &va;
        dt_loader_opts o = dt_loader_default_opts(train);
        o.image_size = 32;
        o.workers = 2;
        o.seed = 5;
        o.batch = B * R;
        dt_loader *one = dt_loader_new(ds, &o, &err);
        double all[64], parts[64];
        int n1 = epoch_keys(one, 2, all, 64);
        dt_loader_free(one);
        int n = 0;
        int64_t nb[3];
        double shard[3][64];
        int ns[3];
        for (int r = 0; r < R; r++) {
            dt_loader_opts os = o;
            os.batch = B;
            os.shard = r;
            os.shards = R;
            dt_loader *l = dt_loader_new(ds, &os, &err);
            EXPECT(l != NULL);
            if (!l) return;
            nb[r] = dt_loader_batches(l);
            ns[r] = epoch_keys(l, 2, shard[r], 64);
            dt_loader_free(l);
            for (int i = 0; i < ns[r]; i++) parts[n++] = shard[r][i];
        }
        if (train) {
            /* drop_last: 33 / 12 = 2 global batches, each replica 2 batches of 4 */
            for (int r = 0; r < R; r++) {
                EXPECT_EQ_INT(nb[r], 2);
                EXPECT_EQ_INT(ns[r], 8);
            }
            /* global batch b = the union of the replicas' batch b = one replica's batch b */
            for (int b = 0; b < 2; b++) {
                double u[12], v[12];
                for (int r = 0; r < R; r++)
                    for (int i = 0; i < B; i++) u[r * B + i] = shard[r][b * B + i];
                memcpy(v, all + b * 12, sizeof v);
                qsort(u, 12, sizeof *u, cmp_double);
                qsort(v, 12, sizeof *v, cmp_double);
                EXPECT_MSG(!memcmp(u, v, sizeof u), "global batch %d differs from one replica's batch", b);
            }
        } else {
            /* every val image once: 15 = 5 + 5 + 5 */
            EXPECT_EQ_INT(n, 15);
            EXPECT_EQ_INT(n1, 15);
            qsort(parts, n, sizeof *parts, cmp_double);
            qsort(all, n1, sizeof *all, cmp_double);
            EXPECT(!memcmp(parts, all, sizeof(double) * 15));
        }
    }
    /* more replicas than one global batch holds: a clear error */
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 8;
    o.shards = 5;
    o.shard = 4;
    o.image_size = 32;
    EXPECT(dt_loader_new(&tr, &o, &err) == NULL);
    EXPECT(strstr(err.msg, "5 replicas") != NULL);
    dt_dataset_close(&va);
    dt_dataset_close(&tr);
}

/* ---- synchronized batch norm ---- */

static void twice(void *ctx, double *sums, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) sums[i] *= 2; /* a second replica with the same batch */
}

DT_TEST(dist_sync_bn_kernels_equal_bn_over_all_replicas_batches) {
    /* Replica batch x, and a stand-in peer holding the same x: the statistics and the input
     * gradient must be those of BN over [x; x] (the first half of it), and dw, db this
     * replica's own half of [x; x]'s. */
    const int64_t N = 3, C = 4, P = 10;
    int64_t n1 = N * C * P;
    dt_rng *g = dt_test_rng();
    float *x2 = malloc(2 * n1 * sizeof(float)), *dy2 = malloc(2 * n1 * sizeof(float)), *y2 = malloc(2 * n1 * sizeof(float));
    float *y = malloc(n1 * sizeof(float)), *dx = malloc(n1 * sizeof(float)), *dx2 = malloc(2 * n1 * sizeof(float));
    dt_rng_fill_normal(g, x2, n1, 0.5f, 2.0f);
    dt_rng_fill_normal(g, dy2, n1, 0.0f, 1.0f);
    memcpy(x2 + n1, x2, n1 * sizeof(float));
    memcpy(dy2 + n1, dy2, n1 * sizeof(float));
    float w[4] = {1.0f, 0.5f, -2.0f, 1.5f}, b[4] = {0, 0.1f, 0.2f, 0.3f};
    float rm[2][4] = {{0}}, rv[2][4] = {{1, 1, 1, 1}, {1, 1, 1, 1}}, mean[2][4], inv[2][4], dw[2][4], db[2][4];
    dt_bn_sync sync = {twice, NULL, 2};
    void *ws = malloc(dt_bn_ws_bytes(C));
    dt_bn_stats_f32_nchw_cpu(N, C, P, x2, 1, 1e-5f, 0.1f, rm[0], rv[0], mean[0], inv[0], ws, &sync);
    dt_bn_stats_f32_nchw_cpu(2 * N, C, P, x2, 1, 1e-5f, 0.1f, rm[1], rv[1], mean[1], inv[1], ws, NULL);
    for (int c = 0; c < C; c++) {
        EXPECT_NEAR(mean[0][c], mean[1][c], 1e-6);
        EXPECT_NEAR(inv[0][c], inv[1][c], 1e-6 * fabs(inv[1][c]));
        EXPECT_NEAR(rv[0][c], rv[1][c], 1e-6);
        EXPECT_NEAR(rm[0][c], rm[1][c], 1e-6);
    }
    dt_bn_apply_f32_nchw_cpu(N, C, P, x2, mean[0], inv[0], w, b, NULL, 1, y);
    dt_bn_apply_f32_nchw_cpu(2 * N, C, P, x2, mean[1], inv[1], w, b, NULL, 1, y2);
    dt_bn_backward_f32_nchw_cpu(N, C, P, x2, y, NULL, dy2, mean[0], inv[0], w, b, 1, 1, dx, 0, NULL, 0, dw[0], 0, db[0], 0,
                                ws, &sync);
    dt_bn_backward_f32_nchw_cpu(2 * N, C, P, x2, y2, NULL, dy2, mean[1], inv[1], w, b, 1, 1, dx2, 0, NULL, 0, dw[1], 0,
                                db[1], 0, ws, NULL);
    EXPECT(dt_expect_close("sync dx", dx, dx2, n1, 1e-5));
    for (int c = 0; c < C; c++) {
        EXPECT_NEAR(dw[0][c], dw[1][c] / 2, 1e-5 * (1 + fabs(dw[1][c])));
        EXPECT_NEAR(db[0][c], db[1][c] / 2, 1e-5 * (1 + fabs(db[1][c])));
    }
    free(x2), free(dy2), free(y2), free(y), free(dx), free(dx2), free(ws);
}

/* One value per channel: refused alone (no variance to normalize by), accepted when the
 * statistics are two replicas' (PyTorch's SyncBatchNorm rule). */
static void bn_on_one_value(void *sync) {
    dt_batchnorm bn;
    dt_batchnorm_init(&bn, NULL, "bn", 2, DT_CPU);
    bn.sync = sync;
    dt_tensor *x = dt_tensor_new4(DT_CPU, 1, 2, 1, 1);
    dt_data_f32(x)[0] = 0.5f, dt_data_f32(x)[1] = -1.0f;
    dt_tensor *y = dt_batchnorm2d(x, &bn, 1, 0);
    printf("y = %g %g\n", dt_data_f32(y)[0], dt_data_f32(y)[1]);
    dt_batchnorm_free(&bn);
}

DT_TEST(dist_sync_bn_takes_one_value_a_replica) {
    EXPECT_DEATH(bn_on_one_value, NULL, "training needs more than one value per channel (input has N*H*W = 1)");
    static const dt_bn_sync two = {twice, NULL, 2};
    EXPECT_OUTPUT(bn_on_one_value, (void *)&two, "y = 0 0"); /* [x; x]: zero variance, y = beta */
}

/* ---- collectives ---- */

enum { MAX_REPLICAS = 8 };
typedef struct {
    dt_dist_group *g;
    int local, fail_at;
    int rc[4];
    float f[7];
    double d[5], host[3];
} coll_job;

static void *coll_thread(void *arg) {
    coll_job *j = arg;
    dt_dist *d;
    dt_err err;
    if (dt_dist_join(j->g, j->local, &d, &err)) return NULL;
    int r = dt_dist_rank(d);
    for (int i = 0; i < 7; i++) j->f[i] = 0.1f * (r + 1) + i;
    dt_dist_allreduce_f32(d, j->f, 7, 1);
    for (int i = 0; i < 5; i++) j->d[i] = 1e-3 * (r + 1) * (i + 1);
    dt_dist_allreduce_f64(d, j->d, 5);
    float bc[2] = {(float)r, (float)r};
    dt_dist_broadcast_f32(d, bc, 2, 1);
    j->rc[0] = bc[0] == 1.0f && bc[1] == 1.0f;
    j->host[0] = r;
    j->host[1] = 1;
    j->host[2] = 0.5 * r;
    j->rc[1] = dt_dist_allreduce_host(d, j->host, 3);
    /* then one replica fails; the others, waiting in a collective, are released */
    if (r == j->fail_at) dt_dist_abort(j->g, "replica %d: injected failure", r);
    else j->rc[2] = dt_dist_allreduce_host(d, j->host, 1);
    j->rc[3] = dt_dist_wait_event(d, NULL);
    dt_dist_leave(d);
    return NULL;
}

/* The collectives of W replicas: the sums in rank order (bitwise), the mean, the broadcast,
 * then replica fail_at aborts and every other one is released from its collective. */
static void collectives_of(int W, int fail_at) {
    dt_dist_opts o = {.dev = DT_CPU, .local = W};
    dt_err err;
    dt_dist_group *g = dt_dist_group_new(&o, &err);
    EXPECT(g != NULL);
    if (!g) return;
    coll_job jobs[MAX_REPLICAS];
    pthread_t th[MAX_REPLICAS];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < W; i++) {
        jobs[i].g = g;
        jobs[i].local = i;
        jobs[i].fail_at = fail_at;
        pthread_create(&th[i], NULL, coll_thread, &jobs[i]);
    }
    for (int i = 0; i < W; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < W; i++) {
        for (int k = 0; k < 7; k++) {
            float want = 0.1f * 1 + k; /* rank order, then / W */
            for (int r = 1; r < W; r++) want += 0.1f * (r + 1) + k;
            want /= (float)W;
            EXPECT_MSG(jobs[i].f[k] == want, "%d replicas: replica %d f[%d] = %.9g, expected %.9g", W, i, k,
                       jobs[i].f[k], want);
        }
        for (int k = 0; k < 5; k++) {
            double want = 1e-3 * 1 * (k + 1);
            for (int r = 1; r < W; r++) want += 1e-3 * (r + 1) * (k + 1);
            EXPECT_MSG(jobs[i].d[k] == want, "%d replicas: replica %d d[%d] = %.17g, expected %.17g", W, i, k,
                       jobs[i].d[k], want);
        }
        EXPECT(jobs[i].rc[0]);
        EXPECT_EQ_INT(jobs[i].rc[1], 0);
        if (i != fail_at) EXPECT_EQ_INT(jobs[i].rc[2], -1); /* released by the abort, not hung */
        EXPECT_EQ_INT(jobs[i].rc[3], -1);
    }
    char want[64];
    snprintf(want, sizeof want, "replica %d: injected failure", fail_at);
    EXPECT_MSG(strstr(dt_dist_abort_reason(g), want) != NULL, "%d replicas: reason '%s'", W, dt_dist_abort_reason(g));
    dt_dist_group_free(g);
}

DT_TEST(dist_cpu_collectives_agree_and_abort_releases_waiters) {
    collectives_of(3, 2);
    collectives_of(MAX_REPLICAS, 5); /* a peer among eight fails: the seven others are released */
}

DT_TEST(dist_metrics_reduce_to_the_sums) {
    dt_dist_opts o = {.dev = DT_CPU, .local = 2};
    dt_err err;
    dt_dist_group *g = dt_dist_group_new(&o, &err);
    coll_job jobs[2];
    pthread_t th[2];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 2; i++) {
        jobs[i].g = g;
        jobs[i].local = i;
        jobs[i].fail_at = -1;
        pthread_create(&th[i], NULL, coll_thread, &jobs[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        /* the first host reduction: sums of (rank, 1, rank / 2) */
        EXPECT_EQ_INT(jobs[i].rc[1], 0);
        EXPECT_EQ_INT(jobs[i].rc[2], 0);
        EXPECT_EQ_INT(jobs[i].rc[3], 0);
    }
    /* the second reduction summed host[0] again: (0 + 1) + (0 + 1) */
    EXPECT(jobs[0].host[0] == 2 && jobs[1].host[0] == 2);
    EXPECT(jobs[0].host[1] == 2 && jobs[0].host[2] == 0.5);
    dt_dist_group_free(g);
}

DT_TEST(dist_checkpoint_position_across_global_batches) {
    int exact;
    dt_ckpt_pos p = {3, 10, 3 * 50 + 10};
    dt_ckpt_pos q = dt_ckpt_pos_rescale(p, 64, 64, 50, &exact); /* same global batch: unchanged */
    EXPECT(exact && q.epoch == 3 && q.batch == 10 && q.step == 160);
    q = dt_ckpt_pos_rescale(p, 128, 64, 100, &exact); /* 2 GPUs x 64 -> 1 GPU x 64 */
    EXPECT(exact && q.epoch == 3 && q.batch == 20 && q.step == 320);
    q = dt_ckpt_pos_rescale(p, 64, 256, 25, &exact); /* 640 images done: 2 whole batches of 256 */
    EXPECT(!exact && q.epoch == 3 && q.batch == 2 && q.step == 77);
}

/* ---- whole runs ---- */

static void dp_cfg(dt_train_cfg *c, int replicas, int batch) {
    dt_test_run_cfg(c, dt_test_shapes("shapes", 2, 12, 6, 48), 32, 0.25f, batch);
    snprintf(c->gpus, sizeof c->gpus, "%d", replicas);
    c->workers = 2;
    c->lr = 0.02f;
    c->warmup = 0;
    strcpy(c->deform, "all");
    strcpy(c->deform_mode, "unfused");
    c->quiet = 1;
    c->log_every = 1000;
    c->seed = 3;
}

/* Largest relative difference of the first `steps` losses of two curves. */
static double curve_diff(const dt_train_result *a, const dt_train_result *b, int64_t steps) {
    double worst = 0;
    for (int64_t i = 0; i < a->steps && i < b->steps && i < steps; i++) {
        double d = fabs(a->losses[i] - b->losses[i]) / fmax(1e-6, fabs(a->losses[i]));
        if (d > worst) worst = d;
    }
    return worst;
}

DT_TEST(train_dp_sync_bn_matches_one_replica) {
    /* Same global batch (2 x 4 against 1 x 8), synchronized BN: the same training up to the
     * order of float sums. Per-replica BN (the default) is a different model: it must differ.
     * Only the first 3 steps are held to rounding: this tiny net (batch 8, 32 px, the last
     * stage's BN over 8 values) is chaotic: a 1e-6 change of label_smoothing on one replica
     * alone moves its loss by 3 % at step 8 on the sample dataset, and rounding differences
     * grew to 1 % by step 4 here. A wrong average or a wrong BN shows at step 1 or 2. A plain net: a deformable one samples at exactly integer positions while its
     * offsets are near zero, where the bilinear weights have kinks, so rounding-level
     * differences pick other cells (the deformable runs are compared on the GPU). */
    dt_train_cfg one, two;
    dp_cfg(&one, 1, 8);
    strcpy(one.deform, "none");
    one.steps = 9;
    dp_cfg(&two, 2, 4);
    strcpy(two.deform, "none");
    two.steps = 9;
    two.sync_bn = 1;
    dt_train_result a, b, c;
    dt_err err;
    dt_set_quiet(1);
    int rc = dt_train_run(&one, &a, &err);
    EXPECT_MSG(rc == 0, "one replica: %s", err.msg);
    rc |= dt_train_run(&two, &b, &err);
    EXPECT_MSG(rc == 0, "two replicas: %s", err.msg);
    two.sync_bn = 0;
    rc |= dt_train_run(&two, &c, &err);
    if (!rc) {
        EXPECT_EQ_INT(b.steps, 9);
        double d = curve_diff(&a, &b, 3), dp = curve_diff(&a, &c, 3);
        if (dt_test_verbose()) printf("    sync_bn: %.3g relative, per-replica BN: %.3g\n", d, dp);
        EXPECT_MSG(d < 1e-4, "2 replicas (sync_bn) vs 1: loss curves differ by %.3g relative", d);
        EXPECT_MSG(dp > 1e-3, "per-replica BN should differ from global BN, differs by %.3g", dp);
    }
    dt_train_result_free(&a);
    dt_train_result_free(&b);
    dt_train_result_free(&c);
}

DT_TEST(train_dp_is_bitwise_reproducible) {
    const int counts[][2] = {{3, 2}, {8, 1}}; /* replicas, batch per replica */
    for (int k = 0; k < 2; k++) {
        dt_train_cfg c;
        dp_cfg(&c, counts[k][0], counts[k][1]);
        c.steps = 6;
        c.sync_bn = counts[k][1] == 1; /* one image a replica: its own batch statistics are zero variance */
        dt_train_result a, b;
        dt_err err;
        EXPECT_EQ_INT(dt_train_run(&c, &a, &err), 0);
        EXPECT_EQ_INT(dt_train_run(&c, &b, &err), 0);
        EXPECT_EQ_INT(a.steps, 6);
        for (int64_t i = 0; i < a.steps && i < b.steps; i++)
            EXPECT_MSG(a.losses[i] == b.losses[i], "%d replicas, step %lld: %.9g vs %.9g", counts[k][0], (long long)i + 1,
                       a.losses[i], b.losses[i]);
        dt_train_result_free(&a);
        dt_train_result_free(&b);
    }
}

/* A checkpoint written by `writers` replicas of 8 / writers images (sync_bn) at step 2,
 * resumed by 1 x 8, by 4 x 2 (the same global batch) and by the writers' own count, which
 * must continue the uninterrupted run bit for bit (weights, momentum, position). The other
 * counts' first step is one forward from the checkpoint's weights, so it must give the
 * uninterrupted writers' step-3 loss up to float rounding. Their later steps are not compared,
 * nor any run against a one-replica run beyond step 2: an update whose summation order changes
 * can tip a ReLU or a max-pool choice, after which the curves part (label_smoothing=1e-6 alone
 * moves a one-replica run's third loss by 9 % on stb_image's pixels; see
 * train_dp_sync_bn_matches_one_replica). The writers' first two steps are held to the
 * one-replica run (the synchronized statistics). */
/* The plain net on `replicas` x 8 / replicas images (a global batch of 8), synchronized
 * statistics on several, 7 steps: 3 global batches per epoch, so a stop at 2 falls inside
 * epoch 0 (plain: see train_dp_sync_bn_matches_one_replica). */
static void global8_cfg(dt_train_cfg *c, int replicas) {
    dp_cfg(c, replicas, 8 / replicas);
    strcpy(c->deform, "none");
    c->steps = 7;
    c->sync_bn = replicas > 1;
}

static void checkpoint_across_counts(int writers) {
    char ck[400];
    snprintf(ck, sizeof ck, "%s/dp%d.ckpt", dt_test_tmpdir(), writers);
    dt_train_cfg one, own, rest;
    global8_cfg(&one, 1);
    global8_cfg(&own, writers);
    dt_train_result r1, rw, rp, rr;
    dt_err err;
    dt_set_quiet(1);
    int rc = dt_train_run(&one, &r1, &err) || dt_train_run(&own, &rw, &err);
    EXPECT_MSG(rc == 0, "uninterrupted runs: %s", err.msg);
    if (rc) return;
    own.stop_at = 2;
    snprintf(own.checkpoint, sizeof own.checkpoint, "%s", ck);
    rc = dt_train_run(&own, &rp, &err);
    EXPECT_MSG(rc == 0, "%d replicas, stop_at: %s", writers, err.msg);
    if (!rc) {
        EXPECT_EQ_INT(rp.steps, 2);
        for (int64_t i = 0; i < rp.steps; i++) /* the same run up to the stop: bitwise */
            EXPECT_MSG(rp.losses[i] == rw.losses[i], "%d replicas, step %lld: %.9g stopped, %.9g not", writers,
                       (long long)i + 1, rp.losses[i], rw.losses[i]);
        const double d = curve_diff(&r1, &rp, 2);
        EXPECT_MSG(d < 1e-4, "%d replicas (sync_bn) vs 1: loss curves differ by %.3g relative", writers, d);
    }
    const int counts[] = {1, 4, writers}; /* the writers' own count: the whole rest bitwise */
    for (int k = 0; k < 3 && !rc; k++) {
        const int m = counts[k];
        global8_cfg(&rest, m);
        snprintf(rest.resume, sizeof rest.resume, "%s", ck);
        rc = dt_train_run(&rest, &rr, &err);
        EXPECT_MSG(rc == 0, "resume on %d: %s", m, err.msg);
        if (!rc) {
            if (dt_test_verbose() && rr.steps)
                printf("    %d replicas' checkpoint resumed on %d, step 3: %.7g, uninterrupted %.7g\n", writers, m,
                       rr.losses[0], rw.losses[2]);
            EXPECT_EQ_INT(rr.steps, 5);
            for (int64_t i = 0; m == writers && i < rr.steps && i + 2 < rw.steps; i++)
                EXPECT_MSG(rr.losses[i] == rw.losses[i + 2], "%d replicas resumed on %d, step %lld: %.9g vs %.9g",
                           writers, m, (long long)i + 3, rr.losses[i], rw.losses[i + 2]);
            EXPECT_MSG(rr.steps > 0 && fabs(rr.losses[0] - rw.losses[2]) < 1e-4 * fabs(rw.losses[2]),
                       "%d replicas' checkpoint resumed on %d, step 3: %.7g vs %.7g uninterrupted", writers, m,
                       rr.steps ? rr.losses[0] : NAN, rw.losses[2]);
        }
        dt_train_result_free(&rr);
    }
    dt_train_result_free(&r1);
    dt_train_result_free(&rw);
    dt_train_result_free(&rp);
}

DT_TEST(train_dp_checkpoint_resumes_on_another_replica_count) {
    checkpoint_across_counts(2);
    checkpoint_across_counts(8); /* one image a replica: synchronized statistics over eight */
}

DT_TEST(train_dp_divergence_stops_every_replica) {
    dt_train_cfg c;
    dp_cfg(&c, 2, 4);
    c.steps = 30;
    c.lr = 1e6f; /* weights grow a million-fold a step: inf, then NaN */
    c.weight_decay = 1;
    c.momentum = 0;
    dt_train_result r;
    dt_err err;
    int rc = dt_train_run(&c, &r, &err);
    EXPECT_EQ_INT(rc, 1);
    EXPECT_MSG(strstr(err.msg, "diverged") != NULL, "message: %s", err.msg);
    dt_train_result_free(&r);
}

DT_TEST(train_dp_one_replica_failing_ends_the_run) {
    /* A class whose only image does not decode: the replica whose shard meets it fails (the
     * loader's error), the others are released from their collectives and stop too, and the
     * run's error names the first failure. No hang - with 2 replicas and with 8. */
    dt_train_cfg base;
    dp_cfg(&base, 1, 8); /* the dataset first, then the broken class in it */
    char rel[64];
    for (int v = 0; v < 2; v++) {
        snprintf(rel, sizeof rel, "shapes/%s/zz_broken", v ? "val" : "train");
        dt_test_mkdirs(rel);
        snprintf(rel, sizeof rel, "shapes/%s/zz_broken/a.jpg", v ? "val" : "train");
        dt_test_write_file(rel, "not a jpeg at all", 17);
    }
    const int counts[][2] = {{2, 4}, {8, 1}};
    for (int k = 0; k < 2; k++) {
        dt_train_cfg c;
        dp_cfg(&c, counts[k][0], counts[k][1]);
        c.sync_bn = counts[k][1] == 1;
        c.steps = 60;
        c.eval_every = 0;
        dt_train_result r;
        dt_err err;
        dt_set_quiet(1);
        int rc = dt_train_run(&c, &r, &err);
        EXPECT_EQ_INT(rc, 1);
        EXPECT_MSG(strstr(err.msg, "zz_broken") && strstr(err.msg, "replica"), "%d replicas: message: %s", counts[k][0],
                   err.msg);
        dt_train_result_free(&r);
    }
}

DT_TEST(train_dp_bad_gpus_values_are_clear_errors) {
    const char *bad[][2] = {{"0", "a count 1.."},   {"-1", "a count 1.."}, {"0,0", "listed twice"},
                            {"1,x", "a list of GPU ids"}, {"two", "a count 1.."}, {"0,99", "a list of GPU ids"}};
    for (int i = 0; i < 6; i++) {
        dt_train_cfg c;
        dp_cfg(&c, 1, 8);
        dt_err err;
        EXPECT_EQ_INT(dt_config_set(&c, "gpus=1", &err), 0);
        char kv[64];
        snprintf(kv, sizeof kv, "gpus=%s", bad[i][0]);
        dt_config_set(&c, kv, &err);
        int rc = dt_config_check(&c, &err);
        EXPECT_MSG(rc != 0 && strstr(err.msg, bad[i][1]), "gpus=%s: %s", bad[i][0], rc ? err.msg : "accepted");
    }
    /* on a machine without two GPUs (or without NCCL), asking for them is a clear error */
    if (dt_gpu_count() < 2) {
        dt_train_cfg c;
        dp_cfg(&c, 2, 4);
        strcpy(c.device, "cuda");
        dt_train_result r;
        dt_err err;
        int rc = dt_train_run(&c, &r, &err);
        EXPECT_EQ_INT(rc, 2);
        EXPECT_MSG(strstr(err.msg, "GPU") || strstr(err.msg, "NCCL") || strstr(err.msg, "CUDA"), "message: %s", err.msg);
        dt_train_result_free(&r);
    }
}

DT_TEST(train_dp_several_processes_need_a_rendezvous) {
    /* DT_DIST_* name a multi-process run: without a rendezvous, or on the CPU (one process
     * only), a clear error before anything trains. */
    dt_train_cfg c;
    dp_cfg(&c, 1, 8);
    dt_train_result r;
    dt_err err;
    setenv("DT_DIST_WORLD", "2", 1);
    setenv("DT_DIST_RANK", "0", 1);
    unsetenv("DT_DIST_FILE");
    unsetenv("NCCL_COMM_ID");
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 2);
    EXPECT_MSG(strstr(err.msg, "DT_DIST_FILE") && strstr(err.msg, "NCCL_COMM_ID"), "message: %s", err.msg);
    dt_train_result_free(&r);
    setenv("DT_DIST_RANK", "5", 1);
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 2);
    EXPECT_MSG(strstr(err.msg, "DT_DIST_RANK=5"), "message: %s", err.msg);
    dt_train_result_free(&r);
    setenv("DT_DIST_RANK", "1", 1);
    setenv("DT_DIST_FILE", dt_test_path("rdv"), 1);
    int rc = dt_train_run(&c, &r, &err);
    EXPECT_MSG(rc != 0 && strstr(err.msg, "one process"), "CPU over processes: rc %d, %s", rc, err.msg);
    dt_train_result_free(&r);
    unsetenv("DT_DIST_WORLD");
    unsetenv("DT_DIST_RANK");
    unsetenv("DT_DIST_FILE");
}

/* ---- on GPUs (NCCL): needs two ---- */

static int two_gpus(void) {
    if (dt_gpu_count() >= 2 && dt_dist_available(DT_GPU)) return 1;
    printf("    skipped: needs 2 GPUs and NCCL (%d GPU, %s)\n", dt_gpu_count(), dt_dist_backend(DT_GPU));
    return 0;
}

DT_GPU_TEST(gpu_dp_two_gpus_match_one_and_reproduce) {
    if (!two_gpus()) return;
    dt_train_cfg one, two;
    dp_cfg(&one, 1, 8);
    strcpy(one.device, "cuda");
    strcpy(one.deform, "none");
    one.steps = 12;
    one.deterministic = 1;
    two = one;
    strcpy(two.gpus, "2");
    two.batch = 4;
    two.sync_bn = 1;
    dt_train_result a, b, b2;
    dt_err err;
    int rc = dt_train_run(&one, &a, &err);
    EXPECT_MSG(rc == 0, "1 GPU: %s", err.msg);
    rc |= dt_train_run(&two, &b, &err);
    EXPECT_MSG(rc == 0, "2 GPUs: %s", err.msg);
    rc |= dt_train_run(&two, &b2, &err);
    if (!rc) {
        double d = curve_diff(&a, &b, 4);
        printf("    2 GPUs (sync_bn) vs 1: largest relative loss difference %.3g over the first 4 steps\n", d);
        EXPECT_MSG(d < 1e-4, "2 GPUs vs 1: %.3g", d);
        for (int64_t i = 0; i < b.steps; i++) EXPECT_MSG(b.losses[i] == b2.losses[i], "run to run, step %lld", (long long)i + 1);
    }
    dt_train_result_free(&a);
    dt_train_result_free(&b);
    dt_train_result_free(&b2);
}

/* The step captured as one CUDA graph on each of two GPUs (the gradient all-reduce and sync_bn's
 * statistics inside the graph, NCCL captured): bit for bit the losses of the eager run, with
 * every step after the 3 eager ones replayed. */
DT_GPU_TEST(gpu_dp_graph_matches_eager_bitwise_on_two_gpus) {
    if (!two_gpus()) return;
    dt_train_cfg eager, graph;
    dp_cfg(&eager, 2, 4);
    strcpy(eager.device, "cuda");
    strcpy(eager.deform_mode, "deft");
    strcpy(eager.precision, "bf16");
    eager.steps = 12;
    eager.deterministic = 1;
    eager.sync_bn = 1;
    eager.eval_every = 0;
    eager.graphs = 0;
    graph = eager;
    graph.graphs = 1;
    dt_train_result a, b;
    dt_err err;
    int rc = dt_train_run(&eager, &a, &err);
    EXPECT_MSG(rc == 0, "eager: %s", err.msg);
    rc |= dt_train_run(&graph, &b, &err);
    EXPECT_MSG(rc == 0, "graphs=1: %s", err.msg);
    if (!rc) {
        EXPECT_EQ_INT(b.graph_captures, 1);
        EXPECT_EQ_INT(b.graph_steps, 12 - 3);
        EXPECT_EQ_INT(a.steps, b.steps);
        for (int64_t i = 0; i < a.steps && i < b.steps; i++)
            EXPECT_MSG(memcmp(&a.losses[i], &b.losses[i], sizeof(float)) == 0, "step %lld: eager %.7g, graph %.7g",
                       (long long)i + 1, a.losses[i], b.losses[i]);
    }
    dt_train_result_free(&a);
    dt_train_result_free(&b);
}
