/* libFuzzer target: the dataset scan (dt_dataset_open, train then val) on a folder tree built
 * from the input in a temporary folder: folders, files, symlinks (to folders, files, "." and
 * "..", nowhere), hard links, FIFOs, folders without permissions, chains deeper than the scan
 * goes, names with odd bytes and image extensions. Then it checks what the scan promises:
 *
 *   - an error names the dataset (its message holds the root's path);
 *   - classes are sorted, distinct, not hidden, and each has at least one image;
 *   - labels are in range and grouped by class, the counts add up;
 *   - every listed path lies under ROOT/split/<its class>/, has an image extension, no hidden
 *     component, and is a regular file; no file (device and inode) is listed twice;
 *   - val has exactly the train classes.
 *
 * A hang (a link loop followed forever) is libFuzzer's -timeout. Links never point outside the
 * temporary folder, so the scan cannot wander off into the machine's own files.
 *
 * The input is a program of at most 64 operations; each takes an opcode byte and then
 * operand bytes (a missing byte reads as 0):
 *   op & 7:  0 mkdir, 1 file, 2 symlink, 3 hard link, 4 FIFO, 5 chmod 0 the parent,
 *            6 symlink up the tree, 7 a chain of nested folders
 *   parent:  one byte, an index into the folders made so far (ROOT, ROOT/train, ROOT/val and
 *            a folder beside ROOT at first)
 *   name:    one byte (extension: "", .jpg, .png, .JPEG, .bmp, .txt, .jpg; length 1 + (b >> 3) % 6)
 *            then one byte per character, from an alphabet with '.', spaces, control and
 *            non-ASCII bytes
 *   then per op: 2: a target byte (".", "..", a folder, a file or nowhere); 3: a file index;
 *            6: how many levels up; 7: the depth of the chain. */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dt_dataset.h"

#define MAX_OPS 64
#define MAX_ENT 160
#define PATHLEN 1024

static char g_base[PATHLEN]; /* made once, removed at exit */
static char g_tree[PATHLEN]; /* g_base/t: each input's tree, made and removed per input */

static void remove_base(void) { rmdir(g_base); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    dt_set_quiet(1); /* the scan's warnings, thousands a second */
    /* tmpfs when there is one: the tree is made and removed for every input */
    const char *shm = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL, *tmp = getenv("TMPDIR");
    snprintf(g_base, sizeof g_base, "%s/deftc-fuzz-dataset-XXXXXX", shm ? shm : tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_base)) {
        perror("fuzz_dataset: mkdtemp");
        abort();
    }
    atexit(remove_base);
    snprintf(g_tree, sizeof g_tree, "%s/t", g_base);
    return 0;
}

typedef struct {
    const uint8_t *p;
    size_t n, at;
} input;
static unsigned next(input *in) { return in->at < in->n ? in->p[in->at++] : 0; }

typedef struct {
    char path[PATHLEN];
    int depth; /* levels below g_tree */
} dir_ent;

static dir_ent g_dirs[MAX_ENT];
static char g_files[MAX_ENT][PATHLEN];
static int g_ndirs, g_nfiles;
static char g_locked[MAX_OPS][PATHLEN];
static int g_nlocked;

static void add_dir(const char *path, int depth) {
    if (g_ndirs == MAX_ENT) return;
    snprintf(g_dirs[g_ndirs].path, PATHLEN, "%s", path);
    g_dirs[g_ndirs++].depth = depth;
}

static void add_file(const char *path) {
    if (g_nfiles < MAX_ENT) snprintf(g_files[g_nfiles++], PATHLEN, "%s", path);
}

/* parent/name from the input; 0 when it would not fit. */
static int make_name(input *in, const dir_ent *parent, char *out) {
    static const char alphabet[] = "abcdeABCDExyz0123._-~ #%jpgPNbm\x01\x7f\xc3\xa9\xff\n\t";
    static const char *const ext[] = {"", ".jpg", ".png", ".JPEG", ".bmp", ".txt", ".jpg"};
    unsigned b = next(in);
    char name[16];
    int len = 1 + (int)((b >> 3) % 6);
    for (int i = 0; i < len; i++) name[i] = alphabet[next(in) % (sizeof alphabet - 1)];
    name[len] = 0;
    return snprintf(out, PATHLEN, "%s/%s%s", parent->path, name, ext[b % 7]) < PATHLEN;
}

