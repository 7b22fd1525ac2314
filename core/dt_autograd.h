/* dt_autograd.h: reverse-mode automatic differentiation with a tape.
 *
 * Each differentiable op computes its output, then calls dt_record(): if gradients are on and
 * any input wants one, a node (backward function, inputs, output, op parameters, saved
 * buffers) is appended to the tape. dt_backward(loss) walks the tape from the end: a node
 * whose output received a gradient runs its backward, which adds into its inputs' gradients.
 *
 * Gradient accumulation without memsets: dt_grad_dst(t, &beta) returns where to write t's
 * gradient and beta = 0 when this is the first contribution (overwrite) or 1 when one is
 * already there (add). Every backward kernel takes that beta, so a tensor used twice
 * (residual connections) gets both contributions and nothing is zero-filled first.
 *
 * Memory: once a node's backward has run, nothing earlier on the tape can need its output or
 * the output's gradient (they were made after every earlier node), so the engine releases
 * both at once, together with the buffers the node saved. Peak memory is therefore the
 * forward's activations, not activations plus all gradients. A tensor with retain = 1 keeps
 * its data. dt_backward consumes the nodes it reaches; nodes of other graphs stay recorded
 * (like PyTorch, where each output owns its graph). dt_tape_reset() drops everything, and
 * the end of the outermost scope does so too.
 *
 * The tape, the scopes (dt_tensor.h) and the gradient mode belong to the calling host thread:
 * data-parallel replicas, one thread each, record and run their own.
 */
#ifndef DT_AUTOGRAD_H
#define DT_AUTOGRAD_H

#include "core/dt_api.h"

#include <stddef.h>

#include "core/dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

#define DT_NODE_MAX_IN 8
#define DT_NODE_MAX_SAVED 4

typedef struct dt_node dt_node;
typedef void (*dt_backward_fn)(dt_node *n);

struct dt_node {
    const char *op;                     /* name, for error messages and profiles */
    dt_backward_fn backward;
    dt_tensor *out;                     /* out->grad holds the incoming gradient */
    dt_tensor *in[DT_NODE_MAX_IN];      /* NULL entries allowed (optional inputs) */
    int n_in;
    dt_tensor *saved[DT_NODE_MAX_SAVED]; /* extra buffers the node owns; released after backward */
    int n_saved;
    void *ctx;                          /* op parameters, lives on the tape's arena */
    int input_freed;                    /* an input was freed while the node was on the tape */
    int done;                           /* left the tape in a backward (a raise's undo skips it) */
};

/* Gradient mode (on by default). dt_no_grad_begin/end nest. */
int dt_grad_enabled(void);
void dt_set_grad_enabled(int on);

/* Called during dt_backward for each parameter as soon as its gradient is final (no node
 * still to run reads the parameter), in the order the tape reaches them; the data-parallel
 * trainer starts the all-reduce of a gradient bucket from it, while the backward goes on.
 * Per host thread; NULL (the default) turns it off. */
typedef void (*dt_grad_ready_fn)(void *ctx, dt_tensor *param); /* param: the fp32 master */
void dt_set_grad_ready_hook(dt_grad_ready_fn fn, void *ctx);

/* 1 when recording this op would be useful: gradients on and some input requires one. */
int dt_any_requires_grad(int n, dt_tensor *const *in);

/* Appends a node for `out` if dt_any_requires_grad(n_in, in); returns it (or NULL when no
 * node is needed). ctx_bytes of zeroed parameter space are reserved in node->ctx. */
dt_node *dt_record(const char *op, dt_backward_fn backward, dt_tensor *out, int n_in,
                   dt_tensor *const *in, size_t ctx_bytes);
void dt_node_save(dt_node *n, dt_tensor *t);

/* Backward from a scalar (seeded with 1) or from `out` with an explicit upstream gradient. */
void dt_backward(dt_tensor *loss);
void dt_backward_with(dt_tensor *out, const dt_tensor *grad_out);

/* Where to write t's gradient (allocated on first use, with t's dtype and layout); see the
 * header comment for beta. Returns NULL when t does not require a gradient. The gradient of a
 * parameter's bf16 working copy is its fp32 master's (dt_param.h): dt_grad_dtype says which
 * dtype the returned buffer holds. */
void *dt_grad_dst(dt_tensor *t, float *beta);
dt_dtype dt_grad_dtype(const dt_tensor *t);

void dt_tape_reset(void);
/* Resets the tape and frees the calling thread's tape memory: a replica's thread calls it
 * before it ends. */
void dt_tape_release_thread(void);
int dt_tape_size(void);

/* Makes t a leaf that wants a gradient (test inputs, parameters). */
void dt_requires_grad(dt_tensor *t);

/* Called by dt_tensor.c when t is freed while nodes on the tape refer to it (t->node,
 * t->tape_uses or t->tape_saved set; e.g. dt_tensor_free of an unscoped result, or an inner scope
 * ending before the backward): the node that made t leaves the tape - no backward can reach it
 * any more -, a node that reads t is marked, so that a backward reaching it stops with a message
 * naming the op instead of reading freed memory, and a node that saved t forgets it. */
void dt_tape_forget_tensor(dt_tensor *t);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
