"""deftc against torchvision with the same weights (issues 25, 38). torchvision's resnet18, resnet50,
resnext50_32x4d and mobilenet_v2 (its classifier's Dropout at p = 0 on both sides: dropout=0)
with random weights (batch-norm parameters and running statistics randomized, so that eval mode
is not the identity; randomized()), plain and with deftc's deformable layers swapped in by
python/deftc_models.py with random nonzero offset convs (which checks the offsets' channel order
end to end), are written as safetensors and run by build/model_io: deftc's eval-mode logits,
its train-mode loss and every parameter's gradient of one step must be within a relative error
of 1e-4 (of the reference tensor's largest magnitude) of torchvision's in float32 or in float64.
The export deftc writes must make, through deftc_models.from_deftc (the torchvision model its
metadata names, deformable stages swapped in, load_state_dict(strict=True)), the model it was
given, every tensor bit for bit. On the CPU, and on the GPU when PyTorch sees one and deftc was
built with CUDA. Without torch, torchvision or numpy every case is skipped, saying so.

Two properties of the random models keep fp32 gradients defined to 1e-4 at all (measured with
torchvision against itself; docs/weights.md): small gammas on the residual branches
(randomized) and no ReLU input within rounding of 0, nor a ReLU6 input within rounding of 0 or 6
(clear_kinks).

    python3 tests/api/test_torchvision_weights.py BUILD_DIR_OR_LIBDEFTC_SO"""
import ctypes
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
arg = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', '..', 'build')
BUILD = os.path.dirname(os.path.abspath(arg)) if arg.endswith('.so') else os.path.abspath(arg)
MODEL_IO = os.path.join(BUILD, 'model_io')
TOL = 1e-4

try:
    import numpy as np
    import torch
    import torchvision  # noqa: F401
    import deftc_models as dm
    missing = None
except ImportError as e:  # CI and make test without PyTorch: every case is skipped
    missing = str(e)

results = []
SKIPPED = 'skipped'


def case(name, fn):
    if missing:
        results.append((name, SKIPPED, 'PyTorch, torchvision or numpy is not importable: %s' % missing))
        return
    try:
        out = fn()
        results.append((name, None, out) if not (isinstance(out, tuple) and out[0] == SKIPPED) else (name, SKIPPED, out[1]))
    except Exception as e:  # a failed expectation
        results.append((name, '%s: %s' % (type(e).__name__, e), None))


def rel_err(got, ref):
    """max |got - ref| / max |ref| (the absolute error when ref is all zeros)."""
    got, ref = got.double(), ref.double()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    err = (got - ref).abs().max().item() if ref.numel() else 0.0
    return err / scale if scale > 0 else err


def residual_bns(model):
    """The last batch norm of each residual branch: a BasicBlock's bn2, a Bottleneck's bn3
    (ResNeXt's too), an InvertedResidual's projection BN where it adds its input."""
    out = []
    for b in model.modules():
        if isinstance(b, torchvision.models.resnet.BasicBlock):
            out.append(b.bn2)
        elif isinstance(b, torchvision.models.resnet.Bottleneck):
            out.append(b.bn3)
        elif isinstance(b, torchvision.models.mobilenetv2.InvertedResidual) and b.use_res_connect:
            out.append(b.conv[-1])
    return out


