/* The test runner: build/test [--gpu | --all] [--list] [--ops] [--perf] [--seed S] [-v]
 *                             [--then NAME CMD] [FILTER ...]
 *   (no flag)  CPU tests            --gpu   GPU tests only       --all   both
 *   --ops      prints the op x dtype x layout x device table of every op and exits
 *   --perf     the op-case parity tests also time each case (dt_opcase.h)
 *   --then     after the C tests, runs CMD (another suite, e.g. make test's Python side) and
 *              adds the counts of its last "N passed, N failed[, N skipped]" line
 *   FILTER     a substring or a glob (with * or ?) of test names; several are OR-ed
 * The last line printed is always "N passed, N failed" (with --then: every suite's tests
 * counted, then ", N skipped (N C, N NAME, ...)", a group per suite - make test's three:
 * C, Python, torchvision); the exit status is 1 when any test failed
 * (or, with --gpu, when no GPU is visible). */
#include <stdlib.h>

#include "core/dt_common.h"
#include <dirent.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "core/dt_kernel.h"
#include "tests/dt_test.h"
#include "core/dt_timer.h"

typedef struct {
    const char *name;
    dt_test_fn fn;
    int gpu;
} test_entry;

static test_entry *g_tests;
static int g_ntests, g_captests;
static int g_failures_in_test;
static dt_rng g_rng;
static uint64_t g_seed;
static int g_verbose, g_perf;
static const char *g_current;
static char g_tmpdir[512];
static int g_passed, g_failed, g_in_test, g_is_child;

void dt_test_register(const char *name, dt_test_fn fn, int gpu) {
    if (g_ntests == g_captests) {
        g_captests = g_captests ? g_captests * 2 : 128;
        g_tests = realloc(g_tests, g_captests * sizeof *g_tests);
    }
    g_tests[g_ntests++] = (test_entry){name, fn, gpu};
}

void dt_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    g_failures_in_test++;
    if (g_failures_in_test > 20) return; /* one broken loop should not flood the log */
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

dt_rng *dt_test_rng(void) { return &g_rng; }
uint64_t dt_test_seed(void) { return g_seed; }
int dt_test_verbose(void) { return g_verbose; }
int dt_test_perf(void) { return g_perf; }

