/* train_run.h: the state of a training run and of its replicas (the trainer's internal
 * header; dt_trainer.h is the public one).
 *
 * A run (trainer.c) checks the configuration, opens the outputs and the datasets, reads the
 * checkpoint to resume from, and starts one replica per device: a host thread that runs
 * replica_main (replica.c), the training loop in named stages:
 *
 *   replica_setup        device, loaders (its shard), model, optimizer, gradient buckets
 *   replica_enqueue_step a batch to the device, forward, loss, backward (with the gradient
 *                        all-reduce overlapped), optimizer: queued, not waited for
 *   replica_finish_step  waits for the previous step, reads its loss and times, logs it
 *   replica_end_epoch    evaluation (sharded, metrics reduced), epoch log, checkpoint
 *
 * A stop request (SIGINT, SIGTERM: dt_train_interrupt) is polled once per step and averaged
 * across the replicas with the step, so that all of them see it after the same step; they
 * finish the step in flight, replica 0 writes the checkpoint, and the run returns 128 + the
 * signal. checkpoint_every / checkpoint_minutes write mid-epoch checkpoints (replica 0, with
 * its pipeline drained, so that the weights are those of the position written).
 *
 * With one replica nothing is shared and nothing is communicated: the single-GPU run is the
 * same program as before data parallelism existed. */
#ifndef DT_TRAIN_RUN_H
#define DT_TRAIN_RUN_H

#include <pthread.h>
#include <stdint.h>

#include "ops/batchnorm/batchnorm.h" /* dt_bn_sync: the replicas' sync BN */
#include "train/ckpt_writer.h"
#include "train/dt_checkpoint.h"
#include "train/dt_config.h"
#include "data/dt_dataset.h"
#include "core/dt_dist.h"
#include "train/dt_grad_sync.h"
#include "data/dt_loader.h"
#include "train/dt_optim.h"
#include "models/dt_resnet.h"
#include "core/dt_safetensors.h"
#include "train/dt_schedule.h"
#include "train/dt_trainer.h"
#include "train/run_lock.h"
#include "train/train_output.h"
#include "core/dt_timer.h"

/* Shared by the replicas; written before they start, except where noted. */
typedef struct {
    const dt_train_cfg *c;
    dt_dev dev;
    int world;                /* replicas in the run (all processes) */
    int local, first_rank;    /* this process's replicas: global ranks first_rank .. + local - 1 */
    int gpus[DT_MAX_GPUS];    /* [local] their devices (GPU runs) */
    dt_dist_group *group;     /* NULL with one replica */
    dt_dataset train_ds, val_ds;
    int have_data;            /* datasets opened: 0, 1 (train), 2 (both) */
    int classes;
    int64_t steps_per_epoch, total_steps, stop;
    dt_ckpt_pos pos;          /* where training starts (resume) */
    dt_checkpoint ck;         /* the checkpoint resumed from (have_ck) */
    int have_ck;
    dt_ckpt_resume resume;    /* what dt_checkpoint_plan_resume made of it */
    dt_safetensors init;      /* init_from's state_dict, read once for all replicas (have_init) */
    int have_init;
    char ckpt_path[1024];     /* where checkpoints go: checkpoint=, or derived (trainer.c) */
    dt_ckpt_writer *ckpt_writer; /* writes them in the background (replica 0's process) */
    train_lock log_lock, ckpt_lock, export_lock;
    train_output out;         /* replica 0 writes (the process holding it) */
    dt_train_result *res;     /* replica 0 fills */
    int interrupted;          /* set by the first local replica: the run stopped on a stop request */
    int plan_logged;          /* the convs' plan is in the log (after the first step) */
    pthread_mutex_t init_mu;  /* model construction draws from process-wide RNGs: one at a time */
} train_run;

/* The signal dt_train_interrupt recorded (0: none): replicas poll it once per step; the run
 * clears it when it ends (train_interrupt.c). */
int train_interrupt_pending(void);
void train_interrupt_clear(void);

/* Per-step device timing: events at start, after forward, after backward, after the update
 * (the run's device's: CUDA events on the GPU, host clocks on the CPU). */
