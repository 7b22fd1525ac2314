/* dt_param.h: parameters and the list a model keeps of them.
 *
 * A parameter is an fp32 master tensor, caller-owned, with requires_grad = 1 and a gradient
 * buffer that lives as long as it does (zero_grad only marks the gradients stale: the next
 * backward overwrites instead of adding, nothing touches memory), plus a record of what the
 * optimizer and the autograd engine need to know about it - kept here, not in the tensor.
 *
 * bf16 working copies (the bf16 precision policy): a model that computes in bf16 asks for a
 * working copy of each weight its products read (dt_param_make_work). The copy is a bf16
 * tensor of the master's shape and layout; dt_params_refresh_work rounds every master into its
 * copy in one launch, once per step, and the ops take the copy as their operand. The copy's
 * gradient is the master's: a backward writes it in fp32 into the master's gradient
 * (dt_grad_dst), so nothing is accumulated in bf16. */
#ifndef DT_PARAM_H
#define DT_PARAM_H

#include "core/dt_api.h"

#include "core/dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct dt_param {
    dt_tensor *t;      /* the fp32 master (t->param points back here) */
    dt_tensor *work;   /* its bf16 working copy, or NULL (work->param points here too) */
    float lr_mult;     /* this parameter's learning rate is lr * lr_mult (1 unless set) */
    int no_decay;      /* exempt from weight decay (BN, biases) when the optimizer is asked */
    int pending_uses;  /* during a backward with a grad-ready hook: nodes still to read it */
} dt_param;

typedef struct {
    dt_param **items;
    int n, cap;
    /* the table of (master, copy) chunks dt_params_refresh_work casts over, on work_dev (the
     * parameters' device; dt_cast_chunk entries); rebuilt when a copy is added */
    void *work_table;
    dt_dev work_dev;
    int work_chunks, work_valid;
} dt_params;

/* Makes an f32 parameter (zero-filled) in `layout` (DT_NHWC: a 4-D weight stored
 * [Cout, kh, kw, Cin]), appends it to `ps` (if not NULL) and returns the master. decay = 0
 * exempts it from weight decay when the optimizer is asked to. */
dt_tensor *dt_param_new(dt_params *ps, const char *name, int ndim, const int64_t *shape, dt_dev dev, dt_layout layout,
                        int decay);
/* The record of a parameter (its master or its working copy); fatal when t is no parameter. */
dt_param *dt_param_of(const dt_tensor *t);
/* Gives the parameter a bf16 working copy (idempotent) and returns it; refreshed by
 * dt_params_refresh_work. */
dt_tensor *dt_param_make_work(dt_params *ps, dt_tensor *master);
/* The working copy made by dt_param_make_work; fatal, naming the parameter, when there is none. */
dt_tensor *dt_param_work(const dt_tensor *master);
/* Rounds every master that has a working copy into it: one launch on the GPU. A model in the
 * bf16 policy calls it at the start of each forward. */
void dt_params_refresh_work(dt_params *ps);

void dt_params_zero_grad(dt_params *ps);
int64_t dt_params_numel(const dt_params *ps);
dt_param *dt_params_find(const dt_params *ps, const char *name);
void dt_params_free(dt_params *ps); /* frees the parameters too */

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
