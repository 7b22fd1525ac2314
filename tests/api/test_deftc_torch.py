"""deftc_torch (python/deftc_torch.py) against torchvision on the GPU: forward and every
gradient on many shapes in both modes, deterministic=True bit for bit, a second GPU when
present, a non-default stream, non-contiguous inputs, autocast, float64, the module drop-in
(state_dict), swap_deform_convs, and the errors. Needs a GPU, torch and torchvision.

    python3 tests/api/test_deftc_torch.py [path/to/libdeftc.so]

Prints one line per check and 'N passed, N failed'; exits non-zero if any failed."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
if len(sys.argv) > 1:
    os.environ['DEFTC_LIB'] = os.path.abspath(sys.argv[1])
import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision.ops import deform_conv2d as tv_deform_conv2d  # noqa: E402

import deftc_torch as dtt  # noqa: E402

results = []


def check(name, ok, detail=''):
    results.append((name, ok))
    print('%-5s %s%s' % ('ok' if ok else 'FAIL', name, ('  ' + detail) if detail else ''))


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def inputs(n, c, h, w, cout, k, s, p, d, G, mask, bias, dev, seed, dtype=torch.float32):
    g = torch.Generator(device='cpu').manual_seed(seed)
    ho = (h + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (k - 1) - 1) // s + 1
    mk = lambda *shape, scale=1.0: (torch.randn(*shape, generator=g) * scale).to(dev, dtype).requires_grad_()
    x = mk(n, c, h, w)
    off = mk(n, 2 * G * k * k, ho, wo, scale=1.5)
    m = torch.rand(n, G * k * k, ho, wo, generator=g).to(dev, dtype).requires_grad_() if mask else None
    wt = mk(cout, c, k, k, scale=(c * k * k) ** -0.5)
    b = mk(cout) if bias else None
    gy = torch.randn(n, cout, ho, wo, generator=g).to(dev, dtype)
    return x, off, m, wt, b, gy


def grads(fn, x, off, m, wt, b, gy, stride, pad, dil):
    for t in (x, off, m, wt, b):
        if t is not None:
            t.grad = None
    y = fn(x, off, wt, b, stride=stride, padding=pad, dilation=dil, mask=m)
    y.backward(gy)
    return [y.detach().clone()] + [t.grad.clone() if t is not None else None for t in (x, off, m, wt, b)]


CASES = [  # n, c, h, w, cout, k, stride, pad, dil, groups, mask, bias
    (2, 16, 13, 11, 8, 3, 1, 1, 1, 1, True, True), (5, 32, 17, 17, 16, 3, 2, 1, 1, 2, False, False),
    (1, 8, 12, 14, 4, 3, 1, 2, 2, 4, True, False), (4, 64, 28, 28, 64, 3, 1, 1, 1, 1, False, False),
    (3, 6, 9, 10, 5, 3, 1, 1, 1, 3, True, True), (2, 128, 14, 14, 32, 3, 2, 1, 1, 1, False, True),
    (7, 12, 8, 9, 6, 1, 1, 0, 1, 1, True, False), (2, 20, 15, 13, 10, 5, 2, 2, 1, 2, False, True)]
NAMES = ['y', 'dx', 'doffset', 'dmask', 'dweight', 'dbias']


def compare(label, ref, got, tol=1e-5):
    worst = max(rel(a, b) for a, b in zip(got, ref) if b is not None)
    check(label, worst <= tol, 'worst rel err %.2e' % worst)


dev = torch.device('cuda', 0)
for ci, cs in enumerate(CASES):
    n, c, h, w, cout, k, s, p, d, G, mask, bias = cs
    x, off, m, wt, b, gy = inputs(*cs, dev=dev, seed=ci)
    ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, s, p, d)
    for mode in ('deft', 'unfused'):
        for det in (False, True):
            fn = lambda *a, **kw: dtt.deform_conv2d(*a, mode=mode, deterministic=det, **kw)
            compare('case %d %s%s vs torchvision' % (ci, mode, ' det' if det else ''), ref, grads(fn, x, off, m, wt, b, gy, s, p, d))

# deterministic: bit for bit, twice
x, off, m, wt, b, gy = inputs(*CASES[3], dev=dev, seed=99)
fn = lambda *a, **kw: dtt.deform_conv2d(*a, deterministic=True, **kw)
r1, r2 = grads(fn, x, off, m, wt, b, gy, 1, 1, 1), grads(fn, x, off, m, wt, b, gy, 1, 1, 1)
check('deterministic=True: gradients bitwise equal across runs', all(torch.equal(a, b2) for a, b2 in zip(r1, r2) if a is not None))

# a non-default stream
x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=5)
ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
st = torch.cuda.Stream()
with torch.cuda.stream(st):
    got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
torch.cuda.synchronize()
compare('non-default stream', ref, got)

# non-contiguous inputs (views of larger / transposed tensors)
x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=6)
xb = torch.randn(2, 13, 11, 16, device=dev).permute(0, 3, 1, 2).requires_grad_()
offb = torch.randn(2, 18 * 2, 13, 11, device=dev)[:, ::2].requires_grad_()
assert not xb.is_contiguous() and not offb.is_contiguous()
ref = grads(tv_deform_conv2d, xb, offb, m, wt, b, gy, 1, 1, 1)
got = grads(dtt.deform_conv2d, xb, offb, m, wt, b, gy, 1, 1, 1)
compare('non-contiguous input and offset', ref, got)

# float64 in, float64 out (computed in float32)
x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=7, dtype=torch.float64)
ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
check('float64: result dtype', got[0].dtype == torch.float64 and got[1].dtype == torch.float64)
compare('float64 vs torchvision (float32 inside)', ref, got, tol=1e-5)

# autocast: runs in float32 and returns float32, as torchvision's op does
x, off, m, wt, b, gy = inputs(*CASES[3], dev=dev, seed=8)
with torch.autocast('cuda', dtype=torch.bfloat16):
    ya = dtt.deform_conv2d(x, off, wt, b, padding=1, mask=m)
    yt = tv_deform_conv2d(x, off, wt, b, padding=1, mask=m)
check('autocast bf16: float32 output like torchvision', ya.dtype == yt.dtype == torch.float32, str(ya.dtype))
check('autocast bf16: same values', rel(ya, yt) < 1e-5, 'rel err %.2e' % rel(ya, yt))

# precision='bf16' / 'tf32' against torchvision's fp32, within the formats' bounds (the C
# tests' reasoning, tests/test_precision.c): operands rounded once each, fp32 sums -> the error
# of y and of dweight is at most (2u + u^2) times the same quantity computed on |x|, |w|, |gy|
# (bf16 columns are rounded once more: 3u + 4u^2; dx reads a bf16 column gradient: same), with
# u = 2^-8 (bf16) or 2^-10 (TF32). Offsets with fractional parts anywhere: the bound is checked
# on y, dx and dweight, whose weights are non-negative; bf16 must also differ from fp32.
x, off, m, wt, b, gy = inputs(*CASES[3], dev=dev, seed=10)
ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
xa, wa, gya = x.detach().abs().requires_grad_(), wt.detach().abs().requires_grad_(), gy.abs()
bnd = grads(tv_deform_conv2d, xa, off, m, wa, None, gya, 1, 1, 1)
for prec, u in (('bf16', 2.0 ** -8), ('tf32', 2.0 ** -10)):
    fn = lambda *a, **kw: dtt.deform_conv2d(*a, precision=prec, **kw)
    got = grads(fn, x, off, m, wt, b, gy, 1, 1, 1)
    k = 3 * u + 4 * u * u + 2 * 2 ** -24 * 600  # + fp32 sums of up to ~600 terms on both sides
    for i, name in ((0, 'y'), (1, 'dx'), (4, 'dweight')):
        err, lim = (got[i] - ref[i]).abs(), k * bnd[i].abs() + 1e-30
        check('precision=%s: %s within the format bound' % (prec, name), bool((err <= lim).all()),
              'worst %.2f of the bound' % (err / lim).max().item())
    if prec == 'bf16':
        check('precision=bf16: differs from fp32 (bf16 ran)', bool((got[0] - ref[0]).abs().max() > 0))

# the module: torchvision's state_dict loads, same outputs; swap_deform_convs
tv = torchvision.ops.DeformConv2d(16, 8, 3, padding=1).to(dev)
mine = dtt.DeformConv2d(16, 8, 3, padding=1).to(dev)
mine.load_state_dict(tv.state_dict())
check('DeformConv2d: state_dict keys', set(mine.state_dict()) == set(tv.state_dict()))
xi = torch.randn(2, 16, 10, 10, device=dev)
oi = torch.randn(2, 18, 10, 10, device=dev)
check('DeformConv2d: same output as torchvision\'s', rel(mine(xi, oi), tv(xi, oi)) < 1e-5)
model = torch.nn.Sequential(torchvision.ops.DeformConv2d(16, 8, 3, padding=1), torch.nn.Sequential(
    torchvision.ops.DeformConv2d(8, 8, 3, padding=1))).to(dev)
before = [model[0](xi, oi)]
n_swapped = dtt.swap_deform_convs(model)
check('swap_deform_convs: both replaced, parameters shared', n_swapped == 2 and isinstance(model[1][0], dtt.DeformConv2d)
      and model[0].weight is not None)
check('swap_deform_convs: same output', rel(model[0](xi, oi), before[0]) < 1e-5)

# a second GPU, when there is one
if torch.cuda.device_count() > 1:
    dev1 = torch.device('cuda', 1)
    x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev1, seed=9)
    ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
    got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
    compare('second GPU (cuda:1)', ref, got)
    check('second GPU: result on cuda:1', got[0].device == dev1)
    x0, off0, m0, wt0, b0, gy0 = inputs(*CASES[0], dev=dev, seed=9)
    got0 = grads(dtt.deform_conv2d, x0, off0, m0, wt0, b0, gy0, 1, 1, 1)
    compare('device 0 again after device 1', [t.to(dev) if t is not None else None for t in ref], got0)
else:
    print('(one GPU: the second-device check did not run)')


# errors
def raises(exc, needle, fn):
    try:
        fn()
    except exc as e:
        return needle in str(e)
    return False


x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=10)
check('error: CPU tensors', raises(ValueError, 'CUDA', lambda: dtt.deform_conv2d(x.cpu(), off.cpu(), wt.cpu(), padding=1)))
check('error: grouped weights', raises(ValueError, 'grouped', lambda: dtt.deform_conv2d(x, off, wt[:, :8], padding=1)))
check('error: unknown precision', raises(ValueError, 'precision', lambda: dtt.deform_conv2d(x, off, wt, padding=1, precision='fp16')))
check('error: bad mask channels', raises(ValueError, 'mask', lambda: dtt.deform_conv2d(x, off, wt, padding=1, mask=m[:, :5])))
check('error: deftc\'s own message (input too small)', raises(ValueError, 'too small', lambda: dtt.deform_conv2d(
    x[:, :, :1, :1], torch.zeros(2, 18, 1, 1, device=dev), wt, padding=0)))

failed = sum(1 for _, ok in results if not ok)
print('%d passed, %d failed' % (len(results) - failed, failed))
sys.exit(1 if failed else 0)
