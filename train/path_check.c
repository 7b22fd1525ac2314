/* Outputs against inputs and against each other (path_check.h). */
#include "train/path_check.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CANON_MAX (2 * PATH_MAX)

/* Appends the components of `rest` to out[cap] (which holds an absolute folder), "." dropped
 * and ".." taking one back, as mkdir -p and open would walk them. */
static void append_lexical(char *out, size_t cap, const char *rest) {
    while (*rest) {
        while (*rest == '/') rest++;
        size_t n = strcspn(rest, "/");
        if (!n) break;
        if (n == 1 && rest[0] == '.') {
        } else if (n == 2 && rest[0] == '.' && rest[1] == '.') {
            char *slash = strrchr(out, '/');
            if (slash && slash != out) *slash = 0;
            else strcpy(out, "/");
        } else {
            size_t o = strlen(out);
            snprintf(out + o, cap - o, "%s%.*s", o && out[o - 1] == '/' ? "" : "/", (int)n, rest);
        }
        rest += n;
    }
}

/* Where `path` is or will be: realpath of the file when it exists; else a dangling symlink is
 * followed, and the longest folder of the path that exists is resolved, the rest appended. */
static void canonical(const char *path, char *out, size_t cap) {
    char cur[CANON_MAX];
    snprintf(cur, sizeof cur, "%s", path);
    for (int hop = 0; hop < 40; hop++) {
        char *r = realpath(cur, NULL);
        if (r) {
            snprintf(out, cap, "%s", r);
            free(r);
            return;
        }
        struct stat st;
        char t[PATH_MAX];
        ssize_t n;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode) || (n = readlink(cur, t, sizeof t - 1)) < 0) break;
        t[n] = 0;
        if (t[0] == '/') {
            snprintf(cur, sizeof cur, "%s", t);
        } else {
            char *slash = strrchr(cur, '/');
            char dir[CANON_MAX];
            snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - cur) : 1, slash ? cur : ".");
            if (slash == cur) strcpy(dir, "/");
            char next[CANON_MAX];
            if (snprintf(next, sizeof next, "%s/%s", dir, t) >= (int)sizeof next) break;
            memcpy(cur, next, sizeof cur);
        }
    }
    /* not there yet: the longest leading folder that exists, resolved, then the rest */
    size_t cut = strlen(cur);
    for (;;) {
        while (cut > 0 && cur[cut - 1] != '/') cut--;
        char head[CANON_MAX];
        if (cut == 0) strcpy(head, ".");
        else snprintf(head, sizeof head, "%.*s", (int)(cut == 1 ? 1 : cut - 1), cur);
        char *r = realpath(head, NULL);
        if (r) {
            snprintf(out, cap, "%s", r);
            free(r);
            append_lexical(out, cap, cur + cut);
            return;
        }
        if (cut <= 1) break;
        cut--; /* before that slash */
    }
    snprintf(out, cap, "%s", cur); /* nothing of it resolves: compared as written */
}

typedef struct {
    int exists;
    dev_t dev;
    ino_t ino;
    char canon[CANON_MAX];
} path_id;

static void identify(const char *path, path_id *id) {
    struct stat st;
    id->exists = stat(path, &st) == 0;
    if (id->exists) {
        id->dev = st.st_dev;
        id->ino = st.st_ino;
    }
    canonical(path, id->canon, sizeof id->canon);
}

/* 0: not the same file; 1: the same name; 2: the same device and inode; 3: the same place. */
static int same(const char *pa, const path_id *a, const char *pb, const path_id *b) {
    if (!strcmp(pa, pb)) return 1;
    if (a->exists && b->exists) return a->dev == b->dev && a->ino == b->ino ? 2 : 0;
    return strcmp(a->canon, b->canon) ? 0 : 3;
}

int dt_paths_same(const char *a, const char *b) {
    path_id *ia = dt_xmalloc(sizeof *ia), *ib = dt_xmalloc(sizeof *ib);
    identify(a, ia);
    identify(b, ib);
    int s = same(a, ia, b, ib);
    free(ia);
    free(ib);
    return s != 0;
}

int dt_paths_check(const dt_run_path *p, int n, dt_err *err) {
    path_id *id = dt_xcalloc((size_t)(n ? n : 1), sizeof *id);
    for (int i = 0; i < n; i++)
        if (p[i].path && p[i].path[0]) identify(p[i].path, &id[i]);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (!p[i].path || !p[i].path[0] || !p[i].output) continue;
        for (int j = 0; j < n && !rc; j++) {
            if (j == i || !p[j].path || !p[j].path[0] || (p[j].output && j < i)) continue; /* a pair of outputs once */
            if (p[i].group && p[i].group == p[j].group) continue;
            int s = same(p[i].path, &id[i], p[j].path, &id[j]);
            if (!s) continue;
            char how[CANON_MAX + 64] = "";
            if (s == 2) snprintf(how, sizeof how, " (one device and inode: a symlink or a hard link)");
            if (s == 3) snprintf(how, sizeof how, " (both resolve to %s)", id[i].canon);
            rc = dt_errf(err, "%s (%s) and %s (%s) are the same file%s: writing %s would destroy %s; give %s another path",
                         p[i].key, p[i].role, p[j].key, p[j].role, how, p[i].role, p[j].role,
                         p[j].output ? "one of them" : p[i].key);
        }
    }
    free(id);
    return rc;
}

