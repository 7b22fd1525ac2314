"""The PyTorch drop-in at work: the yardstick's all-deformable ResNet-18
(bench/torch_yardstick.py) trained with torchvision's deform_conv2d and with deftc's
(python/deftc_torch.py) swapped in - the rest (convs, batch norm, SGD) stays PyTorch's -
train step time side by side, against PyTorch's plain ResNet-18 in the same configuration, then
bitwise reproducibility with deterministic=True in that configuration.

    python3 bench/torch_deftc.py [bench/torch_yardstick.py] [--batches 64 256] [--lib build/libdeftc.so] [--tf32]
                                 [--amp] [--channels-last] [--precision fp32|tf32|bf16] [--graphs]

--amp runs every arm under torch.autocast('cuda', dtype=torch.bfloat16); --channels-last puts
the model and input in channels_last (the yardstick's two flags). With both - the issue's
configuration, deftc's all-deformable step <= 2.5x PyTorch's plain bf16 step - deftc's op gets
bf16 channels_last activations and bf16 channels_last offsets from PyTorch's convs, and the
channels_last fp32 weights, and uses all of them as they are; torchvision's deform_conv2d runs
in fp32 under autocast (it has no bf16 kernel). --precision forces the deftc arm's precision
(default: the drop-in's - bf16 under bf16 autocast, else the tensors' fp32). --graphs adds the
arm issue 36 asks for: deftc's all-deformable step and PyTorch's plain one each captured whole
by torch.cuda.graph (warm-up on a side stream, the replays timed), beside the eager arms; the
line says which path the op runs on (deftc_torch.OP_PATH)."""
import argparse
import functools
import importlib.util
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'python'))


