#include "core/dt_autograd.h"

#include <stdlib.h>
#include <string.h>

#include "core/dt_common.h"
#include "core/dt_graph.h"
#include "core/dt_param.h"

/* The tape: nodes and their ctx blocks are carved from a chunked arena that is rewound, not
 * freed, when the tape is reset, so recording costs no malloc in a steady-state step. */
typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
} arena_chunk;

/* Per host thread: each data-parallel replica (train/replica.c) records and runs its own tape. */
static __thread arena_chunk *g_chunks, *g_cur;
static __thread dt_node **g_tape;
static __thread int g_n, g_cap;
static __thread int g_grad_on = 1;
static __thread dt_grad_ready_fn g_ready_fn;
static __thread void *g_ready_ctx;
static __thread int g_in_backward; /* run_tape is running: a raise drops the whole tape */

static void *arena_alloc(size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    while (g_cur && g_cur->used + bytes > g_cur->cap) g_cur = g_cur->next;
    if (!g_cur) {
        size_t cap = bytes > (1 << 20) ? bytes : (1 << 20);
        arena_chunk *c = dt_xmalloc(sizeof *c + cap);
        c->used = 0;
        c->cap = cap;
        c->next = NULL;
        if (!g_chunks) g_chunks = c;
        else {
            arena_chunk *last = g_chunks;
            while (last->next) last = last->next;
            last->next = c;
        }
        g_cur = c;
    }
    void *p = g_cur->mem + g_cur->used;
    g_cur->used += bytes;
    memset(p, 0, bytes);
    return p;
}

int dt_grad_enabled(void) { return g_grad_on; }
void dt_set_grad_ready_hook(dt_grad_ready_fn fn, void *ctx) {
    g_ready_fn = fn;
    g_ready_ctx = ctx;
}
void dt_set_grad_enabled(int on) { g_grad_on = on; }

void dt_requires_grad(dt_tensor *t) { t->requires_grad = 1; }


int dt_any_requires_grad(int n, dt_tensor *const *in) {
    if (!g_grad_on) return 0;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) return 1;
    return 0;
}

dt_node *dt_record(const char *op, dt_backward_fn backward, dt_tensor *out, int n_in,
                   dt_tensor *const *in, size_t ctx_bytes) {
    dt_graph_note_op(op, 0); /* a graph capture names the op a failure happened in */
    if (!dt_any_requires_grad(n_in, in)) return NULL;
    if (n_in > DT_NODE_MAX_IN) dt_fatal("dt_record(%s): %d inputs (at most %d)", op, n_in, DT_NODE_MAX_IN);
    /* Everything that can raise first (the tape's room, the node, its ctx), then the links: a
     * raise leaves the tape and the tensors as they were. */
    if (g_n == g_cap) {
        int cap = g_cap ? g_cap * 2 : 1024;
        g_tape = dt_xrealloc(g_tape, cap * sizeof *g_tape);
        g_cap = cap;
    }
    dt_node *n = arena_alloc(sizeof *n);
    void *ctx = ctx_bytes ? arena_alloc(ctx_bytes) : NULL;
    n->op = op;
    n->backward = backward;
    n->out = out;
    n->n_in = n_in;
    n->input_freed = 0;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = in[i];
        if (in[i]) in[i]->tape_uses++;
    }
    n->ctx = ctx;
    out->requires_grad = 1;
    out->node = n;
    g_tape[g_n++] = n;
    return n;
}

void dt_node_save(dt_node *n, dt_tensor *t) {
    if (n->n_saved == DT_NODE_MAX_SAVED) dt_fatal("dt_node_save(%s): too many saved buffers", n->op);
    n->saved[n->n_saved++] = t;
    if (t) t->tape_saved++;
}

dt_dtype dt_grad_dtype(const dt_tensor *t) { return t->param ? t->param->t->dtype : t->dtype; }

