#include "data/dt_dataset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_DEPTH 16

/* ---- a string arena addressed by offsets (it moves while it grows) ---- */
typedef struct {
    char *buf;
    size_t len, cap;
} arena;

static void arena_put(arena *a, const void *s, size_t n) {
    if (!n) return; /* an empty arena has no buffer to copy into */
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1 << 16;
        while (cap < a->len + n) cap *= 2;
        a->buf = dt_xrealloc(a->buf, cap);
        a->cap = cap;
    }
    memcpy(a->buf + a->len, s, n);
    a->len += n;
}

/* Appends the concatenation of the pieces (NULL-terminated list) and a NUL; returns the
 * offset of the new string. */
static size_t arena_cat(arena *a, const char *p0, const char *p1, const char *p2, const char *p3,
                        const char *p4) {
    const char *p[5] = {p0, p1, p2, p3, p4};
    size_t off = a->len;
    for (int i = 0; i < 5 && p[i]; i++) arena_put(a, p[i], strlen(p[i]));
    arena_put(a, "", 1);
    return off;
}

static size_t arena_add(arena *a, const char *s) { return arena_cat(a, s, NULL, NULL, NULL, NULL); }

/* A vector of offsets into an arena. */
typedef struct {
    size_t *v;
    int64_t n, cap;
} offvec;

static void offvec_push(offvec *o, size_t x) {
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 256;
        o->v = dt_xrealloc(o->v, (size_t)o->cap * sizeof *o->v);
    }
    o->v[o->n++] = x;
}

/* qsort has no context argument in C11; sorting runs on the calling thread. */
static __thread const char *t_sort_base;
static int cmp_off(const void *a, const void *b) {
    return strcmp(t_sort_base + *(const size_t *)a, t_sort_base + *(const size_t *)b);
}

int dt_is_image_name(const char *name) {
    static const char *const exts[] = {"jpg", "jpeg", "png", "bmp"};
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 0;
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++)
        if (!strcasecmp(dot + 1, exts[i])) return 1;
    return 0;
}

/* ---- identities of files and folders: (device, inode) ---- */

typedef struct {
    uint64_t dev, ino;
} node_id;

/* An open-addressing set of node ids; (0, 0) marks an empty slot (inode 0 does not exist). */
typedef struct {
    node_id *slot;
    size_t cap, n; /* cap: a power of two, at most half full */
} id_set;

static size_t id_hash(node_id id) {
    uint64_t h = id.ino * 0x9E3779B97F4A7C15ULL ^ id.dev * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)(h ^ (h >> 29));
}

/* Adds id; 1 if it was new, 0 if it was there already. */
static int id_set_add(id_set *s, node_id id) {
    if (2 * (s->n + 1) > s->cap) {
        id_set g = {dt_xcalloc(s->cap ? 2 * s->cap : 1024, sizeof(node_id)), s->cap ? 2 * s->cap : 1024, 0};
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i].dev || s->slot[i].ino) id_set_add(&g, s->slot[i]);
        free(s->slot);
        *s = g;
    }
    for (size_t i = id_hash(id) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        node_id *x = &s->slot[i];
        if (x->dev == id.dev && x->ino == id.ino) return 0;
        if (!x->dev && !x->ino) {
            *x = id;
            s->n++;
            return 1;
        }
    }
}

/* What a scan of one split has seen: every folder entered and every file counted, so that a
 * symlink loop or a second path to the same folder or file adds nothing; and the entries it
 * did not use though they look like data, each named in a warning (the first MAX_NAMED). */
#define MAX_NAMED 10
typedef struct {
    id_set dirs, files;
    int64_t dup_dirs, dup_files;
    char dup_example[1024]; /* the first path skipped, for the warning */
    int64_t skipped, notes; /* entries not used; warnings printed */
} scan_state;

/* A warning about one entry, printed for the first MAX_NAMED of a split (the rest counted in
 * one line at the end); `skip`: the entry is not used. */
static void note(scan_state *st, int skip, const char *fmt, ...) DT_PRINTF(3, 4);
static void note(scan_state *st, int skip, const char *fmt, ...) {
    st->skipped += skip;
    if (st->notes++ >= MAX_NAMED) return;
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    dt_warn("%s", buf);
}

