/* Parameter initialization (dt_init.h): random fills through the random.h kernels, in the
 * logical order of the tensor whatever its layout - a channels-last weight gets the same
 * logical values as an NCHW one from the same seed. */
#include <math.h>

#include "ops/pointwise/convert.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "ops/init/dt_init.h"
#include "core/dt_kernel.h"
#include "ops/init/random.h"

typedef void rand_fn(dt_rng *host, int64_t n, float a, float b, float *x);
DT_OP_TABLE(normal_k, "init (normal)", rand_fn,
            DT_KERNEL(normal_k, DT_CPU, DT_F32, DT_ANY_LAYOUT, dt_rand_normal_cpu),
            DT_KERNEL_CUDA(normal_k, DT_GPU, DT_F32, DT_ANY_LAYOUT, dt_rand_normal_cuda))
DT_OP_TABLE(uniform_k, "init (uniform)", rand_fn,
            DT_KERNEL(uniform_k, DT_CPU, DT_F32, DT_ANY_LAYOUT, dt_rand_uniform_cpu),
            DT_KERNEL_CUDA(uniform_k, DT_GPU, DT_F32, DT_ANY_LAYOUT, dt_rand_uniform_cuda))
typedef void reseed_fn(uint64_t seed);
DT_OP_TABLE(reseed_k, "init (reseed)", reseed_fn,
            DT_KERNEL_CUDA(reseed_k, DT_GPU, DT_F32, DT_ANY_LAYOUT, dt_rand_reseed_cuda))

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
    if (dt_gpu_ready()) DT_PICK(reseed_k, DT_GPU, DT_F32, DT_NCHW)(dt_seed());
}

/* x's values from generator fn with parameters (a, b), in logical order. */
static void fill(rand_fn *fn, dt_tensor *x, float a, float b) {
    dt_require_live("init", x);
    dt_require_dtype("init", "parameter", x, DT_F32);
    if (x->layout == DT_NCHW) {
        fn(host_rng(), x->numel, a, b, x->data);
        return;
    }
    float *tmp = dt_dev_alloc(x->dev, dt_tensor_bytes(x)); /* [N, C, H, W], then channels last */
    fn(host_rng(), x->numel, a, b, tmp);
    DT_PICK(dt_convert_k, x->dev, DT_F32, DT_NCHW)(x->shape[0], x->shape[1], x->shape[2] * x->shape[3], tmp, DT_F32, DT_NCHW, 0.0f, x->data, DT_F32, x->layout);
    dt_dev_free(x->dev, tmp);
}

void dt_init_normal(dt_tensor *t, float mean, float std) {
    fill(DT_PICK(normal_k, t->dev, DT_F32, t->layout), t, mean, std);
}

void dt_init_uniform(dt_tensor *t, float lo, float hi) {
    fill(DT_PICK(uniform_k, t->dev, DT_F32, t->layout), t, lo, hi);
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