def without_dropout(model):
    """torchvision's mobilenet_v2 with its classifier's Dropout at p = 0 (deftc's runs with dropout=0:
    a random op has no reference to compare against); other models as they are."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def randomized(model, seed, offset_std=0.0):
    """The model with random batch-norm parameters - gamma U(0.5, 1.5), beta N(0, 0.1), and for the
    last BN of each residual branch (the branch's scale, residual_bns) gamma U(0.1, 0.3), as
    trained ResNets have it and zero_init_residual intends - offset convs ~ N(0, offset_std /
    sqrt(fan-in)) with biases N(0, 0.2) when offset_std > 0, then the running statistics
    calibrated on random images (two train-mode passes at momentum 1: running = batch
    statistics) and perturbed. Without the small residual gammas the gradients of a random-init
    ResNet-50 grow layer by layer toward the input, and so does every rounding error:
    torchvision's own float32 gradients are then 1e-2 .. 3e-1 off its float64 ones
    (docs/weights.md)."""
    g = torch.Generator().manual_seed(seed)
    last = residual_bns(model)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for m in bns:
            lo, hi = (0.1, 0.3) if any(m is b for b in last) else (0.5, 1.5)
            m.weight.copy_(torch.empty(m.weight.shape).uniform_(lo, hi, generator=g))
            m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
            m.momentum = 1.0
        for m in model.modules():
            if offset_std > 0 and isinstance(m, dm.DeformableConv3x3):
                w = m.offset.weight
                w.copy_(torch.randn(w.shape, generator=g) * offset_std / (w[0].numel() ** 0.5))
                m.offset.bias.copy_(0.2 * torch.randn(m.offset.bias.shape, generator=g))
        model.train()
        for _ in range(2):
            model(torch.randn(4, 3, 64, 64, generator=g))
        for m in bns:
            m.momentum = 0.1
            m.running_mean.add_(0.1 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.mul_(torch.empty(m.running_var.shape).uniform_(0.7, 1.3, generator=g))
            m.num_batches_tracked.zero_()
    return model


def kink_sites(model):
    """(batch norm, its block when the activation takes bn + identity, the activation's kinks) for
    every batch norm that feeds a ReLU (kink 0) or a ReLU6 (kinks 0 and 6): the ResNets' (and
    ResNeXt's) bn1, each block's inner BNs and its last (after the residual add), MobileNetV2's
    conv + BN + ReLU6 units (torchvision's Conv2dNormActivation)."""
    sites = []
    for b in model.modules():
        if isinstance(b, torchvision.models.resnet.BasicBlock):
            sites += [(b.bn1, None, (0.0,)), (b.bn2, b, (0.0,))]
        elif isinstance(b, torchvision.models.resnet.Bottleneck):
            sites += [(b.bn1, None, (0.0,)), (b.bn2, None, (0.0,)), (b.bn3, b, (0.0,))]
        elif isinstance(b, torch.nn.Sequential) and len(b) == 3 and isinstance(b[1], torch.nn.BatchNorm2d) and \
                isinstance(b[2], torch.nn.ReLU6):
            sites.append((b[1], None, (0.0, 6.0)))
    if isinstance(getattr(model, 'bn1', None), torch.nn.BatchNorm2d):
        sites.insert(0, (model.bn1, None, (0.0,)))
    return sites


def clear_kinks(model, x, margin=1e-3):
    """Moves each activation-feeding batch norm's bias by the least amount that leaves every value
    the ReLU (ReLU6) receives for the batch x in train mode at least `margin` times its channel's
    spread away from 0 (and 6). The gradient of a ReLU network is discontinuous at its kinks: a
    pre-activation within rounding of one (1e-6 of the scale; ResNet-50 at batch 2, 64 px has a
    million of them, so about one such value a run) takes either side in two fp32 computations,
    which then differ by 1e-2 in gradients - torchvision with and without oneDNN does. The biases
    move by about 1e-2 of the spread; the running statistics are left as they were."""
    blocks = (torchvision.models.resnet.BasicBlock, torchvision.models.resnet.Bottleneck)
    saved = {k: v.clone() for k, v in model.state_dict().items() if 'running' in k or 'num_batches' in k}
    sites = kink_sites(model)
    inputs = {}

    def keep_input(block, args):
        inputs[block] = args[0]

    def shift_bias(bn, args, block, kinks):
        z = args[0].transpose(0, 1).reshape(args[0].shape[1], -1)  # [C, N*H*W]
        mean, var = z.mean(1, keepdim=True), z.var(1, unbiased=False, keepdim=True)
        v = bn.weight[:, None] * (z - mean) / torch.sqrt(var + bn.eps) + bn.bias[:, None]
        if block is not None:
            xb = inputs[block]
            ident = xb if block.downsample is None else block.downsample(xb)
            v = v + ident.transpose(0, 1).reshape(v.shape)
        m = margin * v.std(1, keepdim=True)
        # v - t must keep `m` from every kink k: t outside each [v - k - m, v - k + m]
        srt = torch.cat([v - k for k in kinks], 1).sort(1).values
        lo = torch.cat([torch.full_like(m, -float('inf')), srt + m], 1)  # the gaps t may sit in
        hi = torch.cat([srt - m, torch.full_like(m, float('inf'))], 1)
        ok = hi >= lo
        t = torch.where(ok, torch.clamp(torch.zeros_like(lo), lo, hi), torch.full_like(lo, float('inf')))
        at = t.abs().argmin(1)
        bn.bias.sub_(t.gather(1, at[:, None])[:, 0])  # v - t: the nearest point of a gap at 0

    handles = [b.register_forward_pre_hook(keep_input) for b in model.modules() if isinstance(b, blocks)]
    handles += [bn.register_forward_pre_hook(lambda mod, args, blk=blk, k=k: shift_bias(mod, args, blk, k))
                for bn, blk, k in sites]
    model.train()
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    model.load_state_dict(saved, strict=False)
    return model


def built_with_cuda():
    lib = os.path.join(BUILD, 'libdeftc.so')
    return os.path.isfile(lib) and ctypes.CDLL(lib).dt_built_with_cuda() == 1


def reference(model, state, x, y, dtype):
    """Eval-mode logits, train-mode loss and every parameter's gradient of `model` loaded with
    `state`, in `dtype`."""
    model = model.to(dtype)
    model.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    model.eval()
    with torch.no_grad():
        logits = model(x.to(dtype))
    model.train()
    model.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x.to(dtype)), y)
    loss.backward()
    return logits, loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def errors(got, ref):
    """Relative errors of (logits, loss, each gradient) against ref's: a dict by name."""
    out = {'logits': rel_err(got[0], ref[0]), 'loss': rel_err(got[1], ref[1])}
    out.update((n, rel_err(got[2][n], ref[2][n])) for n in ref[2])
    return out


def zero_gradients(ref64, below=1e-9):
    """(names, G): the tensors whose float64 gradient is below `below` x G, G the largest float64
    gradient entry of the model - those that are zero in exact arithmetic, their reference
    being rounding noise. MobileNetV2's projection BNs' biases (features.N.conv.2 / conv.3.bias,
    all 17) are: its residual stream is linear (no activation after a projection), and every
    path from it to the loss passes a 1x1 conv and a train-mode batch norm (the next block's
    expand conv, features.18), whose batch mean takes any per-channel shift out. Their relative
    error would compare noise with noise; they are held to |g| <= TOL x G instead.
    """
    big = max(g.double().abs().max().item() for g in ref64.values())
    return [n for n, g in ref64.items() if g.double().abs().max().item() <= below * big], big


def worst(errs, names=None):
    """(largest error, its name) over `names` (default: all)."""
    return max((errs[n], n) for n in (names or errs))


def compare(arch, keys, offset_std=0.0, device='cpu', seed=0, deform=None, batch=2, size=64):
    """torchvision's `arch` (deformable per `deform` = (stages, version, groups)) against deftc's
    model_io run with `keys`. The reference is torchvision's model in float64 (exact to far
    below the tolerance); torchvision's own float32 result is measured against it too, as the
    yardstick. Returns the errors' summary; raises when deftc's are above TOL."""
    def build():
        m = without_dropout(getattr(torchvision.models, arch)(weights=None))
        return dm.make_deformable(m, *deform) if deform else m
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, 3, size, size, generator=g)
    y = torch.randint(0, 1000, (batch,), generator=g)
    state = {k: v.clone() for k, v in clear_kinks(randomized(build(), seed, offset_std), x).state_dict().items()}
    ref64 = reference(build(), state, x, y, torch.float64)
    ref32 = reference(build(), state, x, y, torch.float32)
    with tempfile.TemporaryDirectory() as d:
        w = os.path.join(d, 'w.safetensors')
        dm.save_file(state, w)
        np.save(os.path.join(d, 'x.npy'), x.numpy())
        np.save(os.path.join(d, 'y.npy'), y.float().numpy())
        out = os.path.join(d, 'o')
        cmd = [MODEL_IO, 'weights=' + w, 'input=' + os.path.join(d, 'x.npy'), 'labels=' + os.path.join(d, 'y.npy'),
               'out=' + out, 'device=' + device, 'precision=fp32'] + keys
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise AssertionError('%s failed (%d): %s' % (' '.join(cmd), p.returncode, p.stderr.strip()))
        logits = torch.from_numpy(np.load(out + '_logits.npy'))
        loss = torch.from_numpy(np.load(out + '_loss.npy')).reshape(())
        grads, _ = dm.load_file(out + '_grads.safetensors')
        # the round trip: deftc's export makes its model from the metadata (from_deftc: strict load)
        twin = without_dropout(dm.from_deftc(out + '_export.safetensors'))
    if set(grads) != set(ref64[2]):
        raise AssertionError('gradient names differ: %s' % sorted(set(grads) ^ set(ref64[2]))[:5])
    vs32, vs64, t32 = errors((logits, loss, grads), ref32), errors((logits, loss, grads), ref64), errors(ref32, ref64)
    # each tensor within TOL of one of the references (see the module's text)
    nearest = {n: min(vs32[n], vs64[n]) for n in vs32}
    # gradients that are zero in exact arithmetic (zero_gradients): measured against the model's
    # largest gradient instead of their own rounding noise
    zeros, big = zero_gradients(ref64[2])
    for n in zeros:
        nearest[n] = grads[n].double().abs().max().item() / big
    # ... and that model holds the state deftc was given, bit for bit
    twin_state = twin.state_dict()
    if set(twin_state) != set(state):
        raise AssertionError('the exported model is not the one given: %s' % sorted(set(twin_state) ^ set(state))[:5])
    diff = [k for k, v in twin_state.items() if not torch.equal(v, state[k])]
    if diff:
        raise AssertionError('exported tensors differ from the loaded ones: %s' % diff[:5])
    grads_only = [n for n in vs32 if n not in ('logits', 'loss') and n not in zeros]
    values = ((vs32['logits'], vs32['loss']) + worst(vs32, grads_only) +
              (vs64['logits'], vs64['loss'], worst(vs64, grads_only)[0], t32['logits'], t32['loss'],
               worst(t32, grads_only)[0], len(state)))
    summary = ('deftc vs torchvision fp32: logits %.1e, loss %.1e, gradients %.1e (%s); vs float64: %.1e, %.1e, %.1e; '
               'torchvision fp32 vs float64: %.1e, %.1e, %.1e; %d tensors round-trip bitwise' % values)
    if zeros:
        summary += '; %d gradients zero in exact arithmetic (%s): at most %.1e of the largest gradient' % (
            len(zeros), ', '.join(sorted(zeros)), max(nearest[n] for n in zeros))
    bad = worst(nearest)
    if not bad[0] <= TOL:
        raise AssertionError('%s: relative error %.1e above %g from both references: %s' % (bad[1], bad[0], TOL, summary))
    return summary


