"""deftc_torch's operator (torch.ops.deftc.deform_conv2d) through the case families of
torchvision's own deformable-convolution tests (pytorch/vision test/test_ops.py, TestDeformConv),
written anew here, against a pure-PyTorch reference (bilinear sampling written out in torch ops,
differentiated by autograd):
  forward over batches 0 and 33, contiguous or not, with and without mask, float64 and float32
  (and bfloat16 / float16) on torchvision's geometry (6 -> 2 channels, 2 weight groups, 3 offset
  groups, 3x2 kernel, stride (2, 1), padding (1, 0), dilation (2, 1)); a parameter grid of weight
  and offset groups, mask, bias, stride / padding / dilation, modes and layouts, forward and every
  gradient; gradcheck in float64 with and without mask, also through a TorchScript caller;
  CPU-vs-CUDA gradients (when CUDA is there); autocast (CPU bf16 and f16 here, CUDA f16 on a GPU);
  wrong sizes raising RuntimeError with torchvision's words; torch.jit.script of DeformConv2d;
  torch.compile against eager (fullgraph too), torch.fx.symbolic_trace, torch.export and
  torch.library.opcheck on several inputs; the module against torchvision's (when installed);
  the path in use (deftc_torch.OP_PATH: the compiled operator or ctypes, $DEFTC_TORCH_OP forces
  one), its argument errors as RuntimeError (deftc_lib.DeftcError on ctypes), and both paths' results and gradients bit
  for bit (skipped, saying so, when the compiled operator is not built: make torch-op).
Runs on the CPU, and on CUDA too when a GPU is visible; run it once per path:
DEFTC_TORCH_OP=compiled and DEFTC_TORCH_OP=ctypes.

    python3 tests/api/test_deftc_torch_ops.py [path/to/libdeftc.so]

Prints one line per check and 'N passed, N failed, N skipped'; without PyTorch every check is
skipped (and the exit status is 0)."""
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
if len(sys.argv) > 1:
    os.environ['DEFTC_LIB'] = os.path.abspath(sys.argv[1])
try:
    import torch
except ImportError:
    print('skip  python deftc_torch ops: every check (PyTorch is not installed)')
    print('0 passed, 0 failed, 1 skipped')
    sys.exit(0)
try:
    import torchvision
except ImportError:
    torchvision = None
from typing import Tuple  # noqa: E402

import deftc_torch as dtt  # noqa: E402

warnings.filterwarnings('ignore', category=FutureWarning)  # torch.jit.script's deprecation
results = []
skipped = []  # the checks this machine cannot run, each printed with its reason
F64, F32, BF16, F16 = torch.float64, torch.float32, torch.bfloat16, torch.float16
CL = torch.channels_last
DEVICES = [torch.device('cpu')] + ([torch.device('cuda')] if torch.cuda.is_available() else [])


def check(name, ok, detail=''):
    results.append(bool(ok))
    print('%-5s %s%s' % ('ok' if ok else 'FAIL', name, ('  ' + detail) if detail else ''))


def skip(name, why):
    skipped.append(name)
    print('skip  %s  (%s)' % (name, why))


def raised(exc, fn):
    """The message of the exc that fn raises ('' when it raises none, or another exception)."""
    try:
        fn()
    except exc as e:
        return str(e) or type(e).__name__
    except Exception:
        return ''
    return ''


