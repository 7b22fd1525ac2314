/* dt_dataset.h: an image-classification dataset in torchvision ImageFolder layout.
 *
 *   ROOT/train/<class>/<image>     ROOT/val/<class>/<image>
 *
 * Classes are the folder names under ROOT/<split>, sorted bytewise (strcmp, which is Python's
 * sorted() on names); a class's label is its index in that list. Names are compared whole,
 * so "cat" and "cats" are two classes. The val split must have exactly the train classes
 * (dt_dataset_open with classes_from = the train set checks it and names the differences).
 *
 * Images: files named *.jpg, *.jpeg, *.png, *.bmp (any case), the formats deftc decodes; other
 * files and hidden entries (".*") are ignored. Like ImageFolder,
 * a class folder is walked recursively (following symlinks, 16 levels at most), and files
 * are ordered by (directory path, file name). Unlike ImageFolder, every folder is entered
 * and every file counted once per split, by device and inode: a symlink loop (`ln -s .
 * loop`), a link up into the split or into another class, or two links to one folder add
 * nothing (the first path wins: breadth-first, names in order; the files' sorted order for
 * files); one warning counts what was skipped.
 *
 * Nothing is lost without a word: a folder of the tree that cannot be read is an error, and so
 * is a class folder without images (as in torchvision); an entry named like an image that is
 * not a regular file (a FIFO, a device), a link that cannot be followed, an image directly in
 * the split folder or a folder named like an image is a warning naming it (the first 10 of a
 * split, then a count). Scanning reads directories only (readdir, d_type and d_ino; stat only
 * for folders, symlinks and entries whose type the file system does not report): no file is
 * opened, so 1.28M ImageNet files scan in seconds.
 */
#ifndef DT_DATASET_H
#define DT_DATASET_H

#include "core/dt_api.h"

#include <stdint.h>

#include "core/dt_common.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    char *root;         /* ROOT as given */
    char *split;        /* "train", "val", ... */
    char *dir;          /* ROOT/split */
    int num_classes;
    char **classes;     /* [num_classes] folder names, sorted */
    int64_t count;      /* number of images */
    char **paths;       /* [count] full paths ROOT/split/<class>/..., grouped by class */
    int32_t *labels;    /* [count] class index of each image */
    int64_t *class_count; /* [num_classes] images per class, each at least 1 */
    int64_t skipped;    /* entries not used, warned: not regular files, links to nothing, too deep, outside classes */
    int64_t dup_dirs;   /* folders reached again by another path (a symlink loop, two links to one folder): not entered again */
    int64_t dup_files;  /* files reached again (symlinks, hard links: same device and inode): counted once */
    char *arena_;       /* storage of the strings above */
} dt_dataset;

/* True when `name` has an image extension deftc decodes (case-insensitive). */
int dt_is_image_name(const char *name);

/* Scans ROOT/split. classes_from: NULL for the training split (classes are found); for val
 * pass the opened train set: the class folders must match exactly and labels are the train
 * indices. Returns 0, or -1 with err naming the folder (missing folder, a folder that cannot be
 * read, no class folders, a class folder without images, class folders differing from
 * classes_from). */
int dt_dataset_open(dt_dataset *ds, const char *root, const char *split, const dt_dataset *classes_from,
                    dt_err *err);
void dt_dataset_close(dt_dataset *ds);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
