/* path_check.h: no output of a run is one of its inputs, or another of its outputs (the
 * trainer's internal header).
 *
 * Two paths name the same file when they are the same file now - the same device and inode,
 * through any symlink or hard link - or, for a file not made yet, when both resolve to the
 * same place: a dangling symlink is followed, the longest folder of the path that exists is
 * resolved (realpath) and the rest appended with its "." and ".." taken lexically, as the
 * folders will be made. A run checks all of its paths before it locks, opens or writes
 * anything (dt_train_run, build/train --export), and a clash is refused with a message that
 * names both paths, their keys and what would be destroyed. */
#ifndef DT_PATH_CHECK_H
#define DT_PATH_CHECK_H

#include "core/dt_common.h"
#include "train/dt_config.h"

typedef struct {
    const char *path; /* as given (empty: not used) */
    const char *key;  /* how the user named it: "export=runs/x.safetensors", "log=runs/x" */
    const char *role; /* what it is, for messages: "the export", "the checkpoint this run resumes from" */
    int output;       /* 1: written by the run, 0: read */
    int group;        /* > 0: the paths of one group may be one file (the checkpoint written and the one resumed) */
} dt_run_path;

/* Refuses an output that is the same file as any other path of the list (inputs and outputs
 * alike), unless both are of one group. 0, or -1 with err set. */
int dt_paths_check(const dt_run_path *p, int n, dt_err *err);

/* Whether a and b name the same file (above). */
int dt_paths_same(const char *a, const char *b);

/* Every path a training run with config c reads or writes, checked with dt_paths_check: the log
 * files of log= (PREFIX.log, _steps.csv, _epochs.csv, _summary.txt, .lock), the checkpoint
 * (ckpt_path: checkpoint= or the one derived from log=), export=, against resume=, init_from=,
 * the config file (config_path; NULL: not known) and the dataset's train/ and val/ folders (an
 * output inside them would be read as an image, or replace one). 0, or -1 with err set. */
int dt_run_paths_check(const dt_train_cfg *c, const char *ckpt_path, const char *config_path, dt_err *err);

#endif
