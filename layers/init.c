#include <math.h>

#include "dt_alloc.h"
#include "dt_common.h"
#include "dt_device.h"
#include "dt_dispatch.h"
#include "dt_init.h"
#include "elementwise.h"
#ifdef DT_CUDA
#include "dt_cuda.h"
#endif

static dt_rng g_host;
static int g_host_ready;

static dt_rng *host_rng(void) {
    if (!g_host_ready) {
        dt_rng_derive(&g_host, dt_seed(), 0x1417, 0);
        g_host_ready = 1;
    }
    return &g_host;
}

void dt_init_reseed(void) {
    g_host_ready = 0;
#ifdef DT_CUDA
    if (dt_gpu_ready()) {
        DT_CURAND(curandSetPseudoRandomGeneratorSeed(dt_curand(), dt_seed()));
        DT_CURAND(curandSetGeneratorOffset(dt_curand(), 0));
    }
#endif
}

void dt_init_normal(dt_tensor *t, float mean, float std) {
    dt_require_live("init_normal", t);
    if (t->dev == DT_CPU) {
        dt_rng_fill_normal(host_rng(), t->data, t->numel, mean, std);
        return;
    }
#ifdef DT_CUDA
    /* cuRAND makes normals in pairs: an odd count goes through a scratch of n+1. */
    if (t->numel % 2 == 0) {
        DT_CURAND(curandGenerateNormal(dt_curand(), t->data, (size_t)t->numel, mean, std));
    } else {
        float *tmp = dt_gpu_malloc((size_t)(t->numel + 1) * sizeof(float));
        DT_CURAND(curandGenerateNormal(dt_curand(), tmp, (size_t)t->numel + 1, mean, std));
        dt_copy_d2d(t->data, tmp, (size_t)t->numel * sizeof(float));
        dt_gpu_free(tmp);
    }
#endif
}

void dt_init_uniform(dt_tensor *t, float lo, float hi) {
    dt_require_live("init_uniform", t);
    if (t->dev == DT_CPU) {
        dt_rng_fill_uniform(host_rng(), t->data, t->numel, lo, hi);
        return;
    }
#ifdef DT_CUDA
    DT_CURAND(curandGenerateUniform(dt_curand(), t->data, (size_t)t->numel)); /* (0, 1] */
    dt_scale_shift_cuda(t->numel, hi - lo, lo, t->data);
#endif
}

void dt_init_kaiming_normal_fanout(dt_tensor *w) {
    if (w->ndim != 4) dt_fatal("kaiming init expects a conv weight [Cout, Cin, kh, kw], got %d dims", w->ndim);
    double fan_out = (double)w->shape[0] * w->shape[2] * w->shape[3];
    dt_init_normal(w, 0.0f, (float)sqrt(2.0 / fan_out));
}

void dt_init_linear_default(dt_tensor *w, dt_tensor *b) {
    if (w->ndim != 2) dt_fatal("linear init expects a weight [out, in], got %d dims", w->ndim);
    float bound = 1.0f / sqrtf((float)w->shape[1]);
    dt_init_uniform(w, -bound, bound);
    if (b) dt_init_uniform(b, -bound, bound);
}