static void note_dup(scan_state *st, const char *fmt, ...) DT_PRINTF(2, 3);
static void note_dup(scan_state *st, const char *fmt, ...) {
    if (st->dup_example[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->dup_example, sizeof st->dup_example, fmt, ap);
    va_end(ap);
}

/* Entry kind from readdir, resolving symlinks, folders and unknown types with one fstatat;
 * *id is the entry's identity (for a regular file from d_ino, no system call). K_OTHER (a
 * FIFO, socket or device) and K_BROKEN (a symlink to nothing, or one that cannot be
 * followed) say what in *what. */
enum { K_OTHER, K_FILE, K_DIR, K_BROKEN };
static const char *kind_name(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    return S_ISBLK(m) ? "a block device" : "not a regular file";
}
static int entry_kind(DIR *d, uint64_t dir_dev, const struct dirent *e, node_id *id, const char **what) {
#ifdef _DIRENT_HAVE_D_TYPE
    if (e->d_type == DT_REG) {
        *id = (node_id){dir_dev, e->d_ino};
        return K_FILE;
    }
    if (e->d_type != DT_DIR && e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) {
        *what = kind_name(DTTOIF(e->d_type));
        return K_OTHER;
    }
#endif
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) {
        *what = strerror(errno); /* ENOENT: a dangling link; ELOOP: a link to itself */
        return K_BROKEN;
    }
    *id = (node_id){(uint64_t)st.st_dev, (uint64_t)st.st_ino};
    if (S_ISREG(st.st_mode)) return K_FILE;
    if (S_ISDIR(st.st_mode)) return K_DIR;
    *what = kind_name(st.st_mode);
    return K_OTHER;
}

/* readdir, telling the end of the folder (NULL, errno untouched) from a failure (NULL,
 * errno set: an I/O error on the folder). */
static struct dirent *next_entry(DIR *d) {
    errno = 0;
    return readdir(d);
}

/* Files of one class folder, walked like os.walk(followlinks=True) but entering each folder
 * once: dirs holds the relative sub-folder paths ("" = the class folder itself), files (dir
 * index, name, identity). */
typedef struct {
    int32_t dir_rank;
    size_t name;
    node_id id;
} file_ent;
static __thread const char *t_walk_base;
static int cmp_file(const void *a, const void *b) {
    const file_ent *x = a, *y = b;
    if (x->dir_rank != y->dir_rank) return x->dir_rank < y->dir_rank ? -1 : 1;
    return strcmp(t_walk_base + x->name, t_walk_base + y->name);
}

static int cmp_name_only(const void *a, const void *b) {
    return strcmp(t_walk_base + ((const file_ent *)a)->name, t_walk_base + ((const file_ent *)b)->name);
}

/* Appends the class folder's image paths to (out, paths) and sets *kept to their number.
 * Folders are entered breadth-first, the sub-folders of each in name order, and only when not
 * seen before in this split (st->dirs, which starts with the split folder and every class
 * folder): a symlink loop, or a second path to a folder, is not followed. A file already
 * counted (same device and inode: another symlink or hard link to it) is not counted again.
 * A folder that cannot be read is an error (its images would be missing without a word);
 * entries named like images that are not regular files, and links to nothing, are warnings. */
/* A class folder's walk in progress: the relative paths of the folders found (dirs, in tmp;
 * depth[i] the nesting of dirs[i]), the image files found (their folder's index and name), and
 * the sub-folders of the folder being read (kids). */
typedef struct {
    arena tmp;
    offvec dirs;
    int32_t *depth;
    file_ent *files, *kids;
    int64_t nfiles, capfiles, nkids, capkids;
} class_walk;

static void walk_add_file(class_walk *w, int64_t di, const char *name, node_id id) {
    if (w->nfiles == w->capfiles) {
        w->capfiles = w->capfiles ? w->capfiles * 2 : 1024;
        w->files = dt_xrealloc(w->files, (size_t)w->capfiles * sizeof *w->files);
    }
    w->files[w->nfiles++] = (file_ent){(int32_t)di, arena_add(&w->tmp, name), id};
}

static void walk_add_kid(class_walk *w, const char *name, node_id id) {
    if (w->nkids == w->capkids) {
        w->capkids = w->capkids ? w->capkids * 2 : 64;
        w->kids = dt_xrealloc(w->kids, (size_t)w->capkids * sizeof *w->kids);
    }
    w->kids[w->nkids++] = (file_ent){0, arena_add(&w->tmp, name), id};
}

/* The entries of open folder d (full: its path): image files into w->files, sub-folders into
 * w->kids, warnings for what is skipped. */