typedef struct {
    dt_event ev[4];
    float *loss_host; /* pinned, 2 floats: the loss averaged over the replicas, and the stop request
                       * (> 0: some replica's process was interrupted before this step) */
    int gpu;
} step_marks;

/* One enqueued step, not yet read back. */
typedef struct {
    int active;
    int64_t step, epoch;
    float lr;
    int n;            /* images of this replica's batch */
    dt_batch batch;
    int has_batch;
    double wait_ms;
    int graphed;      /* replayed from the step's CUDA graph: no phase events inside */
    step_marks m;
} step_pending;

typedef struct {
    train_run *run;
    int rank;                 /* global rank; 0 writes the outputs */
    dt_dist *dist;            /* NULL with one replica */
    dt_resnet model;
    int have_model;
    dt_sgd opt;
    dt_schedule sched;
    dt_loader *train_ld, *val_ld;
    dt_tensor *syn_x, *syn_y; /* synthetic mode: this replica's part of the global batch */
    dt_tensor *in_u8, *in_y;  /* loader mode: the step's input at fixed addresses, u8 [batch, S, S, 3]
                               * NHWC (the loader's layout) and i32 labels [batch] */
    /* graphs=1 (GPU): the step captured as one CUDA graph after GRAPH_WARMUP eager steps */
    struct dt_graph *graph;   /* NULL: none captured (yet, or dropped for a re-capture) */
    const float *graph_loss;  /* [1] f32: where the replayed step leaves its loss */
    uint64_t graph_key;       /* dt_resnet_launch_key when it was captured */
    int64_t eager_run;        /* eager steps in a row: a capture waits for GRAPH_WARMUP of them */
    int graphs_off;           /* a capture failed: the run goes on eagerly */
    int64_t captures;
    double capture_ms;        /* the last capture's host time */
    dt_grad_sync gs;          /* with several replicas */
    dt_bn_sync bn_sync;       /* sync_bn=1 */
    dt_tensor *stop_flag;     /* with several replicas: the stop request, averaged every step */
    int stop_sent;            /* this replica has raised it */
    int stopping;             /* a step's stop request was seen: every replica stops after the same step */
    step_pending pq[2];
    int cur, have_marks;
    int64_t step;             /* global optimizer steps done */
    double last_ckpt_ms;      /* when the last checkpoint was written (checkpoint_minutes) */
    double epoch_ckpt_ms;     /* this epoch's checkpoint time on the training thread (the snapshot, a wait) */
    /* statistics (every replica keeps them; replica 0's are reported), grown as steps finish */
    int64_t cap, ntimed;
    double *t_step, *t_fwd, *t_bwd, *t_opt, *t_wait; /* [cap] */
    double epoch_loss;
    int64_t epoch_steps;
    double run_t0, epoch_t0;  /* host ms */
    dt_err err;               /* the first failure of this replica */
} replica;

/* Eager steps before the step is captured: the first steps allocate what lives across steps
 * (gradients, momentum buffers and the optimizer's tables, the working copies' table, the
 * libraries' workspaces) and change the optimizer's tables twice (its first-step flags set, then
 * cleared); from the third on a step is the same work at the same addresses every time. */
#define GRAPH_WARMUP 3

/* Where a run's checkpoints go: checkpoint=, else PREFIX.ckpt of log=PREFIX, else
 * train-PID.ckpt in the working folder (trainer.c). */
void train_checkpoint_path(const dt_train_cfg *c, char *out, size_t cap);

/* dt_weights_export_checkpoint without its lock on the export (a run that holds it). */
int train_export_checkpoint(const char *ckpt_path, const char *out_path, dt_err *err);

/* The model the configuration describes (its deformable layers' knobs included; train_model.c). */
void train_model_cfg(const dt_train_cfg *c, int classes, dt_resnet_cfg *mc);

/* The stages (replica.c). Each returns 0, or 1 with r->err set. */
int replica_setup(replica *r);
int replica_enqueue_step(replica *r, step_pending *p, int64_t epoch, int *epoch_over);
int replica_finish_step(replica *r, step_pending *p, step_pending *next);
int replica_end_epoch(replica *r, int64_t epoch, int epoch_done, int64_t batches_done);
void replica_teardown(replica *r);
/* The whole loop: setup, the epochs, the summary (replica 0). */
int replica_main(replica *r);

#endif