def rel(a, b):
    """||a - b|| / ||b|| in float64 (0 for two empty tensors)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if b.numel() == 0:
        return 0.0 if a.shape == b.shape else float('inf')
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# ---- the reference ----

def reference(x, offset, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), mask=None):
    """torchvision.ops.deform_conv2d from its definition in torch ops (differentiable by autograd
    in every input): weight groups from weight.shape[1], offset groups from offset.shape[1];
    a sample is 0 outside (-1, H) x (-1, W), a corner outside the plane counts 0."""
    n, c, h, w = x.shape
    cout, cw, kh, kw = weight.shape
    wg, k = c // cw, kh * kw
    g = offset.shape[1] // (2 * k)
    ho, wo = offset.shape[2:]
    cg, dev, dt = c // g, x.device, x.dtype
    ar = lambda m: torch.arange(m, device=dev)  # noqa: E731
    ky = (ar(k) // kw * dilation[0]).to(dt).view(1, 1, k, 1, 1)
    kx = (ar(k) % kw * dilation[1]).to(dt).view(1, 1, k, 1, 1)
    oy = (ar(ho) * stride[0] - padding[0]).to(dt).view(1, 1, 1, ho, 1)
    ox = (ar(wo) * stride[1] - padding[1]).to(dt).view(1, 1, 1, 1, wo)
    off = offset.reshape(n, g, k, 2, ho, wo)
    py, px = oy + ky + off[:, :, :, 0], ox + kx + off[:, :, :, 1]  # [n, g, k, ho, wo]
    inside = (py > -1) & (py < h) & (px > -1) & (px < w)
    y0, x0 = py.detach().floor(), px.detach().floor()
    ly, lx = py - y0, px - x0
    planes = x.reshape(n, g, cg, h * w)
    val = 0
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            ok = inside & (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            idx = (yy.clamp(0, h - 1) * w + xx.clamp(0, w - 1)).long().reshape(n, g, 1, k * ho * wo)
            corner = planes.gather(3, idx.expand(n, g, cg, k * ho * wo)).reshape(n, g, cg, k, ho, wo)
            val = val + ((ly if dy else 1 - ly) * (lx if dx else 1 - lx) * ok).unsqueeze(2) * corner
    if mask is not None:
        val = val * mask.reshape(n, g, 1, k, ho, wo)
    cols = val.reshape(n, wg, cw, k, ho * wo)  # channel c = group * cg + j
    y = torch.einsum('ngckp,gock->ngop', cols, weight.reshape(wg, cout // wg, cw, k)).reshape(n, cout, ho, wo)
    return y + bias.view(1, -1, 1, 1) if bias is not None else y


def leaves(*ts):
    return [t.detach().requires_grad_() if t is not None else None for t in ts]


def run(fn, x, offset, weight, bias, mask, gy, **geom):
    """y and the gradients of (x, offset, weight, bias, mask) for grad_y = gy."""
    ins = leaves(x, offset, weight, bias, mask)
    y = fn(ins[0], ins[1], ins[2], ins[3], mask=ins[4], **geom)
    wanted = [t for t in ins if t is not None]
    gs = iter(torch.autograd.grad(y, wanted, gy.to(y.dtype)) if y.numel() or wanted else [])
    return [y] + [next(gs) if t is not None else None for t in ins]


def compare(label, got, want, tol):
    names = ['y', 'dx', 'doffset', 'dweight', 'dbias', 'dmask']
    worst = max((rel(a, b), nm) for a, b, nm in zip(got, want, names) if b is not None)
    check(label, worst[0] <= tol, 'worst %s rel err %.2e' % (worst[1], worst[0]))


# ---- torchvision's geometry (get_fn_args), its forward and backward families ----

TV_GEOM = dict(stride=(2, 1), padding=(1, 0), dilation=(2, 1))


def tv_args(device, contiguous, batch, dtype, seed):
    """x, weight, offset, mask, bias of torchvision's test: 6 -> 2 channels, 2 weight groups, 3
    offset groups, 3x2 kernel on 5x4 images; x ~ U(0, 1), the rest ~ N(0, 1) (the mask too).
    Not contiguous: the same permutations of the memory as torchvision's test."""
    g = torch.Generator().manual_seed(seed)
    ho, wo = (5 + 2 - 2 * 2 - 1) // 2 + 1, (4 - 1 - 1) // 1 + 1
    x = torch.rand(batch, 6, 5, 4, generator=g, dtype=F64)
    offset = torch.randn(batch, 3 * 2 * 3 * 2, ho, wo, generator=g, dtype=F64)
    mask = torch.randn(batch, 3 * 3 * 2, ho, wo, generator=g, dtype=F64)
    weight = torch.randn(2, 3, 3, 2, generator=g, dtype=F64)
    bias = torch.randn(2, generator=g, dtype=F64)
    ts = [t.to(device, dtype) for t in (x, weight, offset, mask, bias)]
    if not contiguous:
        ts[0] = ts[0].permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)
        ts[2] = ts[2].permute(1, 3, 0, 2).contiguous().permute(2, 0, 3, 1)
        ts[3] = ts[3].permute(1, 3, 0, 2).contiguous().permute(2, 0, 3, 1)
        ts[1] = ts[1].permute(3, 2, 0, 1).contiguous().permute(2, 3, 1, 0)
    return leaves(*ts)


def tv_module(device, dtype):
    m = dtt.DeformConv2d(6, 2, (3, 2), groups=2, **TV_GEOM).to(device=device, dtype=dtype)
    return m


TOL = {F64: 1e-10, F32: 1e-5, BF16: 2e-2, F16: 2e-3}


def forward_family(device):
    """torchvision's test_forward: the module on its geometry, batches 0 and 33, contiguous or
    not, with and without the mask, float64 and float32 (deftc's f64 and f32 paths) and bf16 /
    float16 (deftc's bf16 kernels; float16 through float32), against the reference in float64 on
    the same values. Result dtype: the input's."""
    for dtype in (F64, F32, BF16, F16):
        for contiguous in (True, False):
            for batch in (0, 33):
                x, _, offset, mask, _ = tv_args(device, contiguous, batch, dtype, seed=batch + contiguous)
                layer = tv_module(device, dtype)
                for m in (mask, None):
                    res = layer(x, offset, m)
                    want = reference(*(t.double() if t is not None else None for t in (x, offset, layer.weight,
                                                                                        layer.bias)), mask=m.double()
                                     if m is not None else None, **TV_GEOM)
                    label = '%s forward %s, %s, batch %d, %s' % (device.type, str(dtype)[6:], 'contiguous' if contiguous
                                                                 else 'not contiguous', batch, 'mask' if m is not None
                                                                 else 'no mask')
                    e = rel(res, want)
                    check(label, res.dtype == dtype and res.shape == want.shape and e <= TOL[dtype],
                          '%s %s rel err %.2e' % (res.dtype, tuple(res.shape), e))


