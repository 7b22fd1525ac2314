"""The PyTorch yardstick of deftc's comparisons: the same layers and training steps timed in
PyTorch (cuDNN, torchvision.ops.deform_conv2d), run beside deftc's own benchmark in one
device call so that both are measured on one GPU; compare ratios, not absolute times.
deftc never imports it; it needs torch and torchvision on a CUDA machine.

  python3 bench/torch_yardstick.py layers [--batch 64] [--mask] [--tf32] [--amp] [--channels-last]
  python3 bench/torch_yardstick.py resnet18|resnet50 [--batch 64] [--tf32] [--amp] [--channels-last] [--graphs]

layers: each 3x3 conv shape of ResNet-18 at 224x224 (l1 ... l4, as build/bench names them),
plain (F.conv2d) and deformable (an offset conv, then deform_conv2d; --mask: DCNv2), forward
alone and forward + backward (input, weight and offset gradients); one row per shape,
`name plain_fwd plain_fb dcn_fwd dcn_fb ratio off_std` in ms, which `build/bench --torch FILE`
reads. The offsets come from an offset conv of N(0, 0.02) weights; their std is printed.

resnet18 / resnet50: torchvision's model, one training step (forward, cross-entropy, backward,
SGD lr 0.01 momentum 0.9 weight decay 1e-4) on one random 224x224 batch of 1000 classes:
plain, then all-deformable (every 3x3 conv of the residual stages through deform_conv2d with
its own offset conv: DCNv1, then DCNv2 with the mask) - deftc's deform=all, deform_version=1|2.
Each line: ms per step, images/s, peak GiB; the last line the three medians as JSON.

Flags: --amp runs under torch.autocast(bfloat16) (PyTorch's mixed precision; autocast runs
torchvision's deform_conv2d in fp32); in `layers` it times the plain conv on bf16 tensors
(cuDNN's bf16 kernels, no cast in the timed region). --channels-last puts models and tensors
in NHWC memory format. --tf32 allows TF32 in fp32 convs and matmuls. --graphs (the plain net's
step only) captures the whole step once as a CUDA graph and times its replays.

Timing: `--warmup` calls, then `--reps` calls each between two CUDA events; the median in ms.
bench/torch_deftc.py imports this file for its models (resnet18(deform, mask)) and timer
(bench(fn, warm, rep)).
"""
import argparse
import contextlib
import json
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.ops import deform_conv2d

# ResNet-18's 3x3 convs at 224x224: name, in channels, out channels, input size, stride
LAYER_SHAPES = (('l1', 64, 64, 56, 1), ('l2a', 64, 128, 56, 2), ('l2', 128, 128, 28, 1), ('l3a', 128, 256, 28, 2),
                ('l3', 256, 256, 14, 1), ('l4a', 256, 512, 14, 2), ('l4', 512, 512, 7, 1))


def bench(fn, warm=5, rep=20):
    """Median time of fn() in ms over `rep` calls after `warm` untimed ones (CUDA events)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rep):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def autocast(on):
    return torch.autocast('cuda', dtype=torch.bfloat16) if on else contextlib.nullcontext()


class Deformable3x3(nn.Module):
    """A 3x3 conv through torchvision's deform_conv2d, its offsets (and DCNv2's mask) from a
    3x3 offset conv on the same input: torchvision's DeformConv2d as detection models use it."""

    def __init__(self, cin, cout, stride, mask):
        super().__init__()
        self.stride, self.mask = stride, mask
        self.offset = nn.Conv2d(cin, 27 if mask else 18, 3, stride, 1)
        nn.init.normal_(self.offset.weight, std=0.01)
        nn.init.zeros_(self.offset.bias)
        self.weight = nn.Parameter(torch.empty(cout, cin, 3, 3))
        nn.init.kaiming_normal_(self.weight, mode='fan_out', nonlinearity='relu')

    def forward(self, x):
        o = self.offset(x)
        m = torch.sigmoid(o[:, 18:]) if self.mask else None
        return deform_conv2d(x, o[:, :18], self.weight, stride=self.stride, padding=1, mask=m)


def make_model(name, deform, mask):
    """torchvision's `name` on the GPU; deform: every 3x3 conv of layer1..layer4 deformable
    (both of a BasicBlock, conv2 of a Bottleneck), as deftc's deform=all builds it."""
    m = getattr(torchvision.models, name)()
    if deform:
        for stage in (m.layer1, m.layer2, m.layer3, m.layer4):
            for block in stage:
                for attr in ('conv1', 'conv2', 'conv3'):
                    c = getattr(block, attr, None)
                    if c is not None and c.kernel_size == (3, 3):
                        setattr(block, attr, Deformable3x3(c.in_channels, c.out_channels, c.stride[0], mask))
    return m.cuda()


