/* The GPU's multi-tensor SGD against the CPU's, init statistics, and a small CNN that must
 * learn on the GPU. (Each layer against its CPU twin: its op-case table, tests/cases_*.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "tests/dt_check.h"
#include "ops/init/dt_init.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "train/dt_optim.h"
#include "core/dt_param.h"
#include "tests/dt_test.h"

DT_GPU_TEST(gpu_parity_sgd_multi_tensor) {
    /* Many tensors of awkward sizes (one larger than a chunk), momentum + nesterov + decay
     * exemption, 3 steps, GPU vs CPU. */
    int64_t sizes[6] = {1, 7, 16384, 16385, 100000, 333};
    dt_params pc = {0}, pg = {0};
    for (int i = 0; i < 6; i++) {
        char n[16];
        snprintf(n, sizeof n, "p%d", i);
        dt_tensor *a = dt_param_new(&pc, n, 1, &sizes[i], DT_CPU, DT_NCHW, i % 2);
        dt_tensor *b = dt_param_new(&pg, n, 1, &sizes[i], DT_GPU, DT_NCHW, i % 2);
        dt_param_of(a)->lr_mult = dt_param_of(b)->lr_mult = i == 2 ? 0.1f : 1.0f;
        dt_tensor_fill_normal(a, dt_test_rng(), 0, 1);
        dt_tensor_copy(b, a);
    }
    dt_sgd oc, og;
    dt_sgd_opts o = {.momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = 1};
    dt_sgd_init(&oc, &pc, &o);
    dt_sgd_init(&og, &pg, &o);
    for (int step = 0; step < 3; step++) {
        dt_params_zero_grad(&pc);
        dt_params_zero_grad(&pg);
        for (int i = 0; i < 6; i++) {
            if (step == 1 && i == 3) continue; /* a parameter without gradient this step */
            dt_tensor_fill_normal(pc.items[i]->t->grad, dt_test_rng(), 0, 1);
            dt_tensor_copy(pg.items[i]->t->grad, pc.items[i]->t->grad);
            pc.items[i]->t->grad_valid = pg.items[i]->t->grad_valid = 1;
        }
        dt_sgd_step(&oc, 0.1f);
        dt_sgd_step(&og, 0.1f);
    }
    for (int i = 0; i < 6; i++) {
        float *h = dt_tensor_host_copy(pg.items[i]->t);
        EXPECT(dt_expect_close("sgd parameter", h, dt_data_f32(pc.items[i]->t), sizes[i], 1e-6));
        free(h);
    }
    dt_sgd_free(&oc);
    dt_sgd_free(&og);
    dt_params_free(&pc);
    dt_params_free(&pg);
}

void dt_test_init_statistics(dt_dev dev);
DT_GPU_TEST(gpu_init_statistics_and_reproducibility) { dt_test_init_statistics(DT_GPU); }

double dt_test_small_cnn(dt_dev dev, int steps, double *acc_out);
DT_GPU_TEST(gpu_small_cnn_trains) {
    double acc, ratio = dt_test_small_cnn(DT_GPU, 120, &acc);
    printf("    loss ratio %.3f, accuracy %.2f\n", ratio, acc);
    EXPECT_MSG(ratio < 0.4, "loss fell only to %.2f of its start", ratio);
    EXPECT_MSG(acc > 0.9, "training accuracy %.2f", acc);
}