def backward_family(device):
    """torchvision's test_backward: gradcheck in float64 with and without the mask, batches 0
    and 33, contiguous or not - directly and through a TorchScript function calling the op."""
    @torch.jit.script
    def script_func(x_, offset_, mask_, weight_, bias_, stride_: Tuple[int, int], pad_: Tuple[int, int],
                    dilation_: Tuple[int, int]):
        return torch.ops.deftc.deform_conv2d(x_, offset_, weight_, bias_, stride_, pad_, dilation_, mask_, 'deft', False,
                                             None)

    for contiguous in (True, False):
        for batch in (0, 33):
            x, weight, offset, mask, bias = tv_args(device, contiguous, batch, F64, seed=7 + batch)
            s, p, d = TV_GEOM['stride'], TV_GEOM['padding'], TV_GEOM['dilation']
            label = '%s gradcheck float64, %s, batch %d' % (device.type, 'contiguous' if contiguous else 'not contiguous',
                                                            batch)

            def func(x_, offset_, mask_, weight_, bias_):
                return dtt.deform_conv2d(x_, offset_, weight_, bias_, stride=s, padding=p, dilation=d, mask=mask_)

            def func_no_mask(x_, offset_, weight_, bias_):
                return dtt.deform_conv2d(x_, offset_, weight_, bias_, stride=s, padding=p, dilation=d, mask=None)

            for name, fn, args in (('mask', func, (x, offset, mask, weight, bias)),
                                   ('no mask', func_no_mask, (x, offset, weight, bias)),
                                   ('TorchScript caller, mask', lambda *a: script_func(*a, s, p, d),
                                    (x, offset, mask, weight, bias))):
                try:
                    ok = torch.autograd.gradcheck(fn, args, nondet_tol=1e-5, fast_mode=True)
                    detail = ''
                except Exception as e:  # gradcheck raises with the mismatch
                    ok, detail = False, '%s: %s' % (type(e).__name__, str(e)[:300])
                check('%s, %s' % (label, name), ok, detail)


# ---- a parameter grid, forward and every gradient ----

GRID = [  # n, c, h, w, cout, (kh, kw), stride, padding, dilation, offset groups, weight groups, mask, bias
    (2, 4, 7, 6, 6, (3, 3), (1, 1), (1, 1), (1, 1), 1, 2, True, True),
    (3, 6, 5, 4, 2, (3, 2), (2, 1), (1, 0), (2, 1), 3, 2, True, True),
    (1, 6, 9, 8, 3, (3, 3), (2, 2), (1, 1), (1, 1), 2, 3, False, True),
    (2, 8, 6, 6, 8, (1, 1), (1, 1), (0, 0), (1, 1), 4, 4, True, False),
    (2, 5, 8, 7, 4, (3, 3), (1, 2), (2, 1), (2, 2), 1, 1, False, False),
    (1, 12, 6, 5, 6, (2, 3), (1, 1), (1, 1), (1, 1), 3, 6, True, True),
]


