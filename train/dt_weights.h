/* dt_weights.h: a model's weights to and from safetensors files (core/dt_safetensors.h) under
 * torchvision's state_dict names, so that deftc fine-tunes torchvision's checkpoints and
 * PyTorch loads what deftc trained (docs/weights.md).
 *
 * Names are the model's own (models/dt_resnet.h names every parameter and buffer by its
 * torchvision key: conv1.weight, bn1.running_mean, layer2.0.downsample.0.weight, fc.bias, ...);
 * a deformable 3x3 conv keeps the plain conv's `.weight` and adds its offset conv as
 * `.offset.weight` [(2|3) x G x 9, Cin, 3, 3] and `.offset.bias`, whose output channels are
 * torchvision's deform_conv2d's: offset channel 2(g*9 + k) is dy and 2(g*9 + k) + 1 dx of
 * kernel tap k (row-major over the 3x3 window) of offset group g; for DCNv2 the next G*9
 * channels are the mask's logits (a sigmoid makes the mask), channel 2*G*9 + g*9 + k.
 * In files, every tensor is in logical order (a conv weight [Cout, Cin, kh, kw], PyTorch's
 * contiguous order) whatever the model's layout; the model's own order (an NHWC model stores
 * [Cout, kh, kw, Cin]) is made on the way in and undone on the way out. */
#ifndef DT_WEIGHTS_H
#define DT_WEIGHTS_H

#include "core/dt_api.h"

#include <stdint.h>

#include "core/dt_common.h"
#include "core/dt_param.h"
#include "models/dt_resnet.h"
#include "core/dt_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* What a load did. */
typedef struct {
    int loaded;      /* tensors copied into the model */
    int offset_zero; /* deformable layers whose offset conv the file lacks: set to zero */
    int fc_kept;     /* partial load: fc tensors of another shape (or absent) left at their init */
    char fc[16];     /* the classifier they belong to: "fc" (the ResNets) or "classifier.1" (mobilenet_v2) */
    int ignored;     /* num_batches_tracked entries (PyTorch's BN step counters: not used) */
} dt_weights_report;

/* Loads a state_dict into a model's parameters ps and buffers[n_buffers] by name (`path`
 * names the file in messages). Every name of the model must be in the file - except a
 * deformable layer's offset conv (`*.offset.weight`, `*.offset.bias`), which is then set to
 * zero, so that a plain network's weights make a deformable network that starts out sampling
 * the plain grid - and every name of the file must be the model's, except
 * `*.num_batches_tracked` of a batch norm the model has (ignored). Each tensor: a float dtype
 * (F32, BF16, F16, F64: converted to the fp32 master), the model's logical shape, every value
 * finite, a running variance not negative. partial = 1 (init_from_partial): fc.weight and
 * fc.bias of another shape, or absent, are left as they are (fine-tuning to another class
 * count). Nothing is copied until all of it is checked: 0 with *rep set, or -1 with err naming
 * the tensor(s) and the model untouched. */
int dt_weights_load_state(const dt_safetensors *st, dt_params *ps, dt_tensor *const *buffers, int n_buffers, int partial,
                          const char *path, dt_weights_report *rep, dt_err *err);

/* The log line of a load: "122 tensors from X.safetensors; 32 offset convs start at zero
 * offsets" and, for DCNv2 (deform_version 2), what zero mask logits mean (each deformable
 * layer's output is halved: mask 0.5), and a partial load's fc. */
void dt_weights_describe(const dt_weights_report *rep, const char *path, int deform_version, char *buf, size_t cap);

/* Writes items[n] and meta[n_meta] as a safetensors file, by rename (the temporary file in the
 * target's folder, fsync'ed: a failure leaves the previous file as it was; train/atomic_file.h).
 * 0, or -1 with err set. */
int dt_weights_save_tensors(const char *path, const dt_st_item *items, int n, const dt_st_meta *meta, int n_meta,
                            dt_err *err);

/* Writes the model's weights to `path` under torchvision's names: every parameter and batch-norm
 * running statistic as F32 in logical order, and each batch norm's num_batches_tracked as an
 * I64 scalar holding `steps` (the training steps done: what PyTorch counts); __metadata__:
 * format "pt", deftc_model, width, deform (the stages: none, all, 2,3,4), deform_version,
 * offset_groups, classes, steps. A plain model at width 1 loads strictly into torchvision's
 * model (load_state_dict); a deformable one into python/deftc_models.py's. 0, or -1. */
int dt_weights_export(const dt_resnet *m, int64_t steps, const char *path, dt_err *err);

/* Before a run that will export to `path`: creates the folders leading to it and refuses a
 * path that a rename must not replace (a folder, a device, a FIFO: train/atomic_file.h), so
 * that a bad path fails at start-up rather than after training. 0, or -1 with err set. */
int dt_weights_export_prepare(const char *path, dt_err *err);

/* Exports a training checkpoint without training (build/train --export CKPT OUT): refused when
 * OUT is CKPT (the same file by path, symlink or hard link); OUT locked as a run's outputs are
 * (OUT.lock). Before anything is allocated, the model its stored config names (its class
 * count from fc.bias) is checked: at most 16 GB of weights, and the checkpoint's tensor table
 * holding exactly that model's tensors (names, shapes; momentum besides); the position goes
 * through a resume's checks (dt_checkpoint_plan_resume). Then the model is built on the CPU,
 * the checkpoint's state loaded into it (dt_checkpoint_load_state: every check of a resume)
 * and written by dt_weights_export with the checkpoint's step count. 0, or -1. */
int dt_weights_export_checkpoint(const char *ckpt_path, const char *out_path, dt_err *err);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