static int read_entries(class_walk *w, int64_t di, DIR *d, const struct stat *dst, const char *full, scan_state *st,
                        dt_err *err) {
    struct dirent *e;
    w->nkids = 0;
    while ((e = next_entry(d))) {
        if (e->d_name[0] == '.') continue; /* ".", "..", hidden */
#ifdef _DIRENT_HAVE_D_TYPE
        /* Fast path: a regular file with a non-image name needs no further look. */
        if (e->d_type == DT_REG && !dt_is_image_name(e->d_name)) continue;
#endif
        node_id id = {0, 0};
        const char *what = "";
        int k = entry_kind(d, (uint64_t)dst->st_dev, e, &id, &what);
        int image = dt_is_image_name(e->d_name);
        if (k == K_FILE && image) {
            walk_add_file(w, di, e->d_name, id);
            continue;
        }
        if (k == K_BROKEN) note(st, 1, "%s/%s: a link that cannot be followed (%s): skipped", full, e->d_name, what);
        if (k == K_OTHER && image) note(st, 1, "%s/%s is %s, not an image file: skipped", full, e->d_name, what);
        if (k != K_DIR) continue;
        if (image) note(st, 0, "%s/%s is a folder named like an image: walked as a sub-folder", full, e->d_name);
        walk_add_kid(w, e->d_name, id);
    }
    if (errno) return dt_errf(err, "cannot read folder %s: %s", full, strerror(errno));
    return 0;
}

/* Queues the sub-folders just read (in name order, so which of two paths to a folder wins
 * does not depend on the order readdir returns them in) that are new and not too deep. */
static void queue_kids(class_walk *w, const char *rel, int dep, const char *full, scan_state *st) {
    t_walk_base = w->tmp.buf;
    if (w->nkids) qsort(w->kids, (size_t)w->nkids, sizeof *w->kids, cmp_name_only);
    for (int64_t i = 0; i < w->nkids; i++) {
        const char *name = w->tmp.buf + w->kids[i].name;
        if (!id_set_add(&st->dirs, w->kids[i].id)) {
            st->dup_dirs++;
            note_dup(st, "%s/%s", full, name);
            continue;
        }
        if (dep + 1 > MAX_DEPTH) {
            note(st, 1, "%s/%s: folders nested deeper than %d levels are not scanned", full, name, MAX_DEPTH);
            continue;
        }
        char *kid = dt_xstrdup(name); /* tmp moves while it grows */
        size_t off = *rel ? arena_cat(&w->tmp, rel, "/", kid, NULL, NULL) : arena_add(&w->tmp, kid);
        free(kid);
        offvec_push(&w->dirs, off);
        w->depth = dt_xrealloc(w->depth, (size_t)w->dirs.cap * sizeof *w->depth);
        w->depth[w->dirs.n - 1] = dep + 1;
    }
}

/* Reads folder di of the walk: its images, and its sub-folders queued. */
static int walk_folder(class_walk *w, int64_t di, const char *class_dir, scan_state *st, dt_err *err) {
    /* tmp may move: copy the relative path out before adding entries. */
    char *rel = dt_xstrdup(w->tmp.buf + w->dirs.v[di]);
    int dep = w->depth[di], rc = 0;
    char *full = dt_xmalloc(strlen(class_dir) + strlen(rel) + 2);
    sprintf(full, "%s%s%s", class_dir, *rel ? "/" : "", rel);
    DIR *d = opendir(full);
    struct stat dst;
    if (d && fstat(dirfd(d), &dst) != 0) {
        closedir(d);
        d = NULL;
    }
    if (!d) {
        rc = dt_errf(err, "cannot read %s folder %s: %s (its images would be missing from training)",
                     *rel ? "the" : "class", full, strerror(errno));
    } else {
        rc = read_entries(w, di, d, &dst, full, st, err);
        closedir(d);
        queue_kids(w, rel, dep, full, st);
    }
    free(full);
    free(rel);
    return rc;
}

/* Directories in sorted relative-path order (the class folder, "", first); each file's dir
 * index becomes its directory's rank. */
