"""cuDNN's time for each pass of the convolutions the conv labs run (bf16, channels_last), so
that build/sm90_gemm_lab and build/conv_lab can be read beside it in the same device call.

    python3 bench/lab/torch_conv_passes.py [--batch 64] [--shapes r18,r50] [--reps 20]

Per shape: forward (y = conv(x, w)), dgrad (dx from dy) and wgrad (dw from dy), each timed
alone through aten.convolution_backward's output mask, median of CUDA-event timings after
warm-up; inputs uniform in [-1, 1) (never zeros). The shape names and sizes are the labs'."""
import argparse
import statistics


def shapes(batch, which):
    b = batch
    # name, C, H, Cout, k, stride, pad (square images and kernels); the stem's C = 3 as PyTorch runs it
    r18 = [("stem7x7_c8", 3, 224, 64, 7, 2, 3), ("l1", 64, 56, 64, 3, 1, 1), ("l2a", 64, 56, 128, 3, 2, 1),
           ("l2", 128, 28, 128, 3, 1, 1), ("l2ds", 64, 56, 128, 1, 2, 0), ("l3a", 128, 28, 256, 3, 2, 1),
           ("l3", 256, 14, 256, 3, 1, 1), ("l3ds", 128, 28, 256, 1, 2, 0), ("l4a", 256, 14, 512, 3, 2, 1),
           ("l4", 512, 7, 512, 3, 1, 1), ("l4ds", 256, 14, 512, 1, 2, 0)]
    r50 = [("r50_l1_1x1_64_64", 64, 56, 64, 1, 1, 0), ("r50_l1_1x1_64_256", 64, 56, 256, 1, 1, 0),
           ("r50_l1_1x1_256_64", 256, 56, 64, 1, 1, 0), ("r50_l2_1x1_256_128", 256, 56, 128, 1, 1, 0),
           ("r50_l2_3x3_128_s2", 128, 56, 128, 3, 2, 1), ("r50_l2_1x1_128_512", 128, 28, 512, 1, 1, 0),
           ("r50_l2_1x1_512_128", 512, 28, 128, 1, 1, 0), ("r50_l3_1x1_512_256", 512, 28, 256, 1, 1, 0),
           ("r50_l3_3x3_256", 256, 14, 256, 3, 1, 1), ("r50_l3_1x1_256_1024", 256, 14, 1024, 1, 1, 0),
           ("r50_l3_1x1_1024_256", 1024, 14, 256, 1, 1, 0), ("r50_l4_1x1_1024_512", 1024, 14, 512, 1, 1, 0),
           ("r50_l4_3x3_512", 512, 7, 512, 3, 1, 1), ("r50_l4_1x1_512_2048", 512, 7, 2048, 1, 1, 0),
           ("r50_l4_1x1_2048_512", 2048, 7, 512, 1, 1, 0)]
    out = []
    if "r18" in which:
        out += r18
    if "r50" in which:
        out += r50
    return [(n, b, c, h, co, k, s, p) for (n, c, h, co, k, s, p) in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--shapes", default="r18,r50")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")

    def median_ms(fn):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(args.reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1))
        return statistics.median(ts)

    print(f"cuDNN bf16 channels_last, batch {args.batch}, median of {args.reps} (ms)")
    print(f"{'shape':24s} {'fprop':>8s} {'dgrad':>8s} {'wgrad':>8s} {'f+b':>8s}")
    total = 0.0
    for name, n, c, h, co, k, s, p in shapes(args.batch, args.shapes):
        def rand(*shape):
            return (torch.rand(*shape, device=dev) * 2 - 1).to(torch.bfloat16)
        x = rand(n, c, h, h).contiguous(memory_format=torch.channels_last)
        w = rand(co, c, k, k).contiguous(memory_format=torch.channels_last)
        y = torch.nn.functional.conv2d(x, w, stride=s, padding=p)
        dy = rand(*y.shape).contiguous(memory_format=torch.channels_last)

        def bwd(mask):
            return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0],
                                                               1, mask)
        tf = median_ms(lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p))
        td = median_ms(bwd([True, False, False]))
        tw = median_ms(bwd([False, True, False]))
        total += tf + td + tw
        print(f"{name:24s} {tf:8.4f} {td:8.4f} {tw:8.4f} {tf + td + tw:8.4f}", flush=True)
    print(f"{'sum':24s} {'':8s} {'':8s} {'':8s} {total:8.4f}")


if __name__ == "__main__":
    main()