def load_yardstick(path):
    spec = importlib.util.spec_from_file_location('torch_yardstick', path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def graphed(step, warmup=3):
    """step captured whole by torch.cuda.graph after warm-up steps on a side stream (as
    torch.cuda.graph asks): the graph's replay, a function of nothing."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g.replay


def step_fn(m, batch, seed=0, amp=False, channels_last=False, keep_grads=False):
    g = torch.Generator(device='cpu').manual_seed(seed)
    x = torch.randn(batch, 3, 224, 224, generator=g).cuda()
    y = torch.randint(0, 1000, (batch,), generator=g).cuda()
    if channels_last:
        m.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def step():
        opt.zero_grad(set_to_none=not keep_grads)  # a graph keeps its gradient buffers
        # no autocast cache in a graph (PyTorch's advice): the casts are redone in each replay
        with torch.autocast('cuda', dtype=torch.bfloat16, enabled=amp, cache_enabled=not keep_grads):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument('yardstick', nargs='?', default=os.path.join(HERE, 'torch_yardstick.py'))
    p.add_argument('--batches', type=int, nargs='+', default=[64, 256])
    p.add_argument('--lib', default=None)
    p.add_argument('--tf32', action='store_true', help="TF32 for PyTorch's convs and matmuls (default: plain fp32)")
    p.add_argument('--amp', action='store_true', help='bf16 autocast for every arm')
    p.add_argument('--channels-last', action='store_true', help='channels_last model and input for every arm')
    p.add_argument('--precision', choices=['fp32', 'tf32', 'bf16'], default=None,
                   help="deftc's precision (default: the drop-in's own: bf16 under --amp, else fp32)")
    p.add_argument('--graphs', action='store_true', help="also deftc's and the plain step as one CUDA graph each")
    a = p.parse_args()
    prec = a.precision
    mode = dict(amp=a.amp, channels_last=a.channels_last)
    if a.lib:
        os.environ['DEFTC_LIB'] = os.path.abspath(a.lib)
    import deftc_torch as dtt
    tr = load_yardstick(a.yardstick)
    torch.backends.cudnn.benchmark = True
    # The yardstick's own main sets these; imported as a module it does not, and PyTorch's
    # default lets cuDNN convs use TF32. Both arms get the same setting (fp32 unless --tf32).
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    tv_op = tr.deform_conv2d
    print('# all-deformable ResNet-18 (DCNv1) train step, PyTorch %s%s%s, deftc precision %s, %s' % (
        'TF32' if a.tf32 else 'fp32 (no TF32)', ' + bf16 autocast' if a.amp else '',
        ' + channels_last' if a.channels_last else '', prec or 'default (%s)' % ('bf16' if a.amp else 'fp32'),
        torch.cuda.get_device_name()))
    for batch in a.batches:
        times = {}
        for label, op in (('torchvision', tv_op), ('deftc', functools.partial(dtt.deform_conv2d, precision=prec))):
            tr.deform_conv2d = op  # the yardstick's Deformable3x3.forward calls this name
            torch.manual_seed(0)
            m = tr.resnet18(True, False)
            torch.cuda.reset_peak_memory_stats()
            times[label] = tr.bench(step_fn(m, batch, **mode), 5, 20)
            peak = torch.cuda.max_memory_allocated() / 2**30
            print('batch %4d %-12s %8.2f ms/step %8.0f img/s  peak %.2f GiB' % (batch, label, times[label],
                                                                               batch / times[label] * 1e3, peak))
            del m
        torch.manual_seed(0)
        m = tr.resnet18(False, False)  # the plain net: what the deformable layers add to
        plain = tr.bench(step_fn(m, batch, **mode), 5, 20)
        del m
        print('batch %4d plain ResNet-18 %8.2f ms/step (deformable layers add: torchvision %.2f ms, deftc %.2f ms)' % (
            batch, plain, times['torchvision'] - plain, times['deftc'] - plain))
        print('batch %4d deftc is %.2fx faster than torchvision; its step is %.2fx PyTorch\'s plain step%s' % (
            batch, times['torchvision'] / times['deftc'], times['deftc'] / plain,
            ' (target with --amp --channels-last: <= 2.5x)' if a.amp and a.channels_last else ''))
        if a.graphs:
            tr.deform_conv2d = functools.partial(dtt.deform_conv2d, precision=prec)
            got = {}
            for label, deform in (('deftc', True), ('plain', False)):
                torch.manual_seed(0)
                m = tr.resnet18(deform, False)
                try:
                    got[label] = tr.bench(graphed(step_fn(m, batch, keep_grads=True, **mode)), 5, 20)
                except Exception as e:  # a step that cannot be captured is a result, said
                    print('batch %4d %s: the step cannot be captured: %s: %s' % (batch, label, type(e).__name__, e))
                del m
                torch.cuda.empty_cache()
            if len(got) == 2:
                print('batch %4d one CUDA graph (op path %s): deftc all-deformable %.2f ms/step, plain %.2f ms/step '
                      '(the deformable layers add %.2f ms)' % (batch, dtt.OP_PATH, got['deftc'], got['plain'],
                                                               got['deftc'] - got['plain']))
            tr.deform_conv2d = tv_op
    # bitwise reproducibility: two fresh runs of 3 steps in the measured configuration, deftc
    # deterministic, cuDNN deterministic
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    tr.deform_conv2d = functools.partial(dtt.deform_conv2d, deterministic=True, precision=prec)
    states = []
    for run in range(2):
        torch.manual_seed(0)
        m = tr.resnet18(True, False)
        step = step_fn(m, 32, seed=1, **mode)
        losses = [step().item() for _ in range(3)]
        states.append(([t.detach().clone() for t in m.parameters()], losses))
        del m
    same = all(torch.equal(u, v) for u, v in zip(states[0][0], states[1][0])) and states[0][1] == states[1][1]
    print('deterministic=True (+ cuDNN deterministic): two runs of 3 steps %s (losses %s / %s)' % (
        'bitwise identical' if same else 'DIFFER', states[0][1], states[1][1]))
    tr.deform_conv2d = tv_op


if __name__ == '__main__':
    main()