static void sort_dirs(class_walk *w) {
    if (w->dirs.n <= 1) return;
    file_ent *order = dt_xmalloc((size_t)w->dirs.n * sizeof *order);
    for (int64_t i = 0; i < w->dirs.n; i++) order[i] = (file_ent){(int32_t)i, w->dirs.v[i], {0, 0}};
    t_walk_base = w->tmp.buf;
    qsort(order, (size_t)w->dirs.n, sizeof *order, cmp_name_only);
    int32_t *rank = dt_xmalloc((size_t)w->dirs.n * sizeof *rank);
    for (int64_t r = 0; r < w->dirs.n; r++) {
        rank[order[r].dir_rank] = (int32_t)r;
        w->dirs.v[r] = order[r].name;
    }
    for (int64_t f = 0; f < w->nfiles; f++) w->files[f].dir_rank = rank[w->files[f].dir_rank];
    free(order);
    free(rank);
}

/* Appends the class folder's image paths to (out, paths) and sets *kept_out to their number.
 * Folders are entered breadth-first, the sub-folders of each in name order, and only when not
 * seen before in this split (st->dirs, which starts with the split folder and every class
 * folder): a symlink loop, or a second path to a folder, is not followed. A file already
 * counted (same device and inode: another symlink or hard link to it) is not counted again.
 * A folder that cannot be read is an error (its images would be missing without a word);
 * entries named like images that are not regular files, and links to nothing, are warnings. */
static int scan_class(const char *class_dir, scan_state *st, arena *out, offvec *paths, int64_t *kept_out,
                      dt_err *err) {
    class_walk w = {0};
    int rc = 0;
    offvec_push(&w.dirs, arena_add(&w.tmp, ""));
    w.depth = dt_xrealloc(w.depth, sizeof *w.depth);
    w.depth[0] = 0;
    for (int64_t di = 0; di < w.dirs.n && !rc; di++) rc = walk_folder(&w, di, class_dir, st, err);
    sort_dirs(&w);
    t_walk_base = w.tmp.buf;
    if (w.nfiles) qsort(w.files, (size_t)w.nfiles, sizeof *w.files, cmp_file);
    int64_t kept = 0;
    for (int64_t f = 0; f < w.nfiles && !rc; f++) {
        const char *rel = w.tmp.buf + w.dirs.v[w.files[f].dir_rank], *name = w.tmp.buf + w.files[f].name;
        if (!id_set_add(&st->files, w.files[f].id)) { /* in sorted order: the first path wins */
            st->dup_files++;
            note_dup(st, "%s/%s%s%s", class_dir, rel, *rel ? "/" : "", name);
            continue;
        }
        size_t off = *rel ? arena_cat(out, class_dir, "/", rel, "/", name) : arena_cat(out, class_dir, "/", name, NULL, NULL);
        offvec_push(paths, off);
        kept++;
    }
    free(w.files);
    free(w.depth);
    free(w.dirs.v);
    free(w.kids);
    free(w.tmp.buf);
    *kept_out = kept;
    return rc;
}

/* Sorted class folder names of `dir` (offsets into a); the split folder and every class
 * folder go into st->dirs first, so that no class walks into another one or back up. */
static int list_classes(const char *dir, scan_state *st, arena *a, offvec *names, dt_err *err) {
    DIR *d = opendir(dir);
    struct stat dst;
    if (d && fstat(dirfd(d), &dst) != 0) {
        closedir(d);
        d = NULL;
    }
    if (!d) return dt_errf(err, "cannot open dataset folder %s: %s", dir, strerror(errno));
    id_set_add(&st->dirs, (node_id){(uint64_t)dst.st_dev, (uint64_t)dst.st_ino});
    struct dirent *e;
    while ((e = next_entry(d))) {
        node_id id;
        const char *what = "";
        if (e->d_name[0] == '.') continue;
        int k = entry_kind(d, (uint64_t)dst.st_dev, e, &id, &what);
        /* a class folder whose link points nowhere would vanish, with every image in it */
        if (k == K_BROKEN) note(st, 1, "%s/%s: a link that cannot be followed (%s): not a class folder", dir, e->d_name, what);
        if (k != K_DIR && k != K_BROKEN && dt_is_image_name(e->d_name))
            note(st, 1, "%s/%s: an image outside the class folders is not used (images go in %s/<class>/)", dir,
                 e->d_name, dir);
        if (k != K_DIR) continue;
        id_set_add(&st->dirs, id);
        offvec_push(names, arena_add(a, e->d_name));
    }
    int bad = errno;
    closedir(d);
    if (bad) return dt_errf(err, "cannot read dataset folder %s: %s", dir, strerror(bad));
    t_sort_base = a->buf;
    if (names->n) qsort(names->v, (size_t)names->n, sizeof *names->v, cmp_off);
    return 0;
}

