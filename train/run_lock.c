/* Lock files of a run's outputs (run_lock.h). */
#include "train/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The PID written in a lock file, 0 when it holds none. */
static long read_pid(int fd) {
    char b[32];
    ssize_t n = pread(fd, b, sizeof b - 1, 0);
    if (n <= 0) return 0;
    b[n] = 0;
    char *end;
    long pid = strtol(b, &end, 10);
    return end != b && pid > 0 ? pid : 0;
}

int train_lock_take(train_lock *l, const char *name, const char *what, long *stale_pid, dt_err *err) {
    l->held = 0;
    *stale_pid = 0;
    snprintf(l->path, sizeof l->path, "%s.lock", name);
    /* A few attempts: the owner may remove the file between our open and our flock, and the
     * lock would then be on a file nobody else sees (the inode check below). */
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return dt_errf(err, "cannot write the %s: cannot create the lock file %s: %s", what, l->path,
                                   strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            long pid = read_pid(fd);
            close(fd);
            if (e == EWOULDBLOCK)
                return dt_errf(err, "cannot write the %s: another run (PID %ld) holds the lock file %s; wait for it to "
                               "end, or give this run another name", what, pid, l->path);
            return dt_errf(err, "cannot lock %s: %s", l->path, strerror(e));
        }
        struct stat held, now;
        if (fstat(fd, &held) != 0 || stat(l->path, &now) != 0 || held.st_ino != now.st_ino || held.st_dev != now.st_dev) {
            close(fd);
            continue;
        }
        long pid = read_pid(fd);
        if (pid > 0 && pid != (long)getpid()) *stale_pid = pid; /* its owner is gone: the kernel dropped its flock */
        char b[32];
        int n = snprintf(b, sizeof b, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, b, (size_t)n, 0) != n) {
            int e = errno;
            unlink(l->path);
            close(fd);
            return dt_errf(err, "cannot write the lock file %s: %s", l->path, strerror(e));
        }
        l->fd = fd;
        l->held = 1;
        return 0;
    }
    return dt_errf(err, "cannot take the lock %s: it is removed and made again by another run, over and over", l->path);
}

void train_lock_release(train_lock *l) {
    if (!l->held) return;
    unlink(l->path); /* before the flock goes: a run waiting on this file sees it is gone and retries */
    close(l->fd);
    l->held = 0;
}
