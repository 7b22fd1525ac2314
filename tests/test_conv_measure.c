/* conv_algo=measure (conv_geom.h, ops/conv/conv_op.c): each pass of a bf16 NHWC conv on the
 * engine timed fastest the first time its problem is planned, the choice kept for the process.
 * On the CPU it plans as auto (im2col + GEMM, the same bits); on the GPU its output follows
 * im2col + cuBLAS's within bf16's rounding, the problem is timed once however often it runs,
 * and the plan it printed names engines that exist. (The run with it: test_train.c's
 * gpu_train_conv_measure_follows_gemm.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_device.h"
#include "ops/dt_layers.h"
#include "tests/dt_test.h"

static dt_tensor *random_bf16(dt_dev dev, int64_t n, int64_t c, int64_t h, int64_t w, float std) {
    dt_tensor *t = dt_tensor_new4_as(dev, DT_BF16, DT_NHWC, n, c, h, w);
    dt_tensor_fill_normal(t, dt_test_rng(), 0.0f, std);
    return t;
}

DT_TEST(conv_measure_on_cpu_plans_as_auto) {
    dt_tensor *x = random_bf16(DT_CPU, 2, 16, 9, 7, 1.0f), *w = random_bf16(DT_CPU, 24, 16, 3, 3, 0.1f);
    const dt_conv_geom g = dt_geom(3, 1, 1, 1);
    float *m = dt_tensor_host_copy(dt_conv2d_algo(x, w, NULL, g, DT_MATH_FP32, DT_CONV_ALGO_MEASURE));
    float *a = dt_tensor_host_copy(dt_conv2d_algo(x, w, NULL, g, DT_MATH_FP32, DT_CONV_ALGO_AUTO));
    EXPECT(memcmp(m, a, sizeof(float) * 2 * 24 * 9 * 7) == 0);
    free(m), free(a);
}

/* the plan's lines for the problem [4, 64, 20, 18] -> 64 under measure, in *line (the last) */
static int measured_lines(char *line, size_t cap) {
    FILE *f = tmpfile();
    dt_conv_plan_print(f);
    rewind(f);
    char buf[512];
    int n = 0;
    while (fgets(buf, sizeof buf, f))
        if (strstr(buf, "[4, 64, 20, 18] -> 64, 3x3/1 pad 1 (measure")) n++, snprintf(line, cap, "%s", buf);
    fclose(f);
    return n;
}

DT_GPU_TEST(gpu_conv_measure_times_a_problem_once_and_follows_gemm) {
    dt_tensor *x = random_bf16(DT_GPU, 4, 64, 20, 18, 1.0f), *w = random_bf16(DT_GPU, 64, 64, 3, 3, 0.05f);
    const dt_conv_geom g = dt_geom(3, 1, 1, 1);
    float *m = dt_tensor_host_copy(dt_conv2d_algo(x, w, NULL, g, DT_MATH_FP32, DT_CONV_ALGO_MEASURE));
    float *m2 = dt_tensor_host_copy(dt_conv2d_algo(x, w, NULL, g, DT_MATH_FP32, DT_CONV_ALGO_MEASURE));
    float *r = dt_tensor_host_copy(dt_conv2d_algo(x, w, NULL, g, DT_MATH_FP32, DT_CONV_ALGO_GEMM));
    const int64_t n = 4 * 64 * 20 * 18;
    EXPECT_MSG(memcmp(m, m2, sizeof(float) * (size_t)n) == 0, "the kept plan gave other bits the second time");
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) e += (double)(m[i] - r[i]) * (m[i] - r[i]), s += (double)r[i] * r[i];
    EXPECT_MSG(e <= 1e-4 * s, "measure's output is %.3g (relative L2^2) from gemm's", e / s);
    char line[512] = "";
    EXPECT_EQ_INT(measured_lines(line, sizeof line), 1);
    int known = 0; /* "fprop E, dgrad E, wgrad E" with E an engine name */
    const char *engines[] = {"gemm", "igemm128", "igemm64", "sm90"};
    for (int i = 0; i < 4; i++) {
        char want[32];
        snprintf(want, sizeof want, "fprop %s,", engines[i]);
        known |= strstr(line, want) != NULL;
    }
    EXPECT_MSG(known, "measure's plan line names no engine: %s", line);
    free(m), free(m2), free(r);
}