/* "a, b, c" (at most `max` names, then "and N more") appended to buf. */
static void append_names(char *buf, size_t cap, const char *const *names, int n, int max) {
    size_t len = strlen(buf);
    for (int i = 0; i < n && i < max; i++)
        len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s%s", i ? ", " : "", names[i]);
    if (n > max && len < cap) snprintf(buf + len, cap - len, " and %d more", n - max);
}

static int compare_classes(const dt_dataset *ds, const dt_dataset *ref, dt_err *err) {
    const char **missing = dt_xmalloc((size_t)ref->num_classes * sizeof(char *) + 1);
    const char **extra = dt_xmalloc((size_t)ds->num_classes * sizeof(char *) + 1);
    int nm = 0, ne = 0, i = 0, j = 0;
    while (i < ref->num_classes || j < ds->num_classes) {
        int c = i == ref->num_classes ? 1 : j == ds->num_classes ? -1 : strcmp(ref->classes[i], ds->classes[j]);
        if (c == 0) i++, j++;
        else if (c < 0) missing[nm++] = ref->classes[i++];
        else extra[ne++] = ds->classes[j++];
    }
    int rc = 0;
    if (nm || ne) {
        char m[400] = "", x[400] = "";
        append_names(m, sizeof m, missing, nm, 8);
        append_names(x, sizeof x, extra, ne, 8);
        rc = dt_errf(err, "class folders of %s differ from those of %s: %s%s%s%s%s", ds->dir, ref->dir,
                     nm ? "missing in " : "", nm ? ds->split : "", nm ? ": " : "", m, nm && ne ? "; " : "");
        if (ne && err) {
            size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len, "extra in %s: %s", ds->split, x);
        }
    }
    free(missing);
    free(extra);
    return rc;
}

/* root/split, checked to be a folder (*dir_out: malloc'ed). */
static int split_folder(const char *root, const char *split, char **dir_out, dt_err *err) {
    struct stat st;
    if (stat(root, &st) != 0) return dt_errf(err, "dataset folder %s: %s", root, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return dt_errf(err, "dataset folder %s is not a folder", root);
    char *dir = dt_xmalloc(strlen(root) + strlen(split) + 2);
    sprintf(dir, "%s/%s", root, split);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        int rc = dt_errf(err, "dataset folder %s has no %s/ folder (expected %s/<class>/<image>)", root, split, dir);
        free(dir);
        return rc;
    }
    *dir_out = dir;
    return 0;
}

/* Scans every class folder of dir (names: the class names, at offsets cls) into (out, paths),
 * class c's images from first[c]; says what was skipped or reached twice, and refuses a class
 * without images. */
static int scan_classes(dt_dataset *ds, const char *dir, scan_state *scan, const arena *names, const offvec *cls,
                        arena *out, offvec *paths, int64_t *first, dt_err *err) {
    int rc = 0;
    /* classes without an image: their names, and whether links to what another class holds
     * were all they had */
    const char **empty = dt_xmalloc((size_t)ds->num_classes * sizeof *empty);
    int nempty = 0, empty_linked = 0;
    for (int c = 0; c < ds->num_classes && !rc; c++) {
        first[c] = paths->n;
        const char *name = names->buf + cls->v[c];
        char *class_dir = dt_xmalloc(strlen(dir) + strlen(name) + 2);
        sprintf(class_dir, "%s/%s", dir, name);
        int64_t dups = scan->dup_dirs + scan->dup_files;
        rc = scan_class(class_dir, scan, out, paths, &ds->class_count[c], err);
        if (!rc && ds->class_count[c] == 0) {
            empty[nempty++] = name;
            empty_linked += scan->dup_dirs + scan->dup_files > dups;
        }
        free(class_dir);
    }
    first[ds->num_classes] = paths->n;
    if (!rc && scan->notes > MAX_NAMED)
        dt_warn("%s: %lld more entries like those above (%lld entries not used in all)", dir,
                (long long)(scan->notes - MAX_NAMED), (long long)scan->skipped);
    if (!rc && (scan->dup_dirs || scan->dup_files))
        dt_warn("%s: %lld folder%s and %lld file%s reached again by another path (symlinks, hard links) were not "
                "counted twice (first: %s)",
                dir, (long long)scan->dup_dirs, scan->dup_dirs == 1 ? "" : "s", (long long)scan->dup_files,
                scan->dup_files == 1 ? "" : "s", scan->dup_example);
    /* A class without images is an error, as in torchvision's ImageFolder: training would
     * never see it (its logit is never trained) and its val images could never be right. */
    if (!rc && paths->n == 0)
        rc = dt_errf(err,
                     "no images in %s: %d class folder%s, all empty (images need an extension deftc decodes: jpg jpeg "
                     "png bmp)",
                     dir, ds->num_classes, ds->num_classes == 1 ? "" : "s");
    else if (!rc && nempty) {
        char list[600] = "";
        append_names(list, sizeof list, empty, nempty, 8);
        rc = dt_errf(err,
                     "%d class folder%s of %s without images: %s (every class needs at least one image with an "
                     "extension deftc decodes: jpg jpeg png bmp%s)",
                     nempty, nempty == 1 ? "" : "s", dir, list,
                     empty_linked ? "; what some of them hold is already counted under another class, through links"
                                  : "");
    }
    free(empty);
    return rc;
}

