/* LD_PRELOAD diagnostics: on SIGSEGV/SIGABRT print the native backtrace with each frame's object
 * and offset (addr2line-able), then die with the signal. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void handler(int sig) {
    void *f[64];
    int n = backtrace(f, 64);
    char line[512];
    int k = snprintf(line, sizeof line, "== native backtrace (signal %d), %d frames\n", sig, n);
    write(2, line, k);
    for (int i = 0; i < n; i++) {
        Dl_info d;
        if (dladdr(f[i], &d) && d.dli_fname)
            k = snprintf(line, sizeof line, "#%d %s +0x%lx (%s)\n", i, d.dli_fname,
                         (unsigned long)((char *)f[i] - (char *)d.dli_fbase), d.dli_sname ? d.dli_sname : "?");
        else k = snprintf(line, sizeof line, "#%d %p\n", i, f[i]);
        write(2, line, k);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}
__attribute__((constructor)) static void install(void) {
    static char stack[1 << 16];
    stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGABRT, &sa, NULL);
}