static void build(const uint8_t *data, size_t size) {
    input in = {data, size, 0};
    g_ndirs = g_nfiles = g_nlocked = 0;
    char p[PATHLEN];
    mkdir(g_tree, 0755);
    const char *start[] = {"r", "r/train", "r/val", "out"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", g_tree, start[i]);
        mkdir(p, 0755);
        add_dir(p, i == 0 || i == 3 ? 1 : 2);
    }
    for (int op = 0; op < MAX_OPS && in.at < in.n; op++) {
        unsigned kind = next(&in) & 7;
        const dir_ent *parent = &g_dirs[next(&in) % (unsigned)g_ndirs];
        if (!make_name(&in, parent, p)) continue;
        switch (kind) {
        case 0:
            if (mkdir(p, 0755) == 0) add_dir(p, parent->depth + 1);
            break;
        case 1: {
            int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
            if (fd >= 0) close(fd), add_file(p);
            break;
        }
        case 2: {
            unsigned t = next(&in);
            const char *target = t % 4 == 0   ? "."
                                 : t % 4 == 1 ? ".."
                                 : t % 4 == 2 ? g_dirs[(t >> 2) % (unsigned)g_ndirs].path
                                 : g_nfiles   ? g_files[(t >> 2) % (unsigned)g_nfiles]
                                              : "nowhere";
            /* ".." from a folder right under the tree would leave it */
            if (!(t % 4 == 1 && parent->depth < 1)) (void)symlink(target, p);
            break;
        }
        case 3: {
            unsigned k = next(&in);
            if (g_nfiles && link(g_files[k % (unsigned)g_nfiles], p) == 0) add_file(p);
            break;
        }
        case 4:
            (void)mkfifo(p, 0644);
            break;
        case 5:
            if (g_nlocked < MAX_OPS && chmod(parent->path, 0) == 0)
                snprintf(g_locked[g_nlocked++], PATHLEN, "%s", parent->path);
            break;
        case 6: { /* "../../.." up to the tree itself, no further */
            int up = (int)(next(&in) % 6);
            if (up > parent->depth) up = parent->depth;
            char target[32] = ".";
            for (int i = 0; i < up; i++) strcpy(target + (i ? strlen(target) : 0), i ? "/.." : "..");
            (void)symlink(target, p);
            break;
        }
        case 7: { /* a chain of folders "d/d/d/...", deeper than the scan's 16 levels when long */
            int depth = 1 + (int)(next(&in) % 20);
            if (mkdir(p, 0755) != 0) break;
            char q[PATHLEN];
            snprintf(q, sizeof q, "%s", p);
            int d = 1;
            for (; d < depth && strlen(q) + 3 < sizeof q; d++) {
                strcat(q, "/d");
                if (mkdir(q, 0755) != 0) break;
            }
            add_dir(q, parent->depth + d);
            break;
        }
        }
    }
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) ? (perror(path), -1) : 0;
}

static void teardown(void) {
    for (int i = 0; i < g_nlocked; i++) chmod(g_locked[i], 0755);
    if (nftw(g_tree, remove_entry, 64, FTW_DEPTH | FTW_PHYS) != 0) abort(); /* a tree left behind spoils the next */
}

static void check(int ok, const char *what, const char *detail) {
    if (ok) return;
    fprintf(stderr, "fuzz_dataset: %s: %s\n", what, detail);
    abort();
}

typedef struct {
    uint64_t dev, ino;
} node;
static int cmp_node(const void *a, const void *b) {
    const node *x = a, *y = b;
    return x->dev != y->dev ? (x->dev < y->dev ? -1 : 1) : x->ino != y->ino ? (x->ino < y->ino ? -1 : 1) : 0;
}

static void check_split(const dt_dataset *ds, const char *root, int rc, const dt_err *err) {
    if (rc) {
        check(err->msg[0] != 0, "an error without a message", root);
        check(strstr(err->msg, root) != NULL, "an error that does not name the dataset", err->msg);
        return;
    }
    check(ds->num_classes >= 1 && ds->count >= ds->num_classes, "counts", ds->dir);
    int64_t sum = 0;
    for (int c = 0; c < ds->num_classes; c++) {
        check(ds->classes[c][0] != '.', "a hidden class", ds->classes[c]);
        check(c == 0 || strcmp(ds->classes[c - 1], ds->classes[c]) < 0, "classes not sorted or repeated", ds->classes[c]);
        check(ds->class_count[c] >= 1, "a class without images", ds->classes[c]);
        sum += ds->class_count[c];
    }
    check(sum == ds->count, "class counts do not add up", ds->dir);
    node *ids = malloc((size_t)ds->count * sizeof *ids);
    size_t dirlen = strlen(ds->dir);
    for (int64_t i = 0, first = 0; i < ds->count; i++) {
        const char *path = ds->paths[i];
        int32_t c = ds->labels[i];
        check(c >= 0 && c < ds->num_classes, "a label out of range", path);
        check(i == 0 || c >= ds->labels[i - 1], "labels not grouped by class", path);
        if (i > 0 && c != ds->labels[i - 1]) first = i;
        check(i - first < ds->class_count[c], "a class with more images than it counts", path);
        size_t cl = strlen(ds->classes[c]);
        check(!strncmp(path, ds->dir, dirlen) && path[dirlen] == '/' && !strncmp(path + dirlen + 1, ds->classes[c], cl) &&
                  path[dirlen + 1 + cl] == '/',
              "a path outside its class folder", path);
        check(!strstr(path + dirlen, "/."), "a hidden component", path);
        const char *base = strrchr(path, '/') + 1;
        check(dt_is_image_name(base), "a name without an image extension", path);
        struct stat st;
        check(stat(path, &st) == 0 && S_ISREG(st.st_mode), "not a regular file", path);
        ids[i] = (node){(uint64_t)st.st_dev, (uint64_t)st.st_ino};
    }
    qsort(ids, (size_t)ds->count, sizeof *ids, cmp_node);
    for (int64_t i = 1; i < ds->count; i++) check(cmp_node(&ids[i - 1], &ids[i]) != 0, "a file listed twice", ds->dir);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    build(data, size);
    char root[PATHLEN];
    snprintf(root, sizeof root, "%s/r", g_tree);
    dt_dataset tr, va;
    dt_err err = {{0}};
    int rc = dt_dataset_open(&tr, root, "train", NULL, &err);
    check_split(&tr, root, rc, &err);
    if (!rc) {
        dt_err verr = {{0}};
        int vrc = dt_dataset_open(&va, root, "val", &tr, &verr);
        check_split(&va, root, vrc, &verr);
        if (!vrc) {
            check(va.num_classes == tr.num_classes, "val classes differ from train's", va.dir);
            for (int c = 0; c < va.num_classes; c++)
                check(!strcmp(va.classes[c], tr.classes[c]), "a val class that is not train's", va.classes[c]);
            dt_dataset_close(&va);
        }
        dt_dataset_close(&tr);
    }
    teardown();
    return 0;
}
