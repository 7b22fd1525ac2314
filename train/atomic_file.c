/* Whole-or-nothing writes by rename (atomic_file.h). */
#include "train/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a folder";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

int dt_atomic_target(const char *path, const char *what, char *target, size_t cap, dt_err *err) {
    const char *sep = what[0] ? " " : "";
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) return dt_errf(err, "cannot write %s%s%s: %s", what, sep, path, strerror(errno));
        /* a new file (its folder is checked when it is created) */
    } else if (S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real)
            return dt_errf(err, "cannot write %s%s%s: it is a symlink that leads nowhere (%s); create its target or give "
                           "another path", what, sep, path, strerror(errno));
        struct stat rt;
        int bad = stat(real, &rt) != 0 || !S_ISREG(rt.st_mode);
        if (bad) {
            dt_errf(err, "cannot write %s%s%s: it is a symlink to %s, which is %s; give the path of a regular file", what,
                    sep, path, real, kind_of(rt.st_mode));
            free(real);
            return -1;
        }
        if (strlen(real) >= cap) {
            free(real);
            return dt_errf(err, "cannot write %s%s%s: the path it links to is too long", what, sep, path);
        }
        strcpy(target, real);
        free(real);
        return 0;
    } else if (!S_ISREG(st.st_mode)) {
        return dt_errf(err, "cannot write %s%s%s: it is %s, which a file written by rename would replace; give the path "
                       "of a regular file", what, sep, path, kind_of(st.st_mode));
    }
    if (strlen(path) >= cap) return dt_errf(err, "cannot write %s%s%s: the path is too long", what, sep, path);
    strcpy(target, path);
    return 0;
}

void dt_atomic_tmp_name(const char *target, long pid, char *out, size_t cap) { snprintf(out, cap, "%s.tmp.%ld", target, pid); }

static int write_all(int fd, const void *p, size_t n) {
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, (const char *)p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        off += (size_t)w;
    }
    return 0;
}

int dt_atomic_write(const char *path, const char *what, const void *a, size_t na, const void *b, size_t nb, dt_err *err) {
    const char *sep = what[0] ? " " : "";
    char target[PATH_MAX + 1], tmp[PATH_MAX + 32];
    if (dt_atomic_target(path, what, target, sizeof target, err)) return -1;
    dt_atomic_tmp_name(target, (long)getpid(), tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return dt_errf(err, "cannot write %s%s%s: %s", what, sep, tmp, strerror(errno));
    int ok = write_all(fd, a, na) == 0 && write_all(fd, b, nb) == 0;
    int saved = errno;
    if (ok && fsync(fd) != 0) ok = 0, saved = errno;
    if (close(fd) != 0 && ok) ok = 0, saved = errno;
    /* the target is checked again just before the rename: it may have changed since */
    dt_err e;
    if (ok && dt_atomic_target(path, what, target, sizeof target, &e)) {
        unlink(tmp);
        return dt_errf(err, "%s", e.msg);
    }
    if (ok && rename(tmp, target) != 0) ok = 0, saved = errno;
    if (!ok) {
        unlink(tmp);
        return dt_errf(err, "cannot write %s%s%s: %s (the previous file, if any, is untouched)", what, sep, path,
                       strerror(saved));
    }
    return 0;
}
