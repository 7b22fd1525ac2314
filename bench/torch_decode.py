"""The yardstick for the loader's GPU decode (docs/data.md, "GPU decode"): torchvision's
decode_jpeg(device='cuda') - nvJPEG's batched decoder behind PyTorch - on the same files, in
batches, timed after a warm-up batch, files read into memory first (decode alone, no resize).

    python3 bench/torch_decode.py DIR [--batch 256] [--max-batches N]

DIR is a dataset root (DIR/train/<class>/*.jpg, build/mkdata makes one)."""
import argparse, glob, os, time

import torch
import torchvision
from torchvision.io import decode_jpeg, read_file


def main():
    p = argparse.ArgumentParser()
    p.add_argument('root')
    p.add_argument('--batch', type=int, default=256)
    p.add_argument('--max-batches', type=int, default=0)
    a = p.parse_args()
    files = sorted(glob.glob(os.path.join(a.root, 'train', '*', '*.jpg')))
    if a.max_batches:
        files = files[:(a.max_batches + 1) * a.batch]
    data = [read_file(f) for f in files]
    nb = len(data) // a.batch
    if nb < 2:
        raise SystemExit(f'torch_decode: {len(data)} files: fewer than 2 batches of {a.batch}')
    torch.cuda.synchronize()
    t0 = None
    for b in range(nb):
        if b == 1:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        out = decode_jpeg(data[b * a.batch:(b + 1) * a.batch], device='cuda')
    torch.cuda.synchronize()
    s = time.perf_counter() - t0
    n = (nb - 1) * a.batch
    print(f'torchvision {torchvision.__version__} decode_jpeg(device=cuda), batch {a.batch}: {n} images in {s:.3f} s '
          f'= {n / s:.0f} images/s ({out[0].shape[1]}x{out[0].shape[2]})')


if __name__ == '__main__':
    main()
