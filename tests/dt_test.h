/* dt_test.h: the test runner's interface.
 *
 *   DT_TEST(name)      { ... }   a CPU test (make test, and CI)
 *   DT_GPU_TEST(name)  { ... }   a GPU test (make test-gpu, needs a visible CUDA device)
 *
 * Tests register themselves at load time; build/test runs them in name order, each inside
 * a tensor scope (everything it makes is freed after it) with its own RNG (dt_test_rng()),
 * seeded from the run seed and the test name, so a failure is reproduced by
 * `build/test --seed S name`.
 * EXPECT* record a failure with file:line and carry on; a test passes when none fired.
 */
#ifndef DT_TEST_H
#define DT_TEST_H

#include <math.h>
#include <stdint.h>

#include "core/dt_rng.h"

typedef void (*dt_test_fn)(void);
void dt_test_register(const char *name, dt_test_fn fn, int gpu);

#define DT_TEST_REG(name, gpu)                                                            \
    static void name(void);                                                               \
    __attribute__((constructor)) static void dt_reg_##name(void) { dt_test_register(#name, name, gpu); } \
    static void name(void)
#define DT_TEST(name) DT_TEST_REG(name, 0)
#define DT_GPU_TEST(name) DT_TEST_REG(name, 1)

void dt_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
dt_rng *dt_test_rng(void);
uint64_t dt_test_seed(void);
int dt_test_verbose(void);
int dt_test_perf(void); /* build/test --perf */
const char *dt_test_tmpdir(void); /* a fresh directory for this test, removed afterwards */

#define EXPECT(cond)                                          \
    do {                                                      \
        if (!(cond)) dt_test_fail(__FILE__, __LINE__, "expected %s", #cond); \
    } while (0)
#define EXPECT_MSG(cond, ...)                                 \
    do {                                                      \
        if (!(cond)) dt_test_fail(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define EXPECT_EQ_INT(a, b)                                                                  \
    do {                                                                                     \
        long long dt_a_ = (long long)(a), dt_b_ = (long long)(b);                            \
        if (dt_a_ != dt_b_) dt_test_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", #a, dt_a_, #b, dt_b_); \
    } while (0)
#define EXPECT_NEAR(a, b, tol)                                                               \
    do {                                                                                     \
        double dt_a_ = (a), dt_b_ = (b);                                                     \
        if (!(fabs(dt_a_ - dt_b_) <= (tol)))                                                 \
            dt_test_fail(__FILE__, __LINE__, "%s = %.9g, expected %s = %.9g (tol %g)", #a, dt_a_, #b, dt_b_, (double)(tol)); \
    } while (0)

/* Runs `stmt` in a forked child and expects it to exit non-zero with `needle` in its stderr.
 * This is how tests check that bad input gives a clear, fatal error. */
int dt_test_expect_death(void (*fn)(void *), void *arg, const char *needle, const char *file, int line);
#define EXPECT_DEATH(fn, arg, needle) dt_test_expect_death((fn), (arg), (needle), __FILE__, __LINE__)

/* Runs `fn` in a forked child with warnings on and expects it to return (or exit 0) with
 * `needle` in its stdout or stderr: how tests check that a warning is printed. */
int dt_test_expect_output(void (*fn)(void *), void *arg, const char *needle, const char *file, int line);
#define EXPECT_OUTPUT(fn, arg, needle) dt_test_expect_output((fn), (arg), (needle), __FILE__, __LINE__)

#endif