/* 1 when canonical path `c` lies inside folder `dir` (canonical, no trailing slash). */
static int inside(const char *c, const char *dir) {
    size_t n = strlen(dir);
    return !strncmp(c, dir, n) && c[n] == '/';
}

int dt_run_paths_check(const dt_train_cfg *c, const char *ckpt_path, const char *config_path, dt_err *err) {
    enum { MAXP = 12 };
    dt_run_path p[MAXP];
    char names[6][600], keys[MAXP][1300];
    int n = 0;
#define ADD(PATH, KEY, ROLE, OUT, GROUP)                                  \
    do {                                                                  \
        p[n] = (dt_run_path){(PATH), (KEY), (ROLE), (OUT), (GROUP)};      \
        n++;                                                              \
    } while (0)
    if (c->log[0]) {
        static const char *const tails[5] = {".log", "_steps.csv", "_epochs.csv", "_summary.txt", ".lock"};
        static const char *const roles[5] = {"the log", "the steps table", "the epochs table", "the run summary",
                                             "the run's lock file"};
        for (int i = 0; i < 5; i++) {
            snprintf(names[i], sizeof names[i], "%.511s%s", c->log, tails[i]);
            snprintf(keys[n], sizeof keys[n], "%.599s of log=%.511s", names[i], c->log);
            ADD(names[i], keys[n], roles[i], 1, 0);
        }
    }
    if (ckpt_path && ckpt_path[0]) {
        if (c->checkpoint[0]) snprintf(keys[n], sizeof keys[n], "checkpoint=%.511s", c->checkpoint);
        else snprintf(keys[n], sizeof keys[n], "the checkpoint %.600s", ckpt_path);
        ADD(ckpt_path, keys[n], "the run's checkpoint", 1, 1); /* resuming from it continues it: allowed */
        if (c->checkpoint[0]) {
            snprintf(names[5], sizeof names[5], "%.511s.lock", c->checkpoint);
            snprintf(keys[n], sizeof keys[n], "%.599s of checkpoint=%.511s", names[5], c->checkpoint);
            ADD(names[5], keys[n], "the checkpoint's lock file", 1, 0);
        }
    }
    if (c->export_path[0]) {
        snprintf(keys[n], sizeof keys[n], "export=%.511s", c->export_path);
        ADD(c->export_path, keys[n], "the export", 1, 0);
    }
    if (c->resume[0]) {
        snprintf(keys[n], sizeof keys[n], "resume=%.511s", c->resume);
        ADD(c->resume, keys[n], "the checkpoint this run resumes from", 0, 1);
    }
    if (c->init_from[0]) {
        snprintf(keys[n], sizeof keys[n], "init_from=%.511s", c->init_from);
        ADD(c->init_from, keys[n], "the weights this run starts from", 0, 0);
    }
    if (config_path && config_path[0]) {
        snprintf(keys[n], sizeof keys[n], "the config file %.600s", config_path);
        ADD(config_path, keys[n], "the run's config", 0, 0);
    }
#undef ADD
    if (dt_paths_check(p, n, err)) return -1;
    if (c->synthetic || !c->data[0]) return 0;
    /* an output inside the dataset would be read as one of its images, or replace one */
    char *root = realpath(c->data, NULL);
    if (!root) return 0; /* opening the dataset says what is wrong */
    int rc = 0;
    char *canon = dt_xmalloc(CANON_MAX), *dir = dt_xmalloc(CANON_MAX);
    for (int i = 0; i < n && !rc; i++) {
        if (!p[i].output) continue;
        canonical(p[i].path, canon, CANON_MAX);
        for (int s = 0; s < 2 && !rc; s++) {
            snprintf(dir, CANON_MAX, "%s/%s", root, s ? "val" : "train");
            char *real = realpath(dir, NULL); /* a split may itself be a link */
            if (real) snprintf(dir, CANON_MAX, "%s", real);
            free(real);
            if (inside(canon, dir))
                rc = dt_errf(err, "%s (%s) lies inside the dataset's %s/ (data=%s): the run would read it as an image, or "
                             "replace one; write it outside the dataset", p[i].key, p[i].role, s ? "val" : "train",
                             c->data);
        }
    }
    free(canon);
    free(dir);
    free(root);
    return rc;
}