def on_gpu(fn):
    def run():
        if not torch.cuda.is_available():
            return (SKIPPED, 'PyTorch sees no CUDA GPU')
        if not built_with_cuda():
            return (SKIPPED, 'deftc was built with CUDA=0')
        return fn()
    return run


def cases():
    """(name, check): every model on the CPU, five on the GPU."""
    r18 = ['model=resnet18']
    r50 = ['model=resnet50']
    rx50 = ['model=resnext50_32x4d']
    mv2 = ['model=mobilenet_v2', 'dropout=0']  # torchvision's Dropout at p = 0 (without_dropout)
    d18 = ['deform=all'], ('all', 1, 1)                                       # DCNv1, every 3x3 conv
    d18v2 = ['deform=2,3,4', 'deform_version=2', 'offset_groups=2'], ('2,3,4', 2, 2)  # the mask, 2 groups
    d50 = ['deform=3,4', 'deform_version=2', 'offset_groups=2'], ('3,4', 2, 2)
    out = [('resnet18 plain, cpu', lambda: compare('resnet18', r18)),
           ('resnet50 plain, cpu', lambda: compare('resnet50', r50)),
           ('resnet18 deformable all (v1), random offsets, cpu',
            lambda: compare('resnet18', r18 + d18[0], 1.0, deform=d18[1], seed=1)),
           ('resnet18 deformable 2,3,4 (v2, 2 offset groups), random offsets, cpu',
            lambda: compare('resnet18', r18 + d18v2[0], 1.0, deform=d18v2[1], seed=2)),
           ('resnet50 deformable 3,4 (v2, 2 offset groups), random offsets, cpu',
            lambda: compare('resnet50', r50 + d50[0], 0.5, deform=d50[1], seed=3)),
           ('resnext50_32x4d plain, cpu', lambda: compare('resnext50_32x4d', rx50, seed=4)),
           ('mobilenet_v2 plain, cpu', lambda: compare('mobilenet_v2', mv2, seed=5))]
    out += [('resnet18 plain, cuda', on_gpu(lambda: compare('resnet18', r18, device='cuda'))),
            ('resnet50 plain, cuda', on_gpu(lambda: compare('resnet50', r50, device='cuda'))),
            ('resnet18 deformable 2,3,4 (v2, 2 offset groups), random offsets, cuda',
             on_gpu(lambda: compare('resnet18', r18 + d18v2[0], 1.0, 'cuda', deform=d18v2[1], seed=2))),
            ('resnext50_32x4d plain, cuda', on_gpu(lambda: compare('resnext50_32x4d', rx50, device='cuda', seed=4))),
            ('mobilenet_v2 plain, cuda', on_gpu(lambda: compare('mobilenet_v2', mv2, device='cuda', seed=5)))]
    return out


if not missing and not os.path.isfile(MODEL_IO):
    print('FAIL  python torchvision weights: %s not found (make %s)' % (MODEL_IO, MODEL_IO))
    print('0 passed, 1 failed, 0 skipped')
    sys.exit(1)
for name, fn in cases() if not missing else [('resnet18, resnet50, resnext50_32x4d and mobilenet_v2 against torchvision, cpu and cuda', None)]:
    case(name, fn)
failed = [r for r in results if r[1] not in (None, SKIPPED)]
skipped = [r for r in results if r[1] == SKIPPED]
for name, err, out in results:
    label = 'ok' if err is None else 'skip' if err == SKIPPED else 'FAIL'
    detail = ('  (%s)' % out) if err == SKIPPED else ('\n    ' + err) if err else ('  ' + out)
    print('%-5s python torchvision weights: %s%s' % (label, name, detail))
print('%d passed, %d failed, %d skipped' % (len(results) - len(failed) - len(skipped), len(failed), len(skipped)))
sys.exit(1 if failed else 0)
