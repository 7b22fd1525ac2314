#include "core/dt_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dt_file_read(const char *path, const char *what, size_t max_bytes, dt_scratch *buf, size_t *size, dt_err *err) {
    const char *sep = what[0] ? " " : "";
    *size = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below anyway). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return dt_errf(err, "cannot open %s%s%s: %s", what, sep, path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = dt_errf(err, "cannot read %s%s%s: %s", what, sep, path, strerror(errno));
    else if (S_ISDIR(st.st_mode))
        rc = dt_errf(err, "%s%s%s is a folder, not a file", what, sep, path);
    else if (!S_ISREG(st.st_mode))
        rc = dt_errf(err, "cannot read %s%s%s: not a regular file", what, sep, path);
    else if ((unsigned long long)st.st_size > max_bytes)
        rc = dt_errf(err, "%s%s%s is %lld bytes, more than the %zu accepted", what, sep, path, (long long)st.st_size,
                     max_bytes);
    if (rc) {
        close(fd);
        return rc;
    }
    size_t n = (size_t)st.st_size;
    /* Not dt_scratch_get: a raise here would leave fd open. */
    char *p = dt_scratch_try(buf, n + 1);
    if (!p) {
        close(fd);
        dt_fail(DT_ERR_OOM, "out of host memory reading %s%s%s (%zu bytes)", what, sep, path, n + 1);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = dt_errf(err, "cannot read %s%s%s: %s", what, sep, path, strerror(errno));
            break;
        }
        if (r == 0) {
            rc = dt_errf(err, "cannot read %s%s%s: short read (%zu of %zu bytes; the file changed?)", what, sep, path,
                         got, n);
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    if (rc) return rc;
    p[n] = 0;
    *size = n;
    return 0;
}

int dt_make_parent_dirs(const char *path, dt_err *err) {
    char *dir = dt_xstrdup(path);
    char *slash = strrchr(dir, '/');
    int rc = 0;
    if (slash && slash != dir) { /* "f" and "/f" need no folder */
        *slash = 0;
        /* Each prefix ending before a '/', then the folder itself; existing ones are fine. */
        for (char *p = dir + 1; !rc; p++) {
            int last = *p == 0;
            if (*p != '/' && !last) continue;
            *p = 0;
            struct stat st;
            if (dir[0] && mkdir(dir, 0777) != 0 && errno != EEXIST)
                rc = dt_errf(err, "cannot create folder %s: %s", dir, strerror(errno));
            else if (dir[0] && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
                rc = dt_errf(err, "cannot create folder %s: a file of that name is in the way", dir);
            if (last) break;
            *p = '/';
        }
    }
    free(dir);
    return rc;
}
