"""PyTorch's (cuDNN's) side of `build/bench --what depthwise`: the same depthwise convs timed
with torch.nn.functional.conv1d / conv2d (groups = C), run in the same device call so that both
are measured on one GPU. deftc never imports it; it needs torch on a CUDA machine.

  python3 bench/torch_depthwise.py [--batch 256] [--reps 30] [--warmup 5] [--precision fp32,bf16]

1-D (issue 38's grid, the JAX user's): batch 32, output length 1024, kernel 1/4/16/64, channels
32/128/512, dilation 1, 2, ..., 128, stride 1, no padding: input [32, C, 1024 + (k-1) d].
2-D: MobileNetV2's depthwise 3x3s at 224 input (pad 1, stride 1 and 2), batch --batch, in
channels_last memory format (as a bf16 MobileNet runs). fp32 with TF32 off; bf16 tensors (cuDNN's
bf16 kernels, no cast in the timed region). fwd alone and fwd + backward (input and weight
gradients, bias-free); `--warmup` calls, then `--reps` calls each between two CUDA events, the
median in ms. One line a point, which `build/bench --what depthwise --torch FILE` reads:

  dw1d PREC k C d fwd_ms fb_ms
  dw2d PREC name fwd_ms fb_ms        (name as build/bench prints it, spaces as underscores)
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def median_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def time_conv(conv, x, w, gy, kw, warmup, reps):
    """(fwd ms, fwd + bwd ms) of conv(x, w, **kw)"""
    x = x.detach().requires_grad_(True)
    w = w.detach().requires_grad_(True)

    def fwd():
        with torch.no_grad():
            conv(x, w, **kw)

    def fb():
        x.grad = w.grad = None
        conv(x, w, **kw).backward(gy)

    return median_ms(fwd, warmup, reps), median_ms(fb, warmup, reps)


MOBILENET_V2 = [("112 C 32 s1", 32, 112, 1), ("112 C 96 s2", 96, 112, 2), ("56 C 144 s1", 144, 56, 1),
                ("56 C 144 s2", 144, 56, 2), ("28 C 192 s1", 192, 28, 1), ("28 C 192 s2", 192, 28, 2),
                ("14 C 384 s1", 384, 14, 1), ("14 C 576 s1", 576, 14, 1), ("14 C 576 s2", 576, 14, 2),
                ("7 C 960 s1", 960, 7, 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256, help="the 2-D shapes' batch (the 1-D grid's is 32)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", default="fp32,bf16")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"# torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    for prec in a.precision.split(","):
        dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[prec]
        for k in (1, 4, 16, 64):
            for c in (32, 128, 512):
                for d in (1, 2, 4, 8, 16, 32, 64, 128):
                    x = torch.randn(32, c, 1024 + (k - 1) * d, device=dev, dtype=dt)
                    w = torch.randn(c, 1, k, device=dev, dtype=dt) / k ** 0.5
                    gy = torch.randn(32, c, 1024, device=dev, dtype=dt)
                    f, fb = time_conv(F.conv1d, x, w, gy, dict(dilation=d, groups=c), a.warmup, a.reps)
                    print(f"dw1d {prec} {k} {c} {d} {f:.5f} {fb:.5f}", flush=True)
        for name, c, h, s in MOBILENET_V2:
            ho = (h - 1) // s + 1
            cl = torch.channels_last
            x = torch.randn(a.batch, c, h, h, device=dev, dtype=dt).to(memory_format=cl)
            w = (torch.randn(c, 1, 3, 3, device=dev, dtype=dt) / 3).to(memory_format=cl)
            gy = torch.randn(a.batch, c, ho, ho, device=dev, dtype=dt).to(memory_format=cl)
            f, fb = time_conv(F.conv2d, x, w, gy, dict(stride=s, padding=1, groups=c), a.warmup, a.reps)
            print(f"dw2d {prec} {name.replace(' ', '_')} {f:.5f} {fb:.5f}", flush=True)


if __name__ == "__main__":
    main()