void *dt_grad_dst(dt_tensor *t, float *beta) {
    if (!t || !t->requires_grad) return NULL;
    if (t->param) t = t->param->t; /* a working copy's gradient is its master's */
    if (!t->grad) {
        t->grad = dt_tensor_new_unscoped(t->ndim, t->shape, t->dev, t->dtype, t->layout);
        t->grad_valid = 1;
        *beta = 0.0f;
        return t->grad->data;
    }
    *beta = t->grad_valid ? 1.0f : 0.0f;
    t->grad_valid = 1;
    return t->grad->data;
}

/* Node n leaves the tape: its inputs are no longer read by it. */
static void unlink_inputs(dt_node *n) {
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j]) n->in[j]->tape_uses--;
}

static void release_node(dt_node *n) {
    if (n->out && !n->out->retain && !n->out->param) dt_tensor_release(n->out);
    for (int i = 0; i < n->n_saved; i++) {
        dt_tensor *s = n->saved[i];
        if (!s) continue;
        s->tape_saved--;
        n->saved[i] = NULL;
        if (s->scoped) dt_tensor_release(s); else dt_tensor_free(s);
    }
}

/* A node leaves the tape without its backward: its unscoped saved buffers are freed. */
static void drop_node(dt_node *n) {
    for (int j = 0; j < n->n_saved; j++)
        if (n->saved[j] && !n->saved[j]->scoped) {
            dt_tensor *s = n->saved[j];
            s->tape_saved--;
            n->saved[j] = NULL;
            dt_tensor_free(s);
        }
    if (n->out && n->out->node == n) n->out->node = NULL;
    unlink_inputs(n);
    n->done = 1;
}

void dt_tape_reset(void) {
    for (int i = 0; i < g_n; i++)
        if (g_tape[i] && !g_tape[i]->done) drop_node(g_tape[i]);
    g_n = 0;
    g_in_backward = 0;
    g_cur = g_chunks;
    for (arena_chunk *c = g_chunks; c; c = c->next) c->used = 0;
}

int dt_tape_size(void) { return g_n; }

void dt_tape_release_thread(void) {
    dt_tape_reset();
    free(g_tape);
    g_tape = NULL;
    g_cap = 0;
    while (g_chunks) {
        arena_chunk *next = g_chunks->next;
        free(g_chunks);
        g_chunks = next;
    }
    g_cur = NULL;
    g_ready_fn = NULL;
    g_ready_ctx = NULL;
}

/* Runs the nodes the gradient reaches, newest first. A node it does not reach belongs to
 * another graph (or a branch that does not lead to this output): it stays on the tape, with
 * its tensors intact, for a later backward. */
static void count_param_uses(void) {
    for (int i = 0; i < g_n; i++)
        for (int j = 0; j < g_tape[i]->n_in; j++)
            if (g_tape[i]->in[j] && g_tape[i]->in[j]->param) g_tape[i]->in[j]->param->pending_uses = 0;
    for (int i = 0; i < g_n; i++)
        for (int j = 0; j < g_tape[i]->n_in; j++)
            if (g_tape[i]->in[j] && g_tape[i]->in[j]->param) g_tape[i]->in[j]->param->pending_uses++;
}

/* After node n is done (run or passed over): a parameter none of the remaining nodes reads has
 * its final gradient; the hook hears of it (the data-parallel trainer starts its all-reduce). */
static void params_done(dt_node *n) {
    for (int j = 0; j < n->n_in; j++) {
        dt_param *r = n->in[j] ? n->in[j]->param : NULL; /* the master or its working copy */
        if (r && --r->pending_uses == 0 && r->t->grad && r->t->grad_valid) g_ready_fn(g_ready_ctx, r->t);
    }
}