def grid_inputs(case, device, seed):
    n, c, h, w, cout, (kh, kw), s, p, d, G, WG, has_mask, has_bias = case
    g = torch.Generator().manual_seed(seed)
    ho, wo = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1, (w + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    o = torch.randn(n, 2 * G * kh * kw, ho, wo, generator=g, dtype=F64) * 1.5
    offset = o.floor() + 0.15 + 0.7 * (o - o.floor())  # off the bilinear kinks at integers
    ts = (torch.randn(n, c, h, w, generator=g, dtype=F64), offset,
          torch.randn(cout, c // WG, kh, kw, generator=g, dtype=F64) / (c // WG * kh * kw) ** 0.5,
          torch.randn(cout, generator=g, dtype=F64) if has_bias else None,
          torch.rand(n, G * kh * kw, ho, wo, generator=g, dtype=F64) if has_mask else None,
          torch.randn(n, cout, ho, wo, generator=g, dtype=F64))
    return [t.to(device) if t is not None else None for t in ts], dict(stride=s, padding=p, dilation=d)


def grid_family(device):
    """Each grid case in float64 (deftc's f64 path) and float32 in both modes, deterministic,
    NCHW and channels_last (x, weight, offsets, mask), forward and every gradient against the
    reference's (autograd, float64)."""
    for ci, case in enumerate(GRID):
        (x, off, wt, b, m, gy), geom = grid_inputs(case, device, seed=100 + ci)
        want = run(reference, x, off, wt, b, m, gy, **geom)
        compare('%s grid %d float64' % (device.type, ci), run(dtt.deform_conv2d, x, off, wt, b, m, gy, **geom), want,
                1e-10)
        for mode in ('deft', 'unfused'):
            for det in (False, True):
                for cl in ((False, True) if mode == 'deft' else (False,)):
                    fmt = (lambda t: t.float().contiguous(memory_format=CL) if t is not None else None) if cl else \
                        (lambda t: t.float() if t is not None else None)
                    fn = lambda *a, **kw: dtt.deform_conv2d(*a, mode=mode, deterministic=det, **kw)  # noqa: E731
                    got = run(fn, fmt(x), fmt(off), fmt(wt), b.float() if b is not None else None, fmt(m), fmt(gy),
                              **geom)
                    label = '%s grid %d float32 %s%s%s' % (device.type, ci, mode, ' det' if det else '',
                                                           ' channels_last' if cl else '')
                    kept = all(g.dtype == F32 and g.is_contiguous(memory_format=CL if cl and g.dim() == 4 else
                                                                  torch.contiguous_format)
                               for g in got[1:] if g is not None)
                    compare(label, got, want, 1e-5)
                    check(label + ': gradients in the inputs\' dtype and layout', kept)


def cpu_cuda_family():
    """torchvision's test_compare_cpu_cuda_grads (smaller images): the weight gradient of
    out.mean() on the CPU and on CUDA, contiguous or not."""
    for contiguous in (True, False):
        g = torch.Generator().manual_seed(5)
        w0 = torch.randn(9, 9, 3, 3, generator=g)
        img, off, mask = (torch.randn(4, 9, 100, 11, generator=g), torch.rand(4, 18, 100, 11, generator=g),
                          torch.rand(4, 9, 100, 11, generator=g))
        grads = []
        for dev in ('cpu', 'cuda'):
            w = w0.clone().to(dev).requires_grad_()
            i, o, m, wt = img.to(dev), off.to(dev), mask.to(dev), w
            if not contiguous:
                i = i.permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)
                o = o.permute(1, 3, 0, 2).contiguous().permute(2, 0, 3, 1)
                m = m.permute(1, 3, 0, 2).contiguous().permute(2, 0, 3, 1)
                wt = w.permute(3, 2, 0, 1).contiguous().permute(2, 3, 1, 0)
            dtt.deform_conv2d(i, o, wt, padding=1, mask=m).mean().backward()
            grads.append(w.grad.cpu())
        e = rel(grads[1], grads[0])
        check('CPU and CUDA weight gradients agree (%s)' % ('contiguous' if contiguous else 'not contiguous'), e <= 1e-5,
              'rel err %.2e' % e)


# ---- autocast ----

def autocast_family(device):
    """torchvision's autocast kernel casts floating inputs to float32 and returns the input's
    dtype; deftc does that, except under bf16 autocast (mode 'deft'), where it runs its bf16
    kernels and returns bf16 channels_last, as PyTorch's convs do. CPU autocast's default is
    bf16; float16 autocast is CUDA's default (torchvision's test_autocast) and exists on the CPU."""
    dt = device.type
    for batch in (0, 33):
        x, _, offset, mask, _ = tv_args(device, False, batch, F32, seed=30 + batch)
        layer = tv_module(device, F32)
        want = reference(*(t.double() for t in (x, offset, layer.weight, layer.bias)), mask=mask.double(), **TV_GEOM)
        eager = layer(x, offset, mask)
        half = tv_module(device, F16)
        half.load_state_dict(layer.state_dict())
        with torch.autocast(dt, dtype=F16):  # torchvision's rule: float32 stays float32, float16 stays float16
            y32 = layer(x, offset, mask)
            yh = half(x.half(), offset.half(), mask.half())
        check('%s autocast float16, batch %d: float32 in, float32 out, as without autocast' % (dt, batch),
              y32.dtype == F32 and torch.equal(y32, eager))
        e = rel(yh, reference(*(t.half().double() for t in (x, offset, layer.weight, layer.bias)),
                              mask=mask.half().double(), **TV_GEOM))
        check('%s autocast float16, batch %d: float16 in, float16 out' % (dt, batch), yh.dtype == F16 and e <= 2e-3,
              '%s rel err %.2e' % (yh.dtype, e))
        with torch.autocast(dt, dtype=BF16):
            yb = layer(x, offset, mask)
            yu = dtt.deform_conv2d(x, offset, layer.weight, layer.bias, mask=mask, mode='unfused', **TV_GEOM)
            yp = dtt.deform_conv2d(x, offset, layer.weight, layer.bias, mask=mask, precision='fp32', **TV_GEOM)
            yd = dtt.deform_conv2d(x.double(), offset.double(), layer.weight.double(), layer.bias.double(),
                                   mask=mask.double(), **TV_GEOM)
        e = rel(yb, want)
        check('%s autocast bf16, batch %d: bf16 channels_last result within bf16\'s rounding' % (dt, batch),
              yb.dtype == BF16 and yb.is_contiguous(memory_format=CL) and e <= 2e-2, 'rel err %.2e' % e)
        if batch:
            check('%s autocast bf16: differs from float32 (bf16 ran)' % dt, rel(yb, want) > 1e-4)
        check('%s autocast bf16, batch %d: mode=\'unfused\' and precision=\'fp32\' as torchvision (float32)' % (dt, batch),
              yu.dtype == yp.dtype == F32 and rel(yu, eager) <= 1e-6 and rel(yp, eager) <= 1e-6)
        check('%s autocast bf16, batch %d: float64 is not cast (torchvision\'s rule)' % (dt, batch),
              yd.dtype == F64 and rel(yd, want) <= 1e-10)
    # the gradients of float32 leaves under bf16 autocast: float32, in the leaves' layouts
    x, _, offset, mask, _ = tv_args(device, True, 3, F32, seed=40)
    layer = tv_module(device, F32)
    with torch.autocast(dt, dtype=BF16):
        y = layer(x, offset, mask)
    y.float().square().sum().backward()
    ok = all(t.grad is not None and t.grad.dtype == F32 and t.grad.stride() == t.stride()
             for t in (x, offset, mask, layer.weight, layer.bias))
    check('%s autocast bf16: float32 gradients in the inputs\' layouts' % dt, ok)


# ---- errors ----

def wrong_sizes_family(device):
    """torchvision's test_wrong_sizes and the rest of the size checks: RuntimeError, its words."""
    x, _, offset, mask, _ = tv_args(device, True, 10, F32, seed=50)
    layer = tv_module(device, F32)
    w = layer.weight
    cases = [
        ('offset channels not a multiple of 2*kh*kw', 'the shape of the offset', lambda: layer(x, offset[:, :2])),
        ('mask channels', 'mask.shape[1] is not valid', lambda: layer(x, offset, mask[:, :2])),
        ('offset channels beyond the groups', 'offset.shape[1] is not valid', lambda: layer(x, offset[:, :13])),
        ('offset batch', 'invalid batch size of offset', lambda: layer(x, offset[:5])),
        ('mask batch', 'invalid batch size of mask', lambda: layer(x, offset, mask[:5])),
        ('offset positions', 'offset output dims', lambda: layer(x, offset[:, :, :1])),
        ('input too small', 'Calculated output size too small', lambda: dtt.deform_conv2d(
            x[:, :, :1], offset, w, dilation=(4, 4))),
        ('weight groups that do not divide', 'weight groups', lambda: dtt.deform_conv2d(x, offset, w[:, :2],
                                                                                        **TV_GEOM)),
        ('bias size', 'bias has 3 elements', lambda: dtt.deform_conv2d(x, offset, w, torch.zeros(3, device=device),
                                                                       **TV_GEOM)),
        ('an integer input', 'floating-point', lambda: layer(x.int(), offset)),
        ('an empty kernel', 'positive sizes', lambda: dtt.deform_conv2d(x, offset, w[:, :, :0], **TV_GEOM)),
        ('unknown precision', 'precision', lambda: dtt.deform_conv2d(x, offset, w, precision='fp16', **TV_GEOM)),
        ('bf16 with the unfused mode', "mode='unfused'", lambda: dtt.deform_conv2d(x.bfloat16(), offset, w,
                                                                                    mode='unfused', **TV_GEOM)),
    ]
    for label, needle, fn in cases:
        msg = raised(RuntimeError, fn)
        check('%s error: %s (RuntimeError)' % (device.type, label), needle in msg, msg.splitlines()[0][:120] if msg
              else 'nothing raised')


# ---- the operator as PyTorch's tools see it ----

class Net(torch.nn.Module):
    """A small deformable net: a conv makes offsets and a mask, a grouped DeformConv2d uses them."""

    def __init__(self):
        super().__init__()
        self.off = torch.nn.Conv2d(4, 27, 3, padding=1)
        self.dc = dtt.DeformConv2d(4, 6, 3, padding=1, groups=2)

    def forward(self, x):
        o = self.off(x)
        return torch.relu(self.dc(x, o[:, :18], torch.sigmoid(o[:, 18:]))).mean(dim=(2, 3))


def tools_family(device):
    torch.manual_seed(60)
    net = Net().to(device)
    x = torch.randn(2, 4, 8, 8, device=device)
    eager = net(x)
    eager.sum().backward()
    g_eager = [p.grad.clone() for p in net.parameters()]
    for fullgraph in (False, True):
        torch._dynamo.reset()
        net.zero_grad()
        try:
            yc = torch.compile(net, fullgraph=fullgraph)(x)
            yc.sum().backward()
            e = max([rel(yc, eager)] + [rel(p.grad, g) for p, g in zip(net.parameters(), g_eager)])
            ok, detail = e <= 1e-5, 'worst rel err %.2e (y and every parameter gradient)' % e
        except Exception as ex:
            ok, detail = False, '%s: %s' % (type(ex).__name__, str(ex)[:300])
        check('%s torch.compile%s equal to eager' % (device.type, ' fullgraph=True' if fullgraph else ''), ok, detail)
    gm = torch.fx.symbolic_trace(net)
    ops = [n.target for n in gm.graph.nodes if n.op == 'call_function']
    check('%s torch.fx.symbolic_trace: the op is one node, same result' % device.type,
          torch.ops.deftc.deform_conv2d in ops and rel(gm(x), eager) == 0.0, str(ops))
    layer_graph = torch.fx.symbolic_trace(dtt.DeformConv2d(4, 4, 3, padding=1).to(device)).graph
    calls = [n for n in layer_graph.nodes if n.op == 'call_function']
    check('%s torch.fx: DeformConv2d is a leaf (one call_function node: torchvision\'s test_is_leaf_node)' % device.type,
          len(calls) == 1 and calls[0].target == torch.ops.deftc.deform_conv2d)
    ep = torch.export.export(net, (x,))
    nodes = [n.target for n in ep.graph.nodes if n.op == 'call_function']
    check('%s torch.export: deftc.deform_conv2d in the graph, same result' % device.type,
          torch.ops.deftc.deform_conv2d.default in nodes and rel(ep.module()(x), eager) <= 1e-6)
    scripted = torch.jit.script(dtt.DeformConv2d(8, 8, 3).to(device))  # torchvision's test_forward_scriptability
    xs, os_ = torch.randn(2, 8, 7, 7, device=device), torch.randn(2, 18, 5, 5, device=device)
    check('%s torch.jit.script(DeformConv2d): same result as eager' % device.type,
          rel(scripted(xs, os_), scripted.forward(xs, os_)) == 0.0 and
          rel(scripted(xs, os_), dtt.deform_conv2d(xs, os_, scripted.weight, scripted.bias)) == 0.0)
    # opcheck: schema, autograd registration, the fake kernel against the real one, AOT dispatch
    # with dynamic shapes, on several inputs
    g = torch.Generator().manual_seed(61)

    def t(*shape, dtype=F32, cl=False, grad=True):
        v = torch.randn(*shape, generator=g).to(device, dtype)
        return (v.contiguous(memory_format=CL) if cl else v).requires_grad_(grad)

    samples = [
        ('float32, groups, mask, bias', (t(2, 4, 6, 6), t(2, 18, 6, 6), t(6, 2, 3, 3), t(6), (1, 1), (1, 1), (1, 1),
                                         t(2, 9, 6, 6), 'deft', False, None)),
        ('channels_last, no mask, no bias', (t(2, 4, 6, 6, cl=True), t(2, 18, 6, 6, cl=True), t(4, 4, 3, 3, cl=True),
                                             None, (1, 1), (1, 1), (1, 1), None, 'deft', True, None)),
        ('unfused, stride 2, weight groups', (t(1, 6, 7, 7), t(1, 36, 3, 3), t(4, 3, 3, 3), t(4), (2, 2), (0, 0), (1, 1), None,
                               'unfused', False, None)),
        ('float64', (t(2, 4, 5, 5, dtype=F64), t(2, 18, 5, 5, dtype=F64), t(2, 4, 3, 3, dtype=F64), t(2, dtype=F64),
                     (1, 1), (1, 1), (1, 1), t(2, 9, 5, 5, dtype=F64), 'deft', False, None)),
        ('bf16', (t(2, 8, 6, 6, dtype=BF16, cl=True), t(2, 18, 6, 6, dtype=BF16), t(8, 8, 3, 3), None, (1, 1), (1, 1),
                  (1, 1), None, 'deft', False, None)),
        ("precision='bf16' on float32", (t(1, 4, 5, 5), t(1, 18, 5, 5), t(4, 4, 3, 3), None, (1, 1), (1, 1), (1, 1),
                                         None, 'deft', False, 'bf16')),
        ('batch 0', (t(0, 4, 5, 5), t(0, 18, 5, 5), t(4, 2, 3, 3), t(4), (1, 1), (1, 1), (1, 1), t(0, 9, 5, 5), 'deft',
                     False, None)),
    ]
    for label, args in samples:
        try:
            res = torch.library.opcheck(torch.ops.deftc.deform_conv2d.default, args)
            ok, detail = all(v == 'SUCCESS' for v in res.values()), str(res)
        except Exception as ex:
            ok, detail = False, '%s: %s' % (type(ex).__name__, str(ex)[:400])
        check('%s torch.library.opcheck, %s' % (device.type, label), ok, detail)


# ---- the module ----

def module_family(device):
    m = dtt.DeformConv2d(6, 2, (3, 2), groups=2, **TV_GEOM).to(device)
    check('%s DeformConv2d(groups=2): weight [out, in/groups, kh, kw]' % device.type, tuple(m.weight.shape) == (2, 3, 3, 2))
    check('DeformConv2d refuses groups that do not divide (ValueError, as torchvision)',
          'in_channels must be divisible by groups' in raised(ValueError, lambda: dtt.DeformConv2d(6, 2, 3, groups=4))
          and 'out_channels must be divisible by groups' in raised(ValueError, lambda: dtt.DeformConv2d(6, 3, 3, groups=2)))
    if torchvision is None:
        print('(torchvision is not installed: the comparisons with its module did not run)')
        return
    tv = torchvision.ops.DeformConv2d(6, 2, (3, 2), groups=2, **TV_GEOM).to(device)
    m.load_state_dict(tv.state_dict())
    x, _, offset, mask, _ = tv_args(device, True, 4, F32, seed=70)
    check('%s DeformConv2d(groups=2) against torchvision\'s, state_dict loaded' % device.type,
          set(m.state_dict()) == set(tv.state_dict()) and rel(m(x, offset, mask), tv(x, offset, mask)) <= 1e-5)
    model = torch.nn.Sequential(torchvision.ops.DeformConv2d(6, 4, 3, padding=1, groups=2)).to(device)
    xi, oi = torch.randn(2, 6, 5, 5, device=device), torch.randn(2, 18, 5, 5, device=device)
    before = model[0](xi, oi)
    n = dtt.swap_deform_convs(model)
    check('%s swap_deform_convs with groups: replaced, same output' % device.type,
          n == 1 and isinstance(model[0], dtt.DeformConv2d) and rel(model[0](xi, oi), before) <= 1e-5)


# ---- the two paths: the compiled operator and ctypes ----

# One process's results on one path ($DEFTC_TORCH_OP): y and the 5 gradients, with their strides,
# of one DCNv2 layer with bias and 2 weight groups in each dtype / layout / mode, saved to argv[1].
PATHS_CASE = '''
import sys, torch
sys.path.insert(0, %r)
import deftc_torch as dtt
g = torch.Generator().manual_seed(5)
out = []
for dtype, cl, mode in ((torch.float32, False, 'deft'), (torch.float32, True, 'deft'), (torch.bfloat16, True, 'deft'),
                        (torch.float64, False, 'deft'), (torch.float16, False, 'deft'), (torch.float32, False, 'unfused')):
    x = torch.randn(2, 6, 7, 6, generator=g).to(dtype)
    x = x.contiguous(memory_format=torch.channels_last) if cl else x
    off, m = torch.randn(2, 36, 7, 6, generator=g).to(dtype), torch.rand(2, 18, 7, 6, generator=g).to(dtype)
    w, b = torch.randn(4, 3, 3, 3, generator=g).to(dtype), torch.randn(4, generator=g).to(dtype)
    leaves = [t.requires_grad_() for t in (x, off, m, w, b)]
    y = dtt.deform_conv2d(x, off, w, b, padding=1, mask=m, mode=mode, deterministic=True)
    y.backward(torch.randn(y.shape, generator=g).to(y.dtype))
    out.append([(y.detach(), y.stride())] + [(t.grad, t.grad.stride()) for t in leaves])
torch.save((dtt.OP_PATH, out), sys.argv[1])
'''


def pair_python_calls():
    """'file:function' of each Python function of deftc_torch, deftc_lib or torch.library that one
    forward + backward pair of the op (float32 [1, 4, 4, 4], 3x3, bias, every input requiring grad)
    runs, the op and torch.autograd.grad called directly; the profiler sees this thread's calls,
    and the CPU backward runs on it."""
    g = torch.Generator().manual_seed(8)
    x, off = torch.randn(1, 4, 4, 4, generator=g), torch.randn(1, 18, 4, 4, generator=g)
    w, b = torch.randn(4, 4, 3, 3, generator=g), torch.randn(4, generator=g)
    ins = [t.requires_grad_() for t in (x, off, w, b)]
    gy = torch.ones(1, 4, 4, 4)
    ran = []

    def probe(frame, event, arg):
        path = frame.f_code.co_filename
        if event == 'call' and (path.endswith(('deftc_torch.py', 'deftc_lib.py')) or
                                os.sep + '_library' + os.sep in path):
            ran.append('%s:%s' % (os.path.basename(path), frame.f_code.co_name))
    sys.setprofile(probe)
    try:
        y = torch.ops.deftc.deform_conv2d(x, off, w, b, (1, 1), (1, 1), (1, 1), None, 'deft', False, None)
        torch.autograd.grad(y, ins, gy)
    finally:
        sys.setprofile(None)
    return ran


def backward_oom():
    """(the exception y.backward raises when deftc's first host allocation in the backward fails,
    whether a pair works after it): on the compiled path it crosses PyTorch's C++ autograd engine."""
    import ctypes
    import deftc_lib
    lib = deftc_lib.library()
    x, off = torch.randn(1, 4, 5, 5, requires_grad=True), torch.randn(1, 18, 5, 5, requires_grad=True)
    w, b = torch.randn(4, 4, 3, 3, requires_grad=True), torch.randn(4, requires_grad=True)
    y = dtt.deform_conv2d(x, off, w, b, padding=1)
    err = None
    lib.dt_inject_arm(ctypes.c_int(0), ctypes.c_long(1))  # DT_INJECT_HOST_ALLOC: the next host allocation fails
    try:
        y.backward(torch.ones_like(y))
    except Exception as e:
        err = e
    lib.dt_inject_arm(ctypes.c_int(0), ctypes.c_long(0))  # disarmed
    y = dtt.deform_conv2d(x, off, w, b, padding=1)
    y.backward(torch.ones_like(y))
    return err, x.grad is not None


def paths_family():
    """This run's path is the one $DEFTC_TORCH_OP names (else compiled when built); its argument
    errors are RuntimeErrors with the op's name (on ctypes deftc_lib.DeftcError: also a ValueError,
    status -1);
    and, when the compiled operator is built, both paths give the same bits (results, every
    gradient, their strides) in each dtype, layout and mode."""
    import subprocess
    import tempfile
    import deftc_lib
    forced = os.environ.get('DEFTC_TORCH_OP')
    check('this run is on the %s path (%s)' % (dtt.OP_PATH, '$DEFTC_TORCH_OP' if forced else 'compiled when built'),
          dtt.OP_PATH == (forced or dtt.OP_PATH) and dtt.OP_PATH in ('compiled', 'ctypes'))
    x, off, w = torch.zeros(1, 4, 6, 6), torch.zeros(1, 18, 6, 6), torch.zeros(2, 4, 3, 3)
    try:
        dtt.deform_conv2d(x, off[:, :5], w, padding=1)
        err = None
    except Exception as e:
        err = e
    if dtt.OP_PATH == 'compiled':  # PyTorch's own exception classes (deftc_torch_op.cpp: raise_deftc)
        check('compiled: an argument error is a RuntimeError with the op\'s message', isinstance(err, RuntimeError)
              and str(err).startswith('deftc::deform_conv2d: the shape of the offset tensor'), repr(err))
    else:
        check('ctypes: an argument error is deftc_lib.DeftcError (RuntimeError, ValueError, status -1)',
              isinstance(err, deftc_lib.DeftcError) and isinstance(err, ValueError) and err.status == -1
              and str(err).startswith('deftc::deform_conv2d: the shape of the offset tensor'), repr(err))
    ran = pair_python_calls()
    if dtt.OP_PATH == 'compiled':
        check('compiled: a forward + backward pair runs no Python of deftc_torch or torch.library (the autograd '
              'formula is C++)', not ran, ', '.join(ran[:8]))
    else:
        check('ctypes: a forward + backward pair runs its kernels and autograd formula in Python (the probe sees '
              'them)', any(name.endswith(':_backward') for name in ran), ', '.join(ran[:8]))
    err, again = backward_oom()
    check('%s: an out of memory in the backward (host allocation failed by injection) reaches the caller as '
          'torch.OutOfMemoryError (on ctypes deftc_lib.DeftcOutOfMemory, one), and the next pair works' % dtt.OP_PATH,
          isinstance(err, torch.OutOfMemoryError) and 'out of host memory' in str(err) and again and
          (dtt.OP_PATH == 'compiled' or isinstance(err, deftc_lib.DeftcOutOfMemory)), repr(err))
    lib = deftc_lib.found()
    if not (lib and os.path.isfile(os.path.join(os.path.dirname(lib), 'deftc_torch_op.so'))):
        skip('compiled and ctypes paths give the same bits', 'the compiled operator is not built: make torch-op')
        return
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in ('compiled', 'ctypes'):
            out = os.path.join(tmp, path + '.pt')
            run = subprocess.run([sys.executable, '-c', PATHS_CASE % os.path.join(HERE, '..', '..', 'python'), out],
                                 env=dict(os.environ, DEFTC_TORCH_OP=path), capture_output=True, text=True)
            if run.returncode:
                check('the %s path runs the comparison case' % path, False, run.stderr[-500:])
                return
            got[path] = torch.load(out)
    same = all(torch.equal(ta, tb) and sa == sb for ca, cb in zip(got['compiled'][1], got['ctypes'][1])
               for (ta, sa), (tb, sb) in zip(ca, cb))
    check('compiled and ctypes paths give the same bits (6 dtypes / layouts / modes: y, 5 gradients, strides)',
          (got['compiled'][0], got['ctypes'][0]) == ('compiled', 'ctypes') and same)


for dev in DEVICES:
    for family in (forward_family, backward_family, grid_family, autocast_family, wrong_sizes_family, tools_family,
                   module_family):
        try:
            family(dev)
        except Exception as ex:  # a family that cannot finish is a failure, named
            check('%s %s ran to its end' % (dev.type, family.__name__), False, '%s: %s' % (type(ex).__name__, ex))
paths_family()
if torch.cuda.is_available():
    cpu_cuda_family()
else:
    print('(no CUDA device: the CUDA checks - every family on cuda, CPU-vs-CUDA gradients - did not run)')
failed = results.count(False)
print('%d passed, %d failed, %d skipped' % (len(results) - failed, failed, len(skipped)))
sys.exit(1 if failed else 0)
