/* The runner's last line counts every suite `make test` ran: build/test --then NAME CMD runs
 * another suite after the C tests (the Python side) and adds the counts of its last
 * "N passed, N failed[, N skipped]" line; a suite that ends without one, or fails without
 * counting a failure, is a failed test. (Before, `make test` ended with the Python side's own
 * count, the C tests' six lines up.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dt_common.h"
#include "tests/dt_test.h"

/* Runs this test binary on one cheap test with `--then Stub STUB`; the last line of its
 * output into last[cap], its exit status returned. */
static int run_with_suite(const char *stub, char *last, size_t cap) {
    char self[1024], cmd[2048];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) dt_fatal("readlink /proc/self/exe failed");
    self[n] = 0;
    snprintf(cmd, sizeof cmd, "'%s' --then Stub \"%s\" config_precision_values 2>&1", self, stub);
    FILE *p = popen(cmd, "r");
    if (!p) dt_fatal("popen failed");
    char line[1024];
    last[0] = 0;
    while (fgets(line, sizeof line, p)) snprintf(last, cap, "%s", line);
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

DT_TEST(runner_last_line_counts_every_suite) {
    char last[1024];
    /* 1 C test; the stub counts 5 passed, 2 skipped */
    EXPECT_EQ_INT(run_with_suite("printf 'ok  a\\n5 passed, 0 failed, 2 skipped\\n'", last, sizeof last), 0);
    EXPECT_MSG(!strcmp(last, "6 passed, 0 failed, 2 skipped (1 C, 7 Stub)\n"), "last line: %s", last);
    /* its failures fail the run */
    EXPECT_EQ_INT(run_with_suite("printf '3 passed, 1 failed\\n'; exit 1", last, sizeof last), 1);
    EXPECT_MSG(!strcmp(last, "4 passed, 1 failed, 0 skipped (1 C, 4 Stub)\n"), "last line: %s", last);
    /* a suite that dies before its count line is a failure, not nothing */
    EXPECT_EQ_INT(run_with_suite("echo starting; kill -9 \\$\\$", last, sizeof last), 1);
    EXPECT_MSG(!strcmp(last, "1 passed, 1 failed, 0 skipped (1 C, 1 Stub)\n"), "last line: %s", last);
    /* so is one that exits non-zero while counting no failure */
    EXPECT_EQ_INT(run_with_suite("printf '2 passed, 0 failed\\n'; exit 3", last, sizeof last), 1);
    EXPECT_MSG(!strcmp(last, "3 passed, 1 failed, 0 skipped (1 C, 3 Stub)\n"), "last line: %s", last);
}

/* A test that ends the process (an unguarded dt_fatal: the program's handler exits) is counted
 * as failed, and its message is on stdout as well as stderr - a log of stdout alone still says
 * why. The test runs itself again with DT_TEST_FIXTURE=fatal, where it raises. */
DT_TEST(runner_fatal_error_message_on_stdout) {
    if (getenv("DT_TEST_FIXTURE") && !strcmp(getenv("DT_TEST_FIXTURE"), "fatal"))
        dt_fatal("the fixture's message %d", 42);
    char self[1024], cmd[2048], line[1024], out[8192] = "";
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) dt_fatal("readlink /proc/self/exe failed");
    self[n] = 0;
    snprintf(cmd, sizeof cmd, "DT_TEST_FIXTURE=fatal '%s' runner_fatal_error_message_on_stdout 2>/dev/null", self);
    FILE *p = popen(cmd, "r");
    if (!p) dt_fatal("popen failed");
    while (fgets(line, sizeof line, p)) strncat(out, line, sizeof out - strlen(out) - 1);
    int status = pclose(p);
    EXPECT_EQ_INT(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
    EXPECT_MSG(strstr(out, "FAIL  runner_fatal_error_message_on_stdout") != NULL, "stdout: %s", out);
    EXPECT_MSG(strstr(out, "the fixture's message 42") != NULL, "stdout: %s", out);
    EXPECT_MSG(strstr(out, "0 passed, 1 failed") != NULL, "stdout: %s", out);
}
