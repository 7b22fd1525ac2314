#!/usr/bin/env python3
"""An ImageNet-shaped folder tree for the loader at scale (issue 37, docs/data.md "At ImageNet's scale"):

    python3 bench/imagenet_tree.py --out DIR [--classes 1000] [--train 1281167] [--val 50000]
                                   [--mkdata build/mkdata] [--size 64]

DIR/train/nXXXXXXXX/nXXXXXXXX_I.JPEG and DIR/val/nXXXXXXXX/ILSVRC2012_val_I.JPEG, ImageNet's counts
by default (1,281,167 training images in 1,000 class folders - 1,281 or 1,282 a class - and 50,000
validation images, 50 a class), its folder and file naming. Each file is its own inode (the scan
counts a hard-linked file once): a copy of one of a few hundred small JPEGs that build/mkdata makes
first (64 x 64 px, about 2 KB), so that the loader's first batch decodes real images. About
1.3 M x 4 KB of disk; the tree is made once and reused (an existing DIR/train is kept).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def templates(mkdata, size):
    """The bytes of the JPEGs build/mkdata makes (12 classes x 40 images)."""
    tmp = tempfile.mkdtemp(prefix="imagenet-tree-")
    subprocess.run([mkdata, "--out", tmp + "/d", "--classes", "12", "--train", "40", "--val", "0",
                    "--size", str(size), "--quiet"], check=True)
    out = []
    for root, _, files in os.walk(tmp + "/d/train"):
        for f in sorted(files):
            with open(os.path.join(root, f), "rb") as fh:
                out.append(fh.read())
    subprocess.run(["rm", "-rf", tmp], check=True)
    return out


def write_split(base, classes, total, name_of, blobs):
    """total files over `classes` folders, as evenly as ImageNet's (the first total % classes get one more)."""
    per, extra = divmod(total, classes)
    k = 0
    for c in range(classes):
        wnid = "n%08d" % (1440764 + 997 * c)  # ImageNet-like folder names, sorted like the real ones
        d = os.path.join(base, wnid)
        os.makedirs(d, exist_ok=True)
        for i in range(per + (1 if c < extra else 0)):
            with open(os.path.join(d, name_of(wnid, k)), "wb") as fh:
                fh.write(blobs[k % len(blobs)])
            k += 1
    return k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--train", type=int, default=1281167)
    ap.add_argument("--val", type=int, default=50000)
    ap.add_argument("--mkdata", default="build/mkdata")
    ap.add_argument("--size", type=int, default=64)
    a = ap.parse_args()
    if a.classes < 1 or a.train < a.classes or (a.val and a.val < a.classes):
        sys.exit("imagenet_tree: every class needs at least one image in each split")
    if os.path.isdir(os.path.join(a.out, "train")):
        print("imagenet_tree: %s/train exists: kept (remove it to make another)" % a.out)
        return
    blobs = templates(a.mkdata, a.size)
    t0 = time.time()
    n = write_split(os.path.join(a.out, "train"), a.classes, a.train, lambda w, k: "%s_%d.JPEG" % (w, k), blobs)
    m = write_split(os.path.join(a.out, "val"), a.classes, a.val,
                    lambda w, k: "ILSVRC2012_val_%08d.JPEG" % (k + 1), blobs) if a.val else 0
    print("imagenet_tree: %d training and %d validation files in %d classes under %s, made in %.1f s"
          % (n, m, a.classes, a.out, time.time() - t0))


if __name__ == "__main__":
    main()
