/* Failures come back as statuses (issue 36): a raise inside a guarded call returns its status
 * and message, releases what the call took - checked by counting the live host bytes (and the
 * device's bytes in use) before and after - and leaves the library usable: the same call then
 * succeeds with the result of a call that never failed. Failures are injected at every point a
 * call reaches (dt_inject_arm: the nth host allocation, device allocation or device call). The
 * gpu_errors_* twins run the same on CUDA buffers (build/test --gpu). */
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "core/dt_file.h"
#include "core/dt_parallel.h"
#include "core/dt_param.h"
#include "core/dt_rng.h"
#include "core/dt_tensor.h"
#include "ops/deform/dt_deform_api.h"
#include "tests/dt_test.h"
#include "train/dt_optim.h"

#if defined(__SANITIZE_ADDRESS__)
/* ASan's own count (sanitizer/allocator_interface.h, which not every compiler ships) */
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t live_host_bytes(void) { return __sanitizer_get_current_allocated_bytes(); }
#else
/* glibc's counters (mallinfo2) count blocks parked in the thread caches as in use, so the test
 * binary counts live bytes itself: it replaces the allocator's entry points (glibc supports
 * that) with the same ones plus a count of malloc_usable_size. */
#include <stdatomic.h>
extern void *__libc_malloc(size_t), *__libc_calloc(size_t, size_t), *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static _Atomic long g_live;
static void *counted(void *p) {
    if (p) g_live += (long)malloc_usable_size(p);
    return p;
}
void *malloc(size_t n) { return counted(__libc_malloc(n)); }
void *calloc(size_t a, size_t b) { return counted(__libc_calloc(a, b)); }
void free(void *p) {
    if (p) g_live -= (long)malloc_usable_size(p);
    __libc_free(p);
}
void *realloc(void *p, size_t n) {
    long before = p ? (long)malloc_usable_size(p) : 0;
    void *q = __libc_realloc(p, n);
    if (q || !n) g_live -= before;
    return q ? counted(q) : q;
}
void *memalign(size_t a, size_t n) { return counted(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { return counted(__libc_memalign(a, n)); }
int posix_memalign(void **p, size_t a, size_t n) {
    void *q = counted(__libc_memalign(a, n));
    if (!q) return 12; /* ENOMEM */
    *p = q;
    return 0;
}
static size_t live_host_bytes(void) { return (size_t)g_live; }
#endif

static size_t live_device_bytes(void) { return dt_gpu_mem_stats().in_use; }

/* ---- the guard itself ---- */

static void raise_arg(void *arg) {
    (void)arg;
    dt_fatal("the test's own failure %d", 42);
}
static void alloc_a_lot(void *arg) {
    char **keep = arg;
    for (int i = 0; i < 8; i++) keep[i] = dt_xmalloc(100);
}

DT_TEST(errors_guard_returns_status_and_message) {
    EXPECT_EQ_INT(dt_call(raise_arg, NULL), DT_ERR_ARG);
    EXPECT_EQ_INT(dt_last_status(), DT_ERR_ARG);
    EXPECT_MSG(strstr(dt_last_error(), "the test's own failure 42") && strstr(dt_last_error(), "test_errors.c"),
               "message: %s", dt_last_error());
    EXPECT(!dt_guard_active());
    char *keep[8] = {0};
    dt_inject_arm(DT_INJECT_HOST_ALLOC, 3);
    EXPECT_EQ_INT(dt_call(alloc_a_lot, keep), DT_ERR_OOM);
    EXPECT_MSG(strstr(dt_last_error(), "out of host memory"), "message: %s", dt_last_error());
    EXPECT(keep[0] && keep[1] && !keep[2]);
    free(keep[0]);
    free(keep[1]);
    memset(keep, 0, sizeof keep);
    EXPECT_EQ_INT(dt_call(alloc_a_lot, keep), DT_OK); /* one failure per arming */
    for (int i = 0; i < 8; i++) free(keep[i]);
    EXPECT(strcmp(dt_status_name(DT_ERR_OOM), "out of memory") == 0);
}

/* ---- a thread pool part that raises ---- */

static void range_raises(void *ctx, int64_t b, int64_t e) {
    (void)ctx;
    if (b <= 777 && 777 < e) dt_fatal("element 777 refused");
}
static void range_sums(void *ctx, int64_t b, int64_t e) {
    _Atomic long *sum = ctx;
    long s = 0;
    for (int64_t i = b; i < e; i++) s += (long)i;
    *sum += s;
}
static void parallel_raise(void *arg) {
    (void)arg;
    dt_parallel_for(100000, 100, range_raises, NULL);
}
static void parallel_sum(void *arg) { dt_parallel_for(100000, 100, range_sums, arg); }

DT_TEST(errors_parallel_part_raises_on_the_caller) {
    EXPECT_EQ_INT(dt_call(parallel_raise, NULL), DT_ERR_ARG);
    EXPECT_MSG(strstr(dt_last_error(), "element 777 refused"), "message: %s", dt_last_error());
    _Atomic long sum = 0;
    EXPECT_EQ_INT(dt_call(parallel_sum, &sum), DT_OK); /* the pool is free again */
    EXPECT_EQ_INT(sum, 100000L * 99999L / 2);
}

/* ---- the deformable C API ---- */

/* A CPU or CUDA problem of the API, with the conversions that need scratch: bf16 weight and
 * offsets in the other layout, two weight groups (the dense weight), DCNv2 with bias. */
typedef struct {
    dt_deform_desc d;
    dt_dev dev;
    size_t nx, noff, nmask, nw, ny;
    float *x, *off, *mask, *y, *gy, *gx, *goff, *gmask, *b, *gb;
    uint16_t *w, *gw; /* bf16 */
} api_prob;

static void *dev_copy(dt_dev dev, const void *h, size_t bytes) {
    void *p = dt_dev_alloc(dev, bytes);
    if (dev == DT_GPU) dt_copy_h2d(p, h, bytes); else memcpy(p, h, bytes);
    return p;
}

static float *randn(dt_rng *r, size_t n, float scale) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = scale * (float)dt_rng_normal(r);
    return v;
}

static void prob_make(api_prob *p, dt_dev dev) {
    memset(p, 0, sizeof *p);
    dt_deform_desc d = {2, 8, 7, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, 1, .size = sizeof(dt_deform_desc)};
    d.weight_dtype = DT_BF16;
    d.offset_layout = DT_NHWC;
    d.weight_groups = 2;
    d.device = dev == DT_GPU ? DT_DEFORM_API_CUDA : DT_DEFORM_API_CPU;
    p->d = d;
    p->dev = dev;
    int ho, wo;
    dt_deform_api_out_size(&d, &ho, &wo);
    p->nx = 2 * 8 * 7 * 6;
    p->noff = (size_t)2 * 2 * 2 * 9 * ho * wo;
    p->nmask = (size_t)2 * 2 * 9 * ho * wo;
    p->nw = 6 * 4 * 9;
    p->ny = (size_t)2 * 6 * ho * wo;
    dt_rng *r = dt_test_rng();
    float *x = randn(r, p->nx, 1), *off = randn(r, p->noff, 1.5f), *mask = randn(r, p->nmask, 0.5f);
    float *gy = randn(r, p->ny, 1), *b = randn(r, 6, 1), *wf = randn(r, p->nw, 0.3f);
    uint16_t *w = malloc(p->nw * 2);
    for (size_t i = 0; i < p->nw; i++) {
        uint32_t u;
        memcpy(&u, &wf[i], 4);
        w[i] = (uint16_t)(u >> 16);
    }
    p->x = dev_copy(dev, x, p->nx * 4);
    p->off = dev_copy(dev, off, p->noff * 4);
    p->mask = dev_copy(dev, mask, p->nmask * 4);
    p->gy = dev_copy(dev, gy, p->ny * 4);
    p->b = dev_copy(dev, b, 6 * 4);
    p->w = dev_copy(dev, w, p->nw * 2);
    p->y = dt_dev_alloc(dev, p->ny * 4);
    p->gx = dt_dev_alloc(dev, p->nx * 4);
    p->goff = dt_dev_alloc(dev, p->noff * 4);
    p->gmask = dt_dev_alloc(dev, p->nmask * 4);
    p->gb = dt_dev_alloc(dev, 6 * 4);
    p->gw = dt_dev_alloc(dev, p->nw * 2);
    free(x), free(off), free(mask), free(gy), free(b), free(wf), free(w);
}

static void prob_free(api_prob *p) {
    void *bufs[] = {p->x, p->off, p->mask, p->y, p->gy, p->gx, p->goff, p->gmask, p->b, p->gb, p->w, p->gw};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dt_dev_free(p->dev, bufs[i]);
}

static int prob_fwd(api_prob *p) {
    return dt_deform_api_forward(&p->d, DT_DEFORM_API_DEFT, p->x, p->off, p->mask, p->w, p->b, p->y, NULL);
}
static int prob_bwd(api_prob *p) {
    return dt_deform_api_backward(&p->d, DT_DEFORM_API_DEFT, p->x, p->off, p->mask, p->w, p->gy, p->gx, p->goff,
                                  p->gmask, p->gw, p->gb, NULL);
}

/* y and grad_x of the last calls, on the host. */
static float *fetch(const api_prob *p, const float *buf, size_t n) {
    float *h = malloc(n * sizeof *h);
    if (p->dev == DT_GPU) dt_copy_d2h(h, buf, n * 4); else memcpy(h, buf, n * 4);
    return h;
}

static float *to_host(const dt_tensor *t) {
    float *h = malloc((size_t)t->numel * sizeof *h);
    dt_tensor_download(t, h);
    return h;
}

static int same_floats(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* Every injection point of forward and backward, for each kind: the call returns the kind's
 * status with a message, gives back every byte it took, and the next call gives the result of
 * a call that never failed (bitwise: the deft kernels are deterministic in this mode). */
static void sweep_api(dt_dev dev, const dt_inject_kind *kinds, const int *want, const int *min_points, int nkinds) {
    api_prob p;
    prob_make(&p, dev);
    EXPECT_EQ_INT(prob_fwd(&p), 0);
    EXPECT_EQ_INT(prob_bwd(&p), 0);
    float *y0 = fetch(&p, p.y, p.ny), *gx0 = fetch(&p, p.gx, p.nx);
    /* once more: whatever a first call or a first failure caches is cached before counting */
    dt_inject_arm(kinds[0], 1);
    prob_fwd(&p);
    dt_inject_arm(kinds[0], 0);
    for (int k = 0; k < nkinds; k++)
        for (int which = 0; which < 2; which++) {
            int points = 0;
            for (long n = 1; n < 10000; n++) {
                size_t host0 = live_host_bytes(), dev0 = live_device_bytes();
                dt_inject_arm(kinds[k], n);
                int rc = which == 0 ? prob_fwd(&p) : prob_bwd(&p);
                long seen = dt_inject_count(kinds[k]);
                dt_inject_arm(kinds[k], 0);
                if (seen < n) { /* the call has fewer than n points: it ran to the end */
                    EXPECT_EQ_INT(rc, 0);
                    break;
                }
                points++;
                EXPECT_MSG(rc == want[k], "%s point %ld of kind %d: status %d, expected %d (%s)",
                           which ? "backward" : "forward", n, (int)kinds[k], rc, want[k], dt_deform_api_error());
                EXPECT_MSG(dt_deform_api_error()[0], "no message at point %ld", n);
                EXPECT_MSG(live_host_bytes() == host0, "%s point %ld of kind %d: %zd host bytes left behind",
                           which ? "backward" : "forward", n, (int)kinds[k], (ssize_t)(live_host_bytes() - host0));
                EXPECT_MSG(live_device_bytes() == dev0, "%s point %ld of kind %d: %zd device bytes left behind (%s)",
                           which ? "backward" : "forward", n, (int)kinds[k], (ssize_t)(live_device_bytes() - dev0),
                           dt_deform_api_error());
                EXPECT(!dt_guard_active());
            }
            EXPECT_MSG(points >= min_points[k], "kind %d: only %d injection points reached (at least %d expected)",
                       (int)kinds[k], points, min_points[k]);
            EXPECT_EQ_INT(prob_fwd(&p), 0);
            EXPECT_EQ_INT(prob_bwd(&p), 0);
            float *y1 = fetch(&p, p.y, p.ny), *gx1 = fetch(&p, p.gx, p.nx);
            EXPECT(same_floats(y0, y1, p.ny));
            EXPECT(same_floats(gx0, gx1, p.nx));
            free(y1), free(gx1);
        }
    free(y0), free(gx0);
    prob_free(&p);
}

DT_TEST(errors_deform_api_cpu_injected_failures) {
    const dt_inject_kind kinds[2] = {DT_INJECT_HOST_ALLOC, DT_INJECT_DEVICE_CALL};
    const int want[2] = {DT_ERR_OOM, DT_ERR_DEVICE}, min_points[2] = {2, 2};
    sweep_api(DT_CPU, kinds, want, min_points, 2);
}

DT_GPU_TEST(gpu_errors_deform_api_injected_failures) {
    const dt_inject_kind kinds[3] = {DT_INJECT_DEVICE_ALLOC, DT_INJECT_DEVICE_CALL, DT_INJECT_HOST_ALLOC};
    /* on the GPU the buffers are device memory: one host allocation a call is what there is */
    const int want[3] = {DT_ERR_OOM, DT_ERR_DEVICE, DT_ERR_OOM}, min_points[3] = {2, 2, 1};
    sweep_api(DT_GPU, kinds, want, min_points, 3);
}

/* ---- the caller's allocator: one scratch block a call ---- */

/* A caller's allocator for the test: blocks carved from one buffer made beforehand (it must not
 * call dt_gpu_malloc, which would come back to it), counted; nothing is reused. */
typedef struct {
    char *base;
    size_t size, used;
    int allocs, live;
} bump;

static void *bump_alloc(void *ctx, size_t bytes, void *stream) {
    (void)stream;
    bump *b = ctx;
    const size_t step = (bytes + 511) & ~(size_t)511;
    if (b->size - b->used < step) return NULL;
    void *p = b->base + b->used;
    b->used += step;
    b->allocs++, b->live++;
    return p;
}

static void bump_free(void *ctx, void *ptr, void *stream) {
    (void)ptr, (void)stream;
    ((bump *)ctx)->live--;
}

/* With the caller's allocator a problem's first call measures its scratch and each later one
 * takes it as one block, forward and backward, with the results of deftc's own pool bit for bit;
 * a failure inside a later call (every device allocation point, injected) gives that block back
 * too. */
DT_GPU_TEST(gpu_errors_deform_api_caller_scratch_one_block) {
    api_prob p;
    prob_make(&p, DT_GPU);
    EXPECT_EQ_INT(prob_fwd(&p), 0);
    EXPECT_EQ_INT(prob_bwd(&p), 0);
    float *y0 = fetch(&p, p.y, p.ny), *gx0 = fetch(&p, p.gx, p.nx);
    bump b = {.size = (size_t)64 << 20};
    b.base = dt_gpu_malloc(b.size);
    const dt_deform_cuda cu = {dt_gpu_current(), bump_alloc, bump_free, &b};
    EXPECT_EQ_INT(dt_deform_api_set_cuda(&cu), 0);
    for (int call = 0; call < 3; call++)
        for (int which = 0; which < 2; which++) {
            const int a0 = b.allocs;
            EXPECT_EQ_INT(which ? prob_bwd(&p) : prob_fwd(&p), 0);
            if (call > 0)
                EXPECT_MSG(b.allocs - a0 == 1, "call %d, %s: %d scratch blocks, 1 expected", call,
                           which ? "backward" : "forward", b.allocs - a0);
            EXPECT_MSG(b.live == 0, "%d scratch blocks not given back", b.live);
        }
    float *y1 = fetch(&p, p.y, p.ny), *gx1 = fetch(&p, p.gx, p.nx);
    EXPECT(same_floats(y0, y1, p.ny));
    EXPECT(same_floats(gx0, gx1, p.nx));
    int points = 0;
    for (long n = 1; n < 1000; n++) {
        dt_inject_arm(DT_INJECT_DEVICE_ALLOC, n);
        const int rc = prob_bwd(&p);
        const long seen = dt_inject_count(DT_INJECT_DEVICE_ALLOC);
        dt_inject_arm(DT_INJECT_DEVICE_ALLOC, 0);
        if (seen < n) break;
        points++;
        EXPECT_MSG(rc == DT_ERR_OOM, "point %ld: status %d (%s)", n, rc, dt_deform_api_error());
        EXPECT_MSG(b.live == 0, "point %ld: %d scratch blocks not given back", n, b.live);
    }
    EXPECT_MSG(points >= 2, "only %d device allocation points reached", points);
    EXPECT_EQ_INT(dt_deform_api_set_cuda(NULL), 0);
    dt_gpu_sync(); /* the buffer's last readers are done before it goes back to the pool */
    dt_gpu_free(b.base);
    free(y0), free(gx0), free(y1), free(gx1);
    prob_free(&p);
}

/* A bad argument after a failure: the argument's own message, then a good call works. */
DT_TEST(errors_deform_api_bad_argument_then_good_call) {
    api_prob p;
    prob_make(&p, DT_CPU);
    dt_deform_desc bad = p.d;
    bad.weight_groups = 3;
    EXPECT_EQ_INT(dt_deform_api_forward(&bad, DT_DEFORM_API_DEFT, p.x, p.off, p.mask, p.w, p.b, p.y, NULL), DT_ERR_ARG);
    EXPECT_MSG(strstr(dt_deform_api_error(), "weight groups"), "message: %s", dt_deform_api_error());
    EXPECT_EQ_INT(prob_fwd(&p), 0);
    prob_free(&p);
}

/* ---- SGD: a failed step leaves the optimizer as it was ---- */

typedef struct {
    dt_sgd *s;
    float lr;
} sgd_call;
static void sgd_step(void *arg) {
    sgd_call *c = arg;
    dt_sgd_step(c->s, c->lr);
}

/* min_points: how many injection points of the kind the step must reach (CPU: one dispatch). */
static void sgd_case(dt_dev dev, dt_inject_kind kind, int min_points) {
    dt_params ps = {0};
    int64_t shp[2][2] = {{5, 7}, {300, 11}};
    dt_tensor *t[2];
    float *init[2];
    dt_rng *r = dt_test_rng();
    for (int i = 0; i < 2; i++) {
        int64_t n = shp[i][0] * shp[i][1];
        init[i] = randn(r, (size_t)n, 1);
        t[i] = dt_param_new(&ps, i ? "b" : "a", 2, shp[i], dev, DT_NCHW, 1);
        dt_tensor_upload(t[i], init[i]);
        float *g = randn(r, (size_t)n, 1);
        dt_tensor_upload(t[i]->grad, g); /* the parameter's own gradient buffer */
        t[i]->grad_valid = 1;
        free(g);
    }
    dt_sgd_opts o = {.momentum = 0.9f, .weight_decay = 1e-4f};
    {
        /* one whole step first, on other parameters of the same shapes: what a first step sets
         * up once per process (the device's pointer tables, the allocator's own host records)
         * exists before the host bytes are counted, whichever test ran before this one */
        dt_params ps0 = {0};
        for (int i = 0; i < 2; i++) {
            dt_tensor *t0 = dt_param_new(&ps0, i ? "b" : "a", 2, shp[i], dev, DT_NCHW, 1);
            dt_tensor_fill(t0, 1.0f);
            dt_tensor_fill(t0->grad, 0.5f);
            t0->grad_valid = 1;
        }
        dt_sgd s0;
        dt_sgd_init(&s0, &ps0, &o);
        dt_sgd_step(&s0, 0.1f);
        dt_sgd_free(&s0);
        dt_params_free(&ps0);
    }
    dt_sgd s;
    dt_sgd_init(&s, &ps, &o);
    sgd_call c = {&s, 0.1f};
    int failures = 0;
    for (long n = 1; n < 1000; n++) {
        size_t host0 = live_host_bytes();
        dt_inject_arm(kind, n);
        int rc = dt_call(sgd_step, &c);
        long seen = dt_inject_count(kind);
        dt_inject_arm(kind, 0);
        if (seen < n) {
            EXPECT_EQ_INT(rc, 0);
            break;
        }
        failures++;
        EXPECT_MSG(rc != 0, "point %ld: the step did not fail", n);
        EXPECT_EQ_INT(s.steps, 0);
        EXPECT(!s.bufs[0] && !s.bufs[1]);
        EXPECT_MSG(live_host_bytes() == host0, "sgd point %ld: %zd host bytes left behind", n,
                   (ssize_t)(live_host_bytes() - host0));
        for (int i = 0; i < 2; i++) {
            float *h = to_host(t[i]);
            EXPECT_MSG(same_floats(h, init[i], (size_t)t[i]->numel), "point %ld: parameter %d changed", n, i);
            free(h);
        }
    }
    EXPECT_MSG(failures >= min_points, "%d injection points reached", failures);
    /* the step that finally ran is the first step: momentum = gradient */
    EXPECT_EQ_INT(s.steps, 1);
    for (int i = 0; i < 2; i++) {
        float *h = to_host(t[i]), *g = to_host(t[i]->grad);
        int ok = 1;
        for (int64_t j = 0; j < t[i]->numel; j++) {
            float want = init[i][j] - 0.1f * (g[j] + 1e-4f * init[i][j]);
            if (fabsf(h[j] - want) > 1e-6f) ok = 0;
        }
        EXPECT_MSG(ok, "parameter %d: not the first step's update", i);
        free(h), free(g), free(init[i]);
    }
    dt_sgd_free(&s);
    dt_params_free(&ps);
}

DT_TEST(errors_sgd_failed_step_leaves_params_consistent) {
    sgd_case(DT_CPU, DT_INJECT_HOST_ALLOC, 5);
    sgd_case(DT_CPU, DT_INJECT_DEVICE_CALL, 1);
}

DT_GPU_TEST(gpu_errors_sgd_failed_step_leaves_params_consistent) {
    sgd_case(DT_GPU, DT_INJECT_DEVICE_ALLOC, 2);
    sgd_case(DT_GPU, DT_INJECT_DEVICE_CALL, 2);
}

/* ---- dt_file_read out of memory: no descriptor or buffer left behind, no double free ---- */

typedef struct {
    const char *path;
    dt_scratch buf;
    size_t size;
} read_call;
static void read_file(void *arg) {
    read_call *c = arg;
    dt_err err;
    if (dt_file_read(c->path, "test file", 1 << 20, &c->buf, &c->size, &err)) dt_fatal("%s", err.msg);
}

DT_TEST(errors_file_read_out_of_memory) {
    char path[512];
    snprintf(path, sizeof path, "%s/f.txt", dt_test_tmpdir());
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 1000; i++) fputs("0123456789", f);
    fclose(f);
    read_call c = {path, {0}, 0};
    dt_scratch_get(&c.buf, 16); /* a small block the read must grow */
    dt_inject_arm(DT_INJECT_HOST_ALLOC, 1);
    EXPECT_EQ_INT(dt_call(read_file, &c), DT_ERR_OOM);
    EXPECT(c.buf.p == NULL && c.buf.cap == 0);
    EXPECT_EQ_INT(dt_call(read_file, &c), DT_OK);
    EXPECT_EQ_INT(c.size, 10000);
    dt_scratch_free(&c.buf); /* once: the failed grow left nothing to free twice */
}