def resnet18(deform, mask):
    return make_model('resnet18', deform, mask)


def time_layers(a):
    torch.backends.cudnn.benchmark = True
    print(f'# layers: batch {a.batch}, mask={a.mask}, tf32={a.tf32}, amp={a.amp}, channels_last={a.channels_last}, '
          f'{torch.cuda.get_device_name()}')
    fmt = (lambda t: t.to(memory_format=torch.channels_last)) if a.channels_last else (lambda t: t)
    dtype = torch.bfloat16 if a.amp else torch.float32
    print(f'{"layer":5} {"plain fwd":>9} {"plain f+b":>9} {"dcn fwd":>8} {"dcn f+b":>8} {"ratio f+b":>9} {"off std":>7}')
    for name, cin, cout, size, stride in LAYER_SHAPES:
        out = (size - 1) // stride + 1
        x = fmt(torch.randn(a.batch, cin, size, size, device='cuda')).to(dtype).requires_grad_()
        w = fmt(torch.randn(cout, cin, 3, 3, device='cuda') * (2.0 / (9 * cin)) ** 0.5).to(dtype).requires_grad_()
        w_off = (torch.randn(27 if a.mask else 18, cin, 3, 3, device='cuda') * 0.02).requires_grad_()
        grad = torch.randn(a.batch, cout, out, out, device='cuda')
        grad_plain = fmt(grad.to(dtype))

        def plain(backward=True):
            y = F.conv2d(x, w, stride=stride, padding=1)
            if backward:
                y.backward(grad_plain)

        def dcn(backward=True):
            with autocast(a.amp):
                o = F.conv2d(x, w_off, stride=stride, padding=1)
                y = deform_conv2d(x, o[:, :18], w, stride=stride, padding=1,
                                  mask=torch.sigmoid(o[:, 18:]) if a.mask else None)
            if backward:
                y.backward(grad.to(y.dtype))

        with torch.no_grad(), autocast(a.amp):
            off_std = F.conv2d(x, w_off, stride=stride, padding=1)[:, :18].float().std().item()
            pf = bench(lambda: plain(False), a.warmup, a.reps)
            df = bench(lambda: dcn(False), a.warmup, a.reps)
        pb, db = bench(plain, a.warmup, a.reps), bench(dcn, a.warmup, a.reps)
        print(f'{name:5} {pf:9.3f} {pb:9.3f} {df:8.3f} {db:8.3f} {db / pb:9.2f} {off_std:7.2f}')


def time_steps(a):
    torch.backends.cudnn.benchmark = True
    print(f'# {a.what} train step (fwd+bwd+SGD), batch {a.batch}, 224x224, tf32={a.tf32}, amp={a.amp}, '
          f'channels_last={a.channels_last}, graphs={a.graphs}, {torch.cuda.get_device_name()}')
    medians = {}
    for label, deform, mask in (('plain', False, False), ('deform_v1', True, False), ('deform_v2', True, True)):
        m = make_model(a.what, deform, mask)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        x = torch.randn(a.batch, 3, 224, 224, device='cuda')
        y = torch.randint(0, 1000, (a.batch,), device='cuda')
        if a.channels_last:
            m, x = m.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
        graphed = a.graphs and not deform

        def step():
            opt.zero_grad(set_to_none=not graphed)  # a graph keeps its gradient buffers
            with autocast(a.amp):
                loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()

        torch.cuda.reset_peak_memory_stats()
        if graphed:  # warm up on a side stream (as torch.cuda.graph asks), capture, time the replays
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(a.warmup):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
            ms = bench(g.replay, a.warmup, a.reps)
        else:
            ms = bench(step, a.warmup, a.reps)
        peak = torch.cuda.max_memory_allocated() / 2**30
        medians[label] = round(ms, 2)
        print(f'{label:10} {ms:8.2f} ms/step  {a.batch / ms * 1e3:8.0f} img/s  peak {peak:.2f} GiB'
              f'{"  (one CUDA graph)" if graphed else ""}')
        del m, opt
        torch.cuda.empty_cache()
    print(json.dumps(medians))


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('what', choices=['layers', 'resnet18', 'resnet50'])
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--mask', action='store_true', help='layers: DCNv2 (modulated) deformable convs')
    p.add_argument('--tf32', action='store_true')
    p.add_argument('--amp', action='store_true')
    p.add_argument('--channels-last', action='store_true')
    p.add_argument('--graphs', action='store_true', help='steps: the plain step as one CUDA graph')
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--reps', type=int, default=20)
    a = p.parse_args()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.manual_seed(0)
    time_layers(a) if a.what == 'layers' else time_steps(a)


if __name__ == '__main__':
    main()
