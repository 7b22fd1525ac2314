"""PyTorch's training step of torchvision's ResNets, ResNeXt-50 32x4d and MobileNetV2: the measuring
stick beside deftc's `model=` steps (bench/gpu_run.sh, steps resnet50 and models). deftc never imports it; it needs torch and torchvision
(a CUDA machine). bench/torch_yardstick.py times ResNet-18 and -50, plain and all-deformable;
this times any of torchvision's four, with any deformable placement, the same way.

  python3 bench/torch_models.py --model resnet50 --batch 256 --amp --channels-last [--graphs]
  python3 bench/torch_models.py --model resnet50 --batch 256 --amp --channels-last --deform c3-c5 --mask

One step is forward + cross-entropy + backward + SGD (lr 0.01, momentum 0.9, weight decay 1e-4)
on one random batch of 224x224 images with 1000 classes: --warmup steps, then --reps steps each
between two CUDA events; the median in ms. --amp runs forward and loss under
torch.autocast(bfloat16) (PyTorch's mixed precision: bf16 convs and matmuls, fp32 master weights),
--channels-last puts the model and the input in NHWC memory format (cuDNN's fast layout),
--tf32 lets fp32 convs and matmuls use TF32. --graphs captures the whole step once in a CUDA
graph and times its replay (torch.cuda.graph; plain nets only, as in torch_yardstick.py).
--deform replaces the 3x3 convs of the chosen stages (c3-c5: layer2..layer4, DCNv2's setting;
c2-c5 all four; c4-c5; c5) by torchvision's deform_conv2d with an offset conv, as deftc places
them: both 3x3 convs of a BasicBlock, conv2 of a Bottleneck; --mask makes them DCNv2
(modulated). Autocast runs torchvision's deform_conv2d in fp32.
Prints one line (model, settings, ms/step, img/s, peak GiB) and the same as JSON.
"""
import argparse, contextlib, json, statistics
import torch, torchvision
import torch.nn as nn, torch.nn.functional as F
from torchvision.ops import deform_conv2d

STAGES = {'none': (), 'c5': (4,), 'c4-c5': (3, 4), 'c3-c5': (2, 3, 4), 'c2-c5': (1, 2, 3, 4)}  # layerN


def bench(fn, warm, rep):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rep):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


class DeformConv(nn.Module):
    """A 3x3 deformable conv (no bias) with its offset conv (zero-initialized as deftc's, so
    that the first steps sample the regular grid; the timing does not depend on the values)."""

    def __init__(self, cin, cout, stride, mask):
        super().__init__()
        self.mask, self.stride = mask, stride
        self.off = nn.Conv2d(cin, 27 if mask else 18, 3, stride, 1)
        nn.init.zeros_(self.off.weight); nn.init.zeros_(self.off.bias)
        self.weight = nn.Parameter(torch.empty(cout, cin, 3, 3))
        nn.init.kaiming_normal_(self.weight, mode='fan_out', nonlinearity='relu')

    def forward(self, x):
        o = self.off(x)
        m = torch.sigmoid(o[:, 18:]) if self.mask else None
        return deform_conv2d(x, o[:, :18], self.weight, stride=self.stride, padding=1, mask=m)


def model(name, deform, mask):
    m = getattr(torchvision.models, name)()  # torchvision's definition and initialization, 1000 classes
    if deform != 'none' and not hasattr(m, 'layer1'):
        raise SystemExit('%s has no deformable placement (deftc refuses it too)' % name)
    for n in STAGES[deform]:
        for blk in getattr(m, f'layer{n}'):
            bottleneck = isinstance(blk, torchvision.models.resnet.Bottleneck)
            for cname in (('conv2',) if bottleneck else ('conv1', 'conv2')):  # the 3x3 convs of the block
                c = getattr(blk, cname)
                setattr(blk, cname, DeformConv(c.in_channels, c.out_channels, c.stride[0], mask))
    return m.cuda()


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--model', choices=['resnet18', 'resnet34', 'resnet50', 'resnet101', 'resnext50_32x4d', 'mobilenet_v2'], default='resnet50')
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--amp', action='store_true')
    p.add_argument('--channels-last', action='store_true')
    p.add_argument('--tf32', action='store_true')
    p.add_argument('--graphs', action='store_true')
    p.add_argument('--deform', choices=list(STAGES), default='none')
    p.add_argument('--mask', action='store_true')
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--reps', type=int, default=20)
    a = p.parse_args()
    if a.graphs and a.deform != 'none':
        p.error('--graphs times plain nets only (torchvision\'s deform_conv2d is not captured here)')
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.manual_seed(0)
    m = model(a.model, a.deform, a.mask)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(a.batch, 3, 224, 224, device='cuda')
    y = torch.randint(0, 1000, (a.batch,), device='cuda')
    if a.channels_last:
        m, x = m.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    ctx = (lambda: torch.autocast('cuda', dtype=torch.bfloat16)) if a.amp else contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=not a.graphs)  # a graph keeps its gradient buffers
        with ctx():
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()

    torch.cuda.reset_peak_memory_stats()
    if a.graphs:  # warm-up on a side stream (gradients and momentum exist before the capture), then one capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(a.warmup, 3)):
                step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        t = bench(g.replay, a.warmup, a.reps)
    else:
        t = bench(step, a.warmup, a.reps)
    peak = torch.cuda.max_memory_allocated() / 2**30
    deform = f'deform={a.deform}{" v2" if a.mask else " v1"}' if a.deform != 'none' else 'plain'
    label = (f'{a.model} {deform}, batch {a.batch}, amp={a.amp}, channels_last={a.channels_last}, tf32={a.tf32}, '
             f'graphs={a.graphs}, {torch.cuda.get_device_name()}')
    print(f'{label}: {t:.2f} ms/step  {a.batch / t * 1e3:.0f} img/s  peak {peak:.2f} GiB')
    print(json.dumps({'model': a.model, 'deform': a.deform, 'mask': a.mask, 'batch': a.batch, 'amp': a.amp,
                      'channels_last': a.channels_last, 'tf32': a.tf32, 'graphs': a.graphs, 'ms': round(t, 2),
                      'peak_gib': round(peak, 2)}))


if __name__ == '__main__':
    main()