/* The scan's result into ds: the arena becomes final, so offsets turn into pointers. */
static void fill_index(dt_dataset *ds, const scan_state *scan, arena *out, offvec *cls, offvec *paths,
                       const int64_t *first) {
    ds->dup_dirs = scan->dup_dirs;
    ds->dup_files = scan->dup_files;
    ds->skipped = scan->skipped;
    ds->count = paths->n;
    ds->arena_ = out->buf;
    for (int c = 0; c < ds->num_classes; c++) ds->classes[c] = out->buf + cls->v[c];
    ds->paths = dt_xmalloc((size_t)paths->n * sizeof(char *));
    ds->labels = dt_xmalloc((size_t)paths->n * sizeof(int32_t));
    for (int c = 0; c < ds->num_classes; c++)
        for (int64_t i = first[c]; i < first[c + 1]; i++) {
            ds->paths[i] = out->buf + paths->v[i];
            ds->labels[i] = c;
        }
}

int dt_dataset_open(dt_dataset *ds, const char *root, const char *split, const dt_dataset *classes_from,
                    dt_err *err) {
    memset(ds, 0, sizeof *ds);
    char *dir = NULL;
    int rc = split_folder(root, split, &dir, err);
    if (rc) return rc;
    arena names = {0};
    offvec cls = {0};
    scan_state scan;
    memset(&scan, 0, sizeof scan);
    rc = list_classes(dir, &scan, &names, &cls, err);
    if (!rc && cls.n == 0) rc = dt_errf(err, "no class folders in %s (expected %s/<class>/<image>)", dir, dir);
    if (rc) {
        free(dir);
        free(names.buf);
        free(cls.v);
        free(scan.dirs.slot);
        return rc;
    }
    if (cls.n > INT32_MAX) dt_fatal("%s: too many classes", dir);
    ds->root = dt_xstrdup(root);
    ds->split = dt_xstrdup(split);
    ds->dir = dir;
    ds->num_classes = (int)cls.n;
    ds->classes = dt_xmalloc((size_t)cls.n * sizeof(char *));
    for (int c = 0; c < ds->num_classes; c++) ds->classes[c] = names.buf + cls.v[c];
    if (classes_from && compare_classes(ds, classes_from, err) != 0) {
        free(ds->classes);
        ds->classes = NULL;
        free(names.buf);
        free(cls.v);
        free(scan.dirs.slot);
        dt_dataset_close(ds);
        return -1;
    }

    arena out = {0};
    offvec paths = {0};
    arena_put(&out, names.buf, names.len); /* class names first, at the same offsets */
    ds->class_count = dt_xcalloc((size_t)ds->num_classes, sizeof *ds->class_count);
    int64_t *first = dt_xmalloc(((size_t)ds->num_classes + 1) * sizeof *first);
    rc = scan_classes(ds, dir, &scan, &names, &cls, &out, &paths, first, err);
    free(names.buf);
    free(scan.dirs.slot);
    free(scan.files.slot);
    if (rc) {
        free(first);
        free(paths.v);
        free(out.buf);
        free(cls.v);
        dt_dataset_close(ds);
        return rc;
    }
    fill_index(ds, &scan, &out, &cls, &paths, first);
    free(cls.v);
    free(first);
    free(paths.v);
    return 0;
}

void dt_dataset_close(dt_dataset *ds) {
    free(ds->root);
    free(ds->split);
    free(ds->dir);
    free(ds->classes);
    free(ds->paths);
    free(ds->labels);
    free(ds->class_count);
    free(ds->arena_);
    memset(ds, 0, sizeof *ds);
}
