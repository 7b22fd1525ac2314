/* build/bench: layerwise benchmark of convolutions on the GPU.
 *
 *   build/bench [--what conv|deform|all|depthwise] [--batch 64] [--shapes l1,l2a,...] [--reps 30]
 *               [--warmup 5] [--budgets 64] [--sigma 1.0] [--mask] [--modes unfused,deft,...]
 *               [--precision fp32|tf32|bf16] [--conv-algo auto|gemm|igemm128|igemm64|sm90|measure] [--torch FILE]
 *               [--csv FILE]
 *
 * For each ResNet-18 3x3 shape (at 224x224 input) it times, with CUDA events (median of
 * --reps after --warmup), the forward alone and forward+backward (input, weight and - for
 * deformable modes - offset-conv gradients) on random data. --torch reads the output of
 * bench/torch_yardstick.py layers run in the same device call, so each row carries
 * its ratio to cuDNN's plain conv (and to torchvision's DCN). The GEMM floor is measured
 * here too: the three cuBLAS GEMMs of the main conv at full batch, nothing else.
 * Tables go to stdout; --csv writes every number. The layers stay ResNet-18's whatever the
 * model (--help says how the other models' shapes relate); whole training steps of any model
 * are build/train's (configs/synthetic_timing.cfg model=..., bench/reproduce.sh MODEL=).
 * --what depthwise (not part of all) is the depthwise sweep of bench_depthwise.c, beside
 * bench/torch_depthwise.py's cuDNN numbers (--torch). */
#include <stdlib.h>

#include "core/dt_common.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "core/dt_timer.h"
#include "ops/linear/gemm.h"

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    dt_bench_opts o;
    dt_err err;
    if (dt_bench_parse(&o, argc, argv, &err) != 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 2;
    }
    if (dt_gpu_count() == 0) {
        fprintf(stderr, "bench: no CUDA GPU visible (or built with CUDA=0); the benchmark times GPU kernels\n");
        return 1;
    }
    dt_gpu_init(0);
    /* --precision is the tensors' type (dt_bench_opts): fp32 and tf32 f32 NCHW (tf32: products
     * on TF32 tensor cores), bf16 bf16 NHWC with the weights' bf16 working copies */
    char dev[256];
    dt_device_describe(dev, sizeof dev);
    printf("# deftc bench: %s, batch %d, precision %s (%s %s%s), median of %d after %d warm-up\n", dev, o.batch,
           o.precision, dt_dtype_name(o.dtype), dt_layout_name(o.layout),
           o.dtype == DT_F32 && o.math == DT_MATH_FP32 ? ", no TF32" : "", o.reps, o.warmup);
    FILE *csv = NULL;
    if (o.csv[0]) {
        csv = fopen(o.csv, "w");
        if (!csv) { fprintf(stderr, "bench: cannot write %s\n", o.csv); return 1; }
        fprintf(csv, "table,layer,mode,budget_mb,fwd_ms,fb_ms,tflops_fb,gemm_floor_ms,cudnn_fb_ms,tv_dcn_fb_ms,extra1,extra2\n");
    }
    if (o.what_conv) dt_bench_conv(&o, csv);
    if (o.what_deform) dt_bench_deform(&o, csv);
    if (o.what_depthwise) dt_bench_depthwise(&o, csv);
    if (csv) fclose(csv);
    return 0;
}