static void run_tape(void) {
    int kept = 0;
    g_in_backward = 1;
    if (g_ready_fn) count_param_uses();
    for (int i = g_n - 1; i >= 0; i--) {
        dt_node *n = g_tape[i];
        if (!n->out) { /* its output was freed (dt_tape_forget_tensor): it leaves the tape */
            if (g_ready_fn) params_done(n);
            unlink_inputs(n);
            n->done = 1;
        } else if (n->out->grad && n->out->grad_valid) {
            if (n->input_freed)
                dt_fatal("backward: %s reads an input that was freed before the backward (free tensors after "
                         "dt_backward, or make them under dt_no_grad)", n->op);
            n->backward(n);
            dt_graph_note_op(n->op, 1);
            if (g_ready_fn) params_done(n);
            release_node(n);
            if (n->out->node == n) n->out->node = NULL;
            unlink_inputs(n);
            n->done = 1;
        } else {
            if (g_ready_fn) params_done(n);
            g_tape[i] = NULL;
            g_tape[g_n - 1 - kept++] = n; /* slots above i are already free */
        }
    }
    /* The kept nodes sit at the top of the array in their original order: move them down. */
    memmove(g_tape, g_tape + g_n - kept, kept * sizeof *g_tape);
    g_n = kept;
    g_in_backward = 0;
    if (!g_n) {
        g_cur = g_chunks;
        for (arena_chunk *c = g_chunks; c; c = c->next) c->used = 0;
    }
}

/* A guard's unwind: the nodes the failed call recorded leave the tape (the tape is as before
 * the call); a failed backward drops the whole tape - its graph is half consumed, and the
 * forward must be run again. Released first (order 0): nodes point at the scopes' tensors. */
static size_t tape_mark(void) { return (size_t)g_n; }
static void tape_release(size_t mark) {
    if (g_in_backward) {
        dt_tape_reset();
        return;
    }
    while ((size_t)g_n > mark) {
        dt_node *n = g_tape[--g_n];
        if (n && !n->done) drop_node(n);
    }
}

__attribute__((constructor)) static void set_tape_hooks(void) {
    dt_tensor_set_tape_hooks((dt_tensor_tape_hooks){dt_tape_reset, dt_tape_forget_tensor});
    dt_guard_register((dt_guard_participant){0, tape_mark, tape_release, NULL});
}

void dt_tape_forget_tensor(dt_tensor *t) {
    for (int i = 0; i < g_n; i++) {
        dt_node *n = g_tape[i];
        if (n->out == t) {
            for (int j = 0; j < n->n_saved; j++)
                if (n->saved[j] && n->saved[j] != t && !n->saved[j]->scoped) {
                    dt_tensor *s = n->saved[j];
                    s->tape_saved--;
                    n->saved[j] = NULL;
                    dt_tensor_free(s);
                }
            n->out = NULL;
        }
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == t) {
                n->in[j] = NULL;
                n->input_freed = 1;
            }
        /* a saved tensor of its scope can go before the node's output does (a scope that ends
         * with forward nodes on the tape, no backward): the node must not look at it again */
        for (int j = 0; j < n->n_saved; j++)
            if (n->saved[j] == t) n->saved[j] = NULL;
    }
    t->tape_saved = 0;
    t->node = NULL;
    t->tape_uses = 0;
}

void dt_backward_with(dt_tensor *out, const dt_tensor *grad_out) {
    dt_require_same_shape("backward (gradient of the output)", out, grad_out);
    dt_require_same_type("backward (gradient of the output)", out, grad_out);
    if (!out->requires_grad) dt_fatal("backward: the output does not require a gradient (nothing recorded)");
    if (out->grad) dt_fatal("backward: the output already holds a gradient");
    dt_require_same_device("backward (gradient of the output)", out, grad_out);
    /* The caller's buffer serves as the gradient directly (no copy); it is only read. */
    out->grad = dt_tensor_alias(grad_out);
    out->grad_valid = 1;
    run_tape();
}

void dt_backward(dt_tensor *loss) {
    if (loss->numel != 1) {
        char b[128];
        dt_fatal("backward: the loss must have one element, got %s (use dt_backward_with)",
                 dt_shape_str(loss, b, sizeof b));
    }
    if (!loss->requires_grad) dt_fatal("backward: the loss does not require a gradient (nothing recorded)");
    float beta;
    dt_grad_dst(loss, &beta);
    dt_tensor_fill(loss->grad, 1.0f);
    dt_graph_note_op("backward (the loss's seed gradient)", 1);
    run_tape();
}