static void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char sub[1024];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                rm_rf(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

const char *dt_test_tmpdir(void) {
    if (!g_tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(g_tmpdir, sizeof g_tmpdir, "%s/deftc-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(g_tmpdir)) dt_fatal("cannot create a temporary directory for test %s", g_current);
    }
    return g_tmpdir;
}

/* Runs fn(arg) in a forked child with its stdout and stderr captured into buf (NUL-ended),
 * its warnings on when `loud`; returns the child's wait status. */
static int run_captured(void (*fn)(void *), void *arg, int loud, char *buf, size_t cap) {
    int pipefd[2];
    if (pipe(pipefd) != 0) dt_fatal("pipe failed");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) dt_fatal("fork failed");
    if (pid == 0) {
        g_is_child = 1;
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        dup2(pipefd[1], 1);
        if (loud) dt_set_quiet(0);
        fn(arg);
        fflush(stdout);
        fflush(stderr);
        _exit(0); /* returning means it did not fail */
    }
    close(pipefd[1]);
    size_t len = 0;
    ssize_t r;
    char chunk[4096];
    while ((r = read(pipefd[0], chunk, sizeof chunk)) > 0) { /* drained to the end: a full pipe would block the child */
        size_t keep = (size_t)r < cap - 1 - len ? (size_t)r : cap - 1 - len;
        memcpy(buf + len, chunk, keep);
        len += keep;
    }
    buf[len] = 0;
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    return status;
}

int dt_test_expect_death(void (*fn)(void *), void *arg, const char *needle, const char *file, int line) {
    char buf[8192];
    int status = run_captured(fn, arg, 0, buf, sizeof buf);
    int exited_nonzero = WIFEXITED(status) && WEXITSTATUS(status) != 0;
    if (!exited_nonzero) {
        dt_test_fail(file, line, "expected a clear fatal error containing \"%s\", but the call %s; output: %s",
                     needle, WIFEXITED(status) ? "returned normally" : "crashed (signal)", buf);
        return 0;
    }
    if (needle && !strstr(buf, needle)) {
        dt_test_fail(file, line, "the error message does not mention \"%s\": %s", needle, buf);
        return 0;
    }
    if (g_verbose) printf("    (expected error) %s", buf);
    return 1;
}

int dt_test_expect_output(void (*fn)(void *), void *arg, const char *needle, const char *file, int line) {
    char buf[16384];
    int status = run_captured(fn, arg, 1, buf, sizeof buf);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        dt_test_fail(file, line, "expected success printing \"%s\", but the call %s %d; output: %s", needle,
                     WIFEXITED(status) ? "exited with status" : "died of signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), buf);
        return 0;
    }
    if (!strstr(buf, needle)) {
        dt_test_fail(file, line, "the output does not mention \"%s\": %s", needle, buf);
        return 0;
    }
    if (g_verbose) printf("    (expected output) %s", buf);
    return 1;
}

static int matches(const char *name, int nf, char **filters) {
    if (!nf) return 1;
    for (int i = 0; i < nf; i++) {
        if (strpbrk(filters[i], "*?[")) {
            if (fnmatch(filters[i], name, 0) == 0) return 1;
        } else if (strstr(name, filters[i])) {
            return 1;
        }
    }
    return 0;
}

static int cmp_tests(const void *a, const void *b) {
    return strcmp(((const test_entry *)a)->name, ((const test_entry *)b)->name);
}


/* A test that hits a fatal error (dt_fatal exits) or crashes still ends the run with the
 * summary line, counting itself as failed. The error's message goes on stdout too (it was
 * printed on stderr, which a log that keeps stdout alone loses: exit is called on the thread
 * that raised, so dt_last_error is its message). */
static void on_exit_during_test(void) {
    if (!g_in_test || g_is_child) return;
    g_in_test = 0;
    const char *why = dt_last_status() ? dt_last_error() : "";
    printf("FAIL  %-48s (fatal error%s%s)\n%d passed, %d failed\n", g_current, why[0] ? ": " : " above", why, g_passed,
           g_failed + 1);
    fflush(stdout);
}

static void on_crash(int sig) {
    fprintf(stderr, "\n  CRASH (signal %d) in test %s\n", sig, g_current ? g_current : "?");
    on_exit_during_test();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A suite run after the C tests (--then NAME CMD). */
typedef struct {
    const char *name, *cmd;
    int passed, failed, skipped;
} suite;

/* Runs the suite's command, passing its output through, and takes the counts of its last
 * "N passed, N failed[, N skipped]" line. A suite that ends without one, or that exits non-zero
 * without counting a failure, counts as one failed test: a crash must not pass for success. */
static void run_suite(suite *st) {
    fflush(stdout);
    FILE *p = popen(st->cmd, "r");
    if (!p) {
        printf("FAIL  %s: cannot run '%s'\n", st->name, st->cmd);
        st->failed = 1;
        return;
    }
    char line[4096];
    int counted = 0;
    while (fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        int n[3] = {0, 0, 0};
        if (sscanf(line, "%d passed, %d failed, %d skipped", &n[0], &n[1], &n[2]) >= 2)
            st->passed = n[0], st->failed = n[1], st->skipped = n[2], counted = 1;
    }
    int status = pclose(p);
    int ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!counted || (!ok && !st->failed)) {
        printf("FAIL  %s: '%s' %s (%s %d)\n", st->name, st->cmd,
               counted ? "failed" : "ended without its 'N passed, N failed' line", WIFEXITED(status) ? "exit status" : "signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? WTERMSIG(status) : status);
        st->failed++;
    }
    fflush(stdout);
}

static void usage(void) {
    puts("usage: build/test [--gpu | --all] [--list] [--ops] [--perf] [--seed S] [-v] [--then NAME CMD] [FILTER ...]\n"
         "  (default)   run the CPU tests\n"
         "  --gpu       run the GPU tests (CUDA vs CPU parity); fails if no GPU is visible\n"
         "  --all       run both\n"
         "  --list      print the names of the selected tests and exit\n"
         "  --ops       print every op's kernels (dtype, layout, device) and exit\n"
         "  --perf      with --gpu: the op-case parity tests time each case too\n"
         "  --seed S    seed for the random inputs (default: from the clock; printed)\n"
         "  -v          verbose\n"
         "  --then NAME CMD  after the tests, run CMD (another suite) and count its last\n"
         "              'N passed, N failed[, N skipped]' line in the last line (make test: Python)\n"
         "  FILTER      substring or glob of test names; a test runs if any filter matches");
}

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    int want_cpu = 1, want_gpu = 0, list = 0, nf = 0;
    char **filters = calloc(argc, sizeof *filters);
    suite *suites = calloc(argc, sizeof *suites);
    int ns = 0;
    g_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    if (getenv("DT_TEST_SEED")) g_seed = strtoull(getenv("DT_TEST_SEED"), NULL, 10);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu")) want_cpu = 0, want_gpu = 1;
        else if (!strcmp(argv[i], "--all")) want_cpu = 1, want_gpu = 1;
        else if (!strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "--ops")) { dt_op_tables_print(stdout); return 0; }
        else if (!strcmp(argv[i], "--perf")) g_perf = 1;
        else if (!strcmp(argv[i], "-v")) g_verbose = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--then") && i + 2 < argc) {
            suites[ns].name = argv[++i];
            suites[ns++].cmd = argv[++i];
        }
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(); return 0; }
        else if (argv[i][0] == '-') { fprintf(stderr, "unknown option %s\n", argv[i]); usage(); return 2; }
        else filters[nf++] = argv[i];
    }
    qsort(g_tests, g_ntests, sizeof *g_tests, cmp_tests);
    if (list) {
        for (int i = 0; i < g_ntests; i++)
            if (((g_tests[i].gpu && want_gpu) || (!g_tests[i].gpu && want_cpu)) && matches(g_tests[i].name, nf, filters))
                printf("%s%s\n", g_tests[i].name, g_tests[i].gpu ? " (gpu)" : "");
        return 0;
    }
    if (want_gpu) {
        if (!dt_built_with_cuda()) {
            printf("error: the GPU tests need a CUDA build, but deftc was built with CUDA=0\n0 passed, 1 failed\n");
            return 1;
        }
        if (dt_gpu_count() == 0) {
            printf("error: the GPU tests need a visible CUDA GPU and none was found "
                   "(cudaGetDeviceCount reports 0 or fails); run `make test` for the CPU tests\n"
                   "0 passed, 1 failed\n");
            return 1;
        }
        dt_gpu_init(0);
        /* every device block handed out starts as NaN; DT_TEST_POISON=2 also every block given
         * back, 0 none (dt_alloc.h) */
        dt_gpu_set_poison(getenv("DT_TEST_POISON") ? atoi(getenv("DT_TEST_POISON")) : 1);
        char d[256];
        dt_device_describe(d, sizeof d);
        printf("device: %s\n", d);
    }
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGFPE, on_crash);
    printf("seed %llu (reproduce with --seed %llu)\n", (unsigned long long)g_seed, (unsigned long long)g_seed);
    atexit(on_exit_during_test);
    double t_all = dt_now_ms();
    for (int i = 0; i < g_ntests; i++) {
        test_entry *t = &g_tests[i];
        if (!((t->gpu && want_gpu) || (!t->gpu && want_cpu)) || !matches(t->name, nf, filters)) continue;
        g_current = t->name;
        g_failures_in_test = 0;
        uint64_t h = 1469598103934665603ULL;
        for (const char *c = t->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        dt_rng_seed(&g_rng, g_seed ^ h);
        dt_set_quiet(!g_verbose);
        double t0 = dt_now_ms();
        g_in_test = 1;
        dt_scope_begin();
        t->fn();
        dt_scope_end();
        g_in_test = 0;
        dt_set_grad_enabled(1);
        if (t->gpu) dt_gpu_sync();
        double ms = dt_now_ms() - t0;
        if (g_tmpdir[0]) { rm_rf(g_tmpdir); g_tmpdir[0] = 0; }
        if (g_failures_in_test) {
            g_failed++;
            printf("FAIL  %-48s %8.1f ms  (%d failed expectations)\n", t->name, ms, g_failures_in_test);
        } else {
            g_passed++;
            printf("ok    %-48s %8.1f ms\n", t->name, ms);
        }
        fflush(stdout);
    }
    if (g_passed + g_failed == 0) {
        printf("error: no test matched the filter\n0 passed, 1 failed\n");
        return 1;
    }
    if (want_gpu) {
        /* Hand the allocator's cached blocks back to the driver, so that what
         * `compute-sanitizer --leak-check full` still reports are blocks nobody freed. */
        dt_gpu_empty_cache();
        dt_mem_stats ms = dt_gpu_mem_stats();
        if (ms.in_use) printf("note: %zu bytes of device memory are still held at exit (long-lived scratch)\n", ms.in_use);
    }
    printf("time %.1f s\n", (dt_now_ms() - t_all) / 1e3);
    int passed = g_passed, failed = g_failed, skipped = 0;
    for (int i = 0; i < ns; i++) {
        run_suite(&suites[i]);
        passed += suites[i].passed, failed += suites[i].failed, skipped += suites[i].skipped;
    }
    printf("%d passed, %d failed", passed, failed);
    if (ns) {
        printf(", %d skipped (%d C", skipped, g_passed + g_failed);
        for (int i = 0; i < ns; i++)
            printf(", %d %s", suites[i].passed + suites[i].failed + suites[i].skipped, suites[i].name);
        printf(")");
    }
    printf("\n");
    free(filters);
    free(suites);
    return failed ? 1 : 0;
}
