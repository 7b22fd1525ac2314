"""deftc_torch (python/deftc_torch.py) against torchvision on the GPU: forward and every
gradient on many shapes in both modes, deterministic=True bit for bit, the formats the drop-in
passes as they are (channels_last float32, bfloat16, mixed layouts, bf16 offsets) with checks
that nothing was copied, autocast (bf16 and fp16), precision='bf16' / 'tf32' within the formats'
bounds (tests/api/deform_bounds.py), a second GPU when present, a non-default stream,
non-contiguous inputs, float64 (deftc's f64 kernels), float16, weight groups, CPU tensors (the
same values as on the GPU), the module drop-in (state_dict, channels_last training step),
swap_deform_convs, and the errors. Needs a GPU, torch and torchvision. (The operator's checks
that also run on the CPU - torchvision's test families, compile, export, opcheck:
tests/api/test_deftc_torch_ops.py.)

    python3 tests/api/test_deftc_torch.py [path/to/libdeftc.so]

Prints one line per check and 'N passed, N failed'; exits non-zero if any failed."""
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
sys.path.insert(0, HERE)
if len(sys.argv) > 1:
    os.environ['DEFTC_LIB'] = os.path.abspath(sys.argv[1])
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402
from torchvision.ops import deform_conv2d as tv_deform_conv2d  # noqa: E402

import deftc_torch as dtt  # noqa: E402
from deform_bounds import NAMES, U_BF16, U_TF32, factor, majorants, offsets, reference, rel, terms, within  # noqa: E402

CL, NCHW = torch.channels_last, torch.contiguous_format
F32, BF16 = torch.float32, torch.bfloat16
results = []


def check(name, ok, detail=''):
    results.append((name, ok))
    print('%-5s %s%s' % ('ok' if ok else 'FAIL', name, ('  ' + detail) if detail else ''))


def inputs(n, c, h, w, cout, k, s, p, d, G, mask, bias, dev, seed, dtype=F32, x_fmt=None, w_fmt=None, off_fmt=None,
           mask_fmt=None, gy_fmt=None):
    """Leaf tensors x, offset, mask, weight, bias (of dtype unless said) and grad_y; each *_fmt is
    (dtype, memory format) for that tensor (gy_fmt: the result's, which grad_y then matches).
    The offsets keep off the bilinear kinks (deform_bounds.offsets)."""
    g = torch.Generator(device='cpu').manual_seed(seed)
    ho = (h + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (k - 1) - 1) // s + 1
    dflt = (dtype, NCHW)

    def mk(t, f=None):
        f = f or dflt
        return t.to(dev, f[0]).contiguous(memory_format=f[1])
    x = mk(torch.randn(n, c, h, w, generator=g), x_fmt).requires_grad_()
    off = mk(offsets(n, 2 * G * k * k, ho, wo, generator=g), off_fmt).requires_grad_()
    m = mk(torch.rand(n, G * k * k, ho, wo, generator=g), mask_fmt).requires_grad_() if mask else None
    wt = mk(torch.randn(cout, c, k, k, generator=g) * (c * k * k) ** -0.5, w_fmt).requires_grad_()
    b = mk(torch.randn(cout, generator=g)).requires_grad_() if bias else None
    gy = mk(torch.randn(n, cout, ho, wo, generator=g), gy_fmt)
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


def compare(label, ref, got, tol=1e-5):
    worst = max(rel(a, b) for a, b in zip(got, ref) if b is not None)
    check(label, worst <= tol, 'worst rel err %.2e' % worst)


def bounded(label, got, tensors, geom, u, r, names=NAMES):
    """Every result within the format bound against torchvision's fp32 on `tensors` (x, offset,
    mask, weight, bias, grad_y: the values deftc computed with, any dtype)."""
    ref, big = reference(*tensors, *geom), majorants(*tensors, *geom)
    k = factor(u, r, terms(tensors[0], tensors[3], tensors[1]))
    for name, g, rf, mj in zip(NAMES, got, ref, big):
        if g is not None and name in names:
            ok, worst = within(g, rf, mj, k)
            check('%s: %s within the bound' % (label, name), ok, 'worst %.2f of it' % worst)
    return ref


def formats_kept(label, leaves):
    """Each gradient in its input's dtype and memory layout (what autograd keeps as it is)."""
    ok = all(t.grad.dtype == t.dtype and t.grad.stride() == t.stride() for t in leaves if t is not None)
    check(label + ': gradients in the inputs\' dtypes and layouts', ok,
          ', '.join('%s %s' % (t.grad.dtype, t.grad.stride()) for t in leaves if t is not None))


class Recorder:
    """Stands in for the loaded library: records the pointers deftc_torch passes (forward: x,
    offset, mask, weight, bias, y; backward: x, offset, mask, weight, grad_y, grad_x, grad_offset,
    grad_mask, grad_weight, grad_bias), then makes the call."""

    def __init__(self, lib):
        self.lib, self.calls = lib, []

    def __getattr__(self, name):
        fn = getattr(self.lib, name)
        if name not in ('dt_deform_api_forward', 'dt_deform_api_backward'):
            return fn

        def call(*args):
            self.calls.append([a.value if isinstance(a, ctypes.c_void_p) else a for a in args[2:-1]])
            return fn(*args)
        return call


def last_calls():
    """The compiled operator's record of its last forward and backward C calls
    (deftc_torch_op_last_call): the pointers in the Recorder's order, and the scratch blocks each
    took from PyTorch's caching allocator (which torch.cuda.memory_stats counts too)."""
    so = ctypes.CDLL(dtt._COMPILED_OP)  # the loaded operator: the same library, the same record
    so.deftc_torch_op_last_call.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
    calls, scratch = [], []
    for which, n in ((0, 6), (1, 10)):
        out = (ctypes.c_uint64 * 11)()
        so.deftc_torch_op_last_call(which, out)
        calls.append([p or None for p in out[:n]])
        scratch.append(out[10])
    return calls, scratch


def allocations(dev):
    return torch.cuda.memory_stats(dev)['allocation.all.allocated']


def no_copy(label, x, off, m, wt, b, gy, **kw):
    """Runs the op once, recording what it hands to deftc and what PyTorch allocates: tensors in
    formats deftc takes are passed as they are; the forward allocates y alone, the backward the
    gradients alone, and autograd keeps them as they are (no layout or dtype fix-up copy)."""
    leaves = [t for t in (x, off, m, wt, b) if t is not None]
    for t in leaves:
        t.grad = None
    lib = dtt.library()
    rec = Recorder(lib)
    dtt.library = lambda: rec
    try:
        a0 = allocations(x.device)
        y = dtt.deform_conv2d(x, off, wt, b, mask=m, **kw)
        a1 = allocations(x.device)
        y.backward(gy)
        a2 = allocations(x.device)
    finally:
        dtt.library = lambda: lib
    ptr = lambda t: t.data_ptr() if t is not None else None
    # ctypes: what went through the library's entries (scratch from deftc's pool); compiled: the
    # operator's own record of its C calls (they do not go through ctypes), whose scratch comes
    # from PyTorch's allocator and is taken out of the counts
    (fwd, bwd), (sf, sb) = (rec.calls, (0, 0)) if dtt.OP_PATH == 'ctypes' else last_calls()
    check(label + ': x, offset, mask, weight, bias passed as they are; y is deftc\'s output',
          fwd == [ptr(x), ptr(off), ptr(m), ptr(wt), ptr(b), ptr(y)])
    check(label + ': the forward allocates y alone', a1 - a0 - sf == 1, '%d allocations, %d scratch' % (a1 - a0, sf))
    check(label + ': grad_y passed as it is, every gradient is the buffer deftc wrote',
          bwd[:5] == [ptr(x), ptr(off), ptr(m), ptr(wt), ptr(gy)] and
          bwd[5:] == [ptr(t.grad) if t is not None else None for t in (x, off, m, wt, b)])
    check(label + ': the backward allocates the gradients alone', a2 - a1 - sb == len(leaves),
          '%d allocations, %d scratch' % (a2 - a1, sb))
    formats_kept(label, leaves)
    return y


dev = torch.device('cuda', 0)

# ---- float32 NCHW, both modes, against torchvision ----
for ci, cs in enumerate(CASES):
    n, c, h, w, cout, k, s, p, d, G, mask, bias = cs
    x, off, m, wt, b, gy = inputs(*cs, dev=dev, seed=ci)
    ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, s, p, d)
    for mode in ('deft', 'unfused'):
        for det in (False, True):
            fn = lambda *a, **kw: dtt.deform_conv2d(*a, mode=mode, deterministic=det, **kw)
            compare('case %d %s%s vs torchvision' % (ci, mode, ' det' if det else ''), ref, grads(fn, x, off, m, wt, b, gy, s, p, d))

# ---- channels_last float32: x, weight, offsets and mask passed as they are ----
for ci in (0, 1, 3, 4):
    cs = CASES[ci]
    s, p, d = cs[6:9]
    x, off, m, wt, b, gy = inputs(*cs, dev=dev, seed=20 + ci, x_fmt=(F32, CL), w_fmt=(F32, CL), off_fmt=(F32, CL),
                                  mask_fmt=(F32, CL), gy_fmt=(F32, CL))
    ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, s, p, d)
    for det in (False, True):
        fn = lambda *a, **kw: dtt.deform_conv2d(*a, deterministic=det, **kw)
        got = grads(fn, x, off, m, wt, b, gy, s, p, d)
        compare('channels_last f32 case %d%s vs torchvision' % (ci, ' det' if det else ''), ref, got)
    check('channels_last f32 case %d: result channels_last' % ci, got[0].is_contiguous(memory_format=CL))
    no_copy('channels_last f32 case %d' % ci, x, off, m, wt, b, gy, stride=s, padding=p, dilation=d)
# the unfused baseline is NCHW: channels_last tensors are made contiguous for it, same values
compare('channels_last f32, mode=unfused (copied to NCHW) vs torchvision', ref,
        grads(lambda *a, **kw: dtt.deform_conv2d(*a, mode='unfused', **kw), x, off, m, wt, b, gy, s, p, d))

# ---- mixed layouts: NCHW x with a channels_last weight, and the reverse ----
for label, xf, wf in (('NCHW x, channels_last weight', NCHW, CL), ('channels_last x, NCHW weight', CL, NCHW)):
    x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=30, x_fmt=(F32, xf), w_fmt=(F32, wf), gy_fmt=(F32, xf))
    ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
    compare('mixed: %s vs torchvision' % label, ref, grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1))
    no_copy('mixed: ' + label, x, off, m, wt, b, gy, padding=1)

# ---- bf16 offsets and mask with float32 x (the offsets of a bf16 conv) ----
for of in (NCHW, CL):
    x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=40, off_fmt=(BF16, of), mask_fmt=(BF16, of))
    got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
    label = 'f32 x, bf16 %s offsets and mask' % ('channels_last' if of == CL else 'NCHW')
    ref = reference(x, off, m, wt, b, gy, 1, 1, 1)  # on the bf16 offsets' own values
    compare(label + ': y, dx, dweight, dbias vs torchvision', [ref[i] for i in (0, 1, 4, 5)], [got[i] for i in (0, 1, 4, 5)])
    bounded(label, got, (x, off, m, wt, b, gy), (1, 1, 1), U_BF16, 1, names=('doffset', 'dmask'))  # rounded once
    no_copy(label, x, off, m, wt, b, gy, padding=1)

# ---- bfloat16 channels_last tensors: deftc's bf16 kernels on them as they are ----
BF16_CL = dict(x_fmt=(BF16, CL), w_fmt=(BF16, CL), off_fmt=(BF16, CL), mask_fmt=(BF16, CL), gy_fmt=(BF16, CL))
for ci in (0, 1, 2, 3, 4, 7):
    cs = CASES[ci]
    s, p, d = cs[6:9]
    x, off, m, wt, b, gy = inputs(*cs, dev=dev, seed=50 + ci, **BF16_CL)
    label = 'bf16 channels_last case %d' % ci
    got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, s, p, d)
    check(label + ': result bf16 channels_last', got[0].dtype == BF16 and got[0].is_contiguous(memory_format=CL))
    ref = bounded(label, got, (x, off, m, wt, b, gy), (s, p, d), U_BF16, 4)
    check(label + ': differs from fp32 (bf16 ran)', rel(got[0], ref[0]) > 1e-4, 'rel err %.2e' % rel(got[0], ref[0]))
    no_copy(label, x, off, m, wt, b, gy, stride=s, padding=p, dilation=d)
    r2 = grads(lambda *a, **kw: dtt.deform_conv2d(*a, deterministic=True, **kw), x, off, m, wt, b, gy, s, p, d)
    r3 = grads(lambda *a, **kw: dtt.deform_conv2d(*a, deterministic=True, **kw), x, off, m, wt, b, gy, s, p, d)
    check(label + ': deterministic=True bitwise equal across runs', all(torch.equal(a, c) for a, c in zip(r2, r3) if a is not None))

# ---- autocast(bfloat16): the op runs deftc's bf16 path, as PyTorch's convs do ----
for xf in (NCHW, CL):
    fmt = dict(x_fmt=(F32, xf), w_fmt=(F32, xf), gy_fmt=(BF16, CL))
    x, off, m, wt, b, gy = inputs(*CASES[3][:10], True, True, dev=dev, seed=60, **fmt)
    label = 'autocast bf16, %s float32 tensors' % ('channels_last' if xf == CL else 'NCHW')
    with torch.autocast('cuda', dtype=BF16):
        got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
        yt = tv_deform_conv2d(x, off, wt, b, padding=1, mask=m)
    check(label + ': result bf16 channels_last (torchvision\'s: %s)' % yt.dtype,
          got[0].dtype == BF16 and got[0].is_contiguous(memory_format=CL))
    # x is cast to bf16 (as autocast would); the fp32 weight is rounded inside deftc
    bounded(label, got, (x.detach().to(BF16), off, m, wt, b, gy), (1, 1, 1), U_BF16, 4)
    formats_kept(label, (x, off, m, wt, b))
    check(label + ': differs from fp32 (bf16 ran)', rel(got[0], yt) > 1e-4, 'rel err %.2e' % rel(got[0], yt))

# a channels_last net's layer under autocast: bf16 offsets from PyTorch's conv, the fp32 master
# weight, both passed as they are; gradients back to the fp32 parameters in their layout
x = torch.randn(4, 32, 16, 16, device=dev).contiguous(memory_format=CL).requires_grad_()
woff = (torch.randn(18, 32, 3, 3, device=dev) * 0.05).contiguous(memory_format=CL).requires_grad_()
wt = (torch.randn(32, 32, 3, 3, device=dev) / 17).contiguous(memory_format=CL).requires_grad_()
lib = dtt.library()
rec = Recorder(lib)
dtt.library = lambda: rec
with torch.autocast('cuda', dtype=BF16):
    o = F.conv2d(x, woff, padding=1)
    y = dtt.deform_conv2d(x, o, wt, padding=1)
dtt.library = lambda: lib
check('autocast, channels_last net: offsets from the conv are bf16 channels_last', o.dtype == BF16 and o.is_contiguous(memory_format=CL))
fwd_call = last_calls()[0][0] if dtt.OP_PATH == 'compiled' else rec.calls[0]  # the compiled op's own record
check('autocast, channels_last net: the offsets and the weight passed as they are', fwd_call[1] == o.data_ptr() and
      fwd_call[3] == wt.data_ptr())
y.float().square().sum().backward()
formats_kept('autocast, channels_last net', (x, woff, wt))
check('autocast, channels_last net: gradients finite', all(bool(t.grad.isfinite().all()) for t in (x, woff, wt)))
ref_y = reference(x.detach().to(BF16), o, None, wt, None, torch.zeros_like(y), 1, 1, 1)[0]
big_y = majorants(x.detach().to(BF16), o, None, wt, None, torch.zeros_like(y), 1, 1, 1)[0]
ok, worst = within(y, ref_y, big_y, factor(U_BF16, 4, terms(x, wt, o)))
check('autocast, channels_last net: y within the bound', ok, 'worst %.2f of it' % worst)

# DCNv2 as detection models write it: one offset conv, its channels [0, 18) the offsets and the
# sigmoid of [18, 27) the mask - channel slices deftc reads where they lie (the pitches), no copy
woff27 = (torch.randn(27, 32, 3, 3, device=dev) * 0.05).contiguous(memory_format=CL).requires_grad_()
with torch.autocast('cuda', dtype=BF16):
    o27 = F.conv2d(x, woff27, padding=1)
    sig = torch.sigmoid(o27)
    sl_off, sl_m = o27[:, :18], sig[:, 18:]
    rec = Recorder(lib)
    dtt.library = lambda: rec
    a0 = allocations(dev)
    y = dtt.deform_conv2d(x, sl_off, wt, padding=1, mask=sl_m)
    a1 = allocations(dev)
    dtt.library = lambda: lib
    # the compiled op's own record of that call (taken before the next one), or the Recorder's
    fwd_call, sf = (last_calls()[0][0], last_calls()[1][0]) if dtt.OP_PATH == 'compiled' else (rec.calls[0], 0)
    y_dense = dtt.deform_conv2d(x, sl_off.contiguous(memory_format=CL), wt, padding=1,
                                mask=sl_m.contiguous(memory_format=CL))
check('DCNv2 slices: offsets and mask passed where they lie', fwd_call[1] == sl_off.data_ptr() and
      fwd_call[2] == sl_m.data_ptr(), '%s vs %x %x' % (fwd_call[1:3], sl_off.data_ptr(), sl_m.data_ptr()))
check('DCNv2 slices: the forward allocates y alone', a1 - a0 - sf == 1, '%d allocations, %d scratch' % (a1 - a0, sf))
check('DCNv2 slices: y bit for bit that of dense copies', torch.equal(y, y_dense))
g_sl = torch.autograd.grad(y.float().square().sum(), (x, woff27, wt))
g_de = torch.autograd.grad(y_dense.float().square().sum(), (x, woff27, wt))
check('DCNv2 slices: every gradient bit for bit that of dense copies', all(torch.equal(a, b2) for a, b2 in zip(g_sl, g_de)))

# float32 under autocast where deftc has no bf16 path to offer, as torchvision does
x, off, m, wt, b, gy = inputs(*CASES[3], dev=dev, seed=61)
for label, kw, dt in (("mode='unfused'", dict(mode='unfused'), BF16), ("precision='fp32'", dict(precision='fp32'), BF16),
                      ('float16 autocast', {}, torch.float16)):
    with torch.autocast('cuda', dtype=dt):
        ya = dtt.deform_conv2d(x, off, wt, b, padding=1, mask=m, **kw)
        yt = tv_deform_conv2d(x, off, wt, b, padding=1, mask=m)
    check('autocast, %s: float32 result like torchvision\'s' % label, ya.dtype == yt.dtype == F32, str(ya.dtype))
    check('autocast, %s: same values' % label, rel(ya, yt) < 1e-5, 'rel err %.2e' % rel(ya, yt))

# ---- precision= on float32 tensors ----
x, off, m, wt, b, gy = inputs(*CASES[3][:10], True, True, dev=dev, seed=10)
got = grads(lambda *a, **kw: dtt.deform_conv2d(*a, precision='bf16', **kw), x, off, m, wt, b, gy, 1, 1, 1)
check("precision='bf16': float32 NCHW results", all(g.dtype == F32 for g in got) and got[0].is_contiguous())
# x and grad_y are rounded to bf16 inside (x: the reference takes the rounded values; grad_y's
# rounding is one of the r = 4 on the gradients' paths, which take 3 otherwise)
ref = bounded("precision='bf16'", got, (x.detach().to(BF16), off, m, wt, b, gy), (1, 1, 1), U_BF16, 4)
check("precision='bf16': differs from fp32 (bf16 ran)", rel(got[0], ref[0]) > 1e-4, 'rel err %.2e' % rel(got[0], ref[0]))
got = grads(lambda *a, **kw: dtt.deform_conv2d(*a, precision='tf32', **kw), x, off, m, wt, b, gy, 1, 1, 1)
bounded("precision='tf32'", got, (x, off, m, wt, b, gy), (1, 1, 1), U_TF32, 4)

# ---- deterministic: bit for bit, twice ----
x, off, m, wt, b, gy = inputs(*CASES[3], dev=dev, seed=99)
fn = lambda *a, **kw: dtt.deform_conv2d(*a, deterministic=True, **kw)
r1, r2 = grads(fn, x, off, m, wt, b, gy, 1, 1, 1), grads(fn, x, off, m, wt, b, gy, 1, 1, 1)
check('deterministic=True: gradients bitwise equal across runs', all(torch.equal(a, b2) for a, b2 in zip(r1, r2) if a is not None))

# ---- a non-default stream ----
for label, fmt in (('f32', {}), ('bf16 channels_last', BF16_CL)):
    x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=5, **fmt)
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
    torch.cuda.synchronize()
    if fmt:
        bounded('non-default stream, ' + label, got, (x, off, m, wt, b, gy), (1, 1, 1), U_BF16, 4)
    else:
        compare('non-default stream, f32 vs torchvision', grads(tv_deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1), got)

# ---- non-contiguous inputs (views of larger / transposed tensors): copied ----
x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=6)
xb = torch.randn(2, 16, 11, 13, device=dev).transpose(2, 3).requires_grad_()
offb = torch.randn(2, 18 * 2, 13, 11, device=dev)[:, ::2].requires_grad_()
assert not xb.is_contiguous() and not xb.is_contiguous(memory_format=CL) and not offb.is_contiguous()
ref = grads(tv_deform_conv2d, xb, offb, m, wt, b, gy, 1, 1, 1)
got = grads(dtt.deform_conv2d, xb, offb, m, wt, b, gy, 1, 1, 1)
compare('non-contiguous input and offset', ref, got)
# autograd wants a dense input's gradient in its strides, any other's contiguous: given so, not re-copied
check('non-contiguous input: gradients in the strides autograd keeps', xb.grad.stride() == xb.stride() and
      offb.grad.is_contiguous(), '%s %s' % (xb.grad.stride(), offb.grad.stride()))

# ---- float64 in, float64 out (deftc's f64 kernels, in double) ----
x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=7, dtype=torch.float64)
ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
check('float64: result and gradient dtypes', all(g.dtype == torch.float64 for g in got if g is not None))
compare('float64 vs torchvision (double inside)', ref, got, tol=1e-10)

# ---- float16 without autocast: float16 out, as torchvision's (computed in float32 by deftc) ----
x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=8, dtype=torch.float16)
got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
check('float16: result and gradient dtypes', all(g.dtype == torch.float16 for g in got if g is not None))
# torchvision's fp32 on the same float16 values: deftc rounds each result to float16 once
compare('float16 vs torchvision in float32 on the same values', reference(x, off, m, wt, b, gy, 1, 1, 1), got, tol=2e-3)

# ---- weight groups (torchvision's groups): against torchvision in both modes ----
for wg in (2, 4):
    x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=11 + wg)
    wg_w = wt.detach()[:, :16 // wg].contiguous().requires_grad_()
    ref = grads(tv_deform_conv2d, x, off, m, wg_w, b, gy, 1, 1, 1)
    for mode in ('deft', 'unfused'):
        fn = lambda *a, **kw: dtt.deform_conv2d(*a, mode=mode, **kw)
        compare('%d weight groups, %s vs torchvision' % (wg, mode), ref, grads(fn, x, off, m, wg_w, b, gy, 1, 1, 1))

# ---- CPU tensors: deftc's CPU twins, the same values as on the GPU ----
x, off, m, wt, b, gy = inputs(*CASES[4], dev=dev, seed=12)
ref = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
cpu = [t.detach().cpu().requires_grad_() if t is not None else None for t in (x, off, m, wt, b)]
got = grads(dtt.deform_conv2d, *cpu, gy.cpu(), 1, 1, 1)
check('CPU tensors: results on the CPU', all(g.device.type == 'cpu' for g in got if g is not None))
compare('CPU tensors vs the same op on the GPU', [t.cpu() if t is not None else None for t in ref], got)

# ---- the module: torchvision's state_dict loads, same outputs; swap_deform_convs ----
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
# a training step of a channels_last model under autocast (the benchmark's configuration)
conv, offc = dtt.DeformConv2d(16, 16, 3, padding=1).to(dev), torch.nn.Conv2d(16, 18, 3, padding=1).to(dev)
conv, offc = conv.to(memory_format=CL), offc.to(memory_format=CL)
opt = torch.optim.SGD(list(conv.parameters()) + list(offc.parameters()), lr=0.1)
w0 = conv.weight.detach().clone()
with torch.autocast('cuda', dtype=BF16):
    xi = xi.contiguous(memory_format=CL)
    loss = conv(xi, offc(xi)).float().square().mean()
loss.backward()
check('DeformConv2d, channels_last + autocast: fp32 parameter gradients in their layouts',
      conv.weight.grad.dtype == F32 and conv.weight.grad.stride() == conv.weight.stride() and conv.bias.grad.dtype == F32)
opt.step()
check('DeformConv2d, channels_last + autocast: the step moves the weight', not torch.equal(w0, conv.weight.detach()))

# ---- a second GPU, when there is one ----
if torch.cuda.device_count() > 1:
    dev1 = torch.device('cuda', 1)
    x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev1, seed=9)
    ref = grads(tv_deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
    got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
    compare('second GPU (cuda:1)', ref, got)
    check('second GPU: result on cuda:1', got[0].device == dev1)
    x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev1, seed=9, **BF16_CL)
    got = grads(dtt.deform_conv2d, x, off, m, wt, b, gy, 1, 1, 1)
    bounded('second GPU, bf16 channels_last', got, (x, off, m, wt, b, gy), (1, 1, 1), U_BF16, 4)
    x0, off0, m0, wt0, b0, gy0 = inputs(*CASES[0], dev=dev, seed=9)
    got0 = grads(dtt.deform_conv2d, x0, off0, m0, wt0, b0, gy0, 1, 1, 1)
    compare('device 0 again after device 1', [t.to(dev) if t is not None else None for t in ref], got0)
else:
    print('(one GPU: the second-device checks did not run)')


# ---- a PyTorch training step with deftc's op, captured whole by torch.cuda.graph (issue 36) ----

class GraphNet(torch.nn.Module):
    """conv -> BN -> ReLU -> a deformable conv whose offsets a conv makes -> pooled linear head:
    deftc's op inside an ordinary PyTorch model, every parameter trained."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)
        self.offset = torch.nn.Conv2d(16, 18, 3, padding=1)
        self.deform = dtt.DeformConv2d(16, 16, 3, padding=1, deterministic=True)
        self.head = torch.nn.Linear(16, 10)
        torch.nn.init.normal_(self.offset.weight, std=0.05)  # offsets of about a pixel, not zero

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)))
        h = F.relu(self.deform(h, self.offset(h)))
        return self.head(h.mean((2, 3)))


def graph_vs_eager(amp, channels_last, steps=6):
    """The same steps eagerly and as the replays of one captured step (static input, loss,
    SGD's update inside the graph): the losses and the parameters bit for bit (deterministic)."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    g = torch.Generator(device=dev).manual_seed(71)
    xs = [torch.randn(8, 3, 20, 20, device=dev, generator=g).contiguous(memory_format=fmt) for _ in range(steps)]
    ys = [torch.randint(0, 10, (8,), device=dev, generator=g) for _ in range(steps)]
    runs = []
    for graphed in (False, True):
        torch.manual_seed(72)
        net = GraphNet().to(dev).to(memory_format=fmt)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        sx, sy = xs[0].clone(), ys[0].clone()

        def step():
            opt.zero_grad(set_to_none=False)
            # no autocast cache: a cast cached in one replay's memory is not the next one's (PyTorch's
            # advice for graphs)
            with torch.autocast('cuda', dtype=BF16, enabled=amp, cache_enabled=False):
                loss = F.cross_entropy(net(sx), sy)
            loss.backward()
            opt.step()
            return loss.detach()
        losses = []
        if graphed:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph asks
                for i in range(2):
                    sx.copy_(xs[i]), sy.copy_(ys[i])
                    losses.append(step().clone())
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_loss = step()
            for i in range(2, steps):
                sx.copy_(xs[i]), sy.copy_(ys[i])
                graph.replay()
                losses.append(static_loss.clone())
        else:
            for i in range(steps):
                sx.copy_(xs[i]), sy.copy_(ys[i])
                losses.append(step())
        torch.cuda.synchronize()
        runs.append((torch.stack(losses).cpu(), [p.detach().cpu() for p in net.parameters()]))
    return runs


cudnn_flags = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False  # PyTorch's convs bitwise too
for amp, cl in ((False, False), (True, True)):
    label = 'torch.cuda.graph of a training step with deftc\'s op (%s, path %s)' % (
        'bf16 autocast + channels_last' if amp else 'fp32', dtt.OP_PATH)
    try:
        (le, pe), (lg, pg) = graph_vs_eager(amp, cl)
        same = torch.equal(le, lg) and all(torch.equal(a, b) for a, b in zip(pe, pg))
        check(label + ': the losses and the parameters of the replays are the eager run\'s, bit for bit', same,
              'losses %s vs %s' % (le.tolist(), lg.tolist()))
        # not two neighbours: a bf16 loss is a coarse number, and two steps' may round alike (the
        # H200's 3rd and 4th did); a replay that reran one input would show as a mismatch above
        check(label + ': the replays ran on new inputs (their losses are not all one value, finite)',
              len(set(lg[2:].tolist())) > 1 and bool(lg.isfinite().all()), str(lg.tolist()))
    except Exception as e:  # a capture that fails is this check's failure, named, not the suite's end
        check(label + ': captured and replayed', False, '%s: %s' % (type(e).__name__, e))
torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_flags


# ---- errors: RuntimeErrors on both paths (deftc_lib.DeftcError on ctypes, PyTorch's c10::Error on
# the compiled operator) ----
def raises(exc, needle, fn):
    try:
        fn()
    except exc as e:
        return needle in str(e)
    return False


x, off, m, wt, b, gy = inputs(*CASES[0], dev=dev, seed=10)
check('error: tensors on two devices', raises(RuntimeError, 'is on cpu', lambda: dtt.deform_conv2d(x, off.cpu(), wt,
                                                                                                 padding=1)))
check('error: weight groups that do not divide', raises(RuntimeError, 'weight groups', lambda: dtt.deform_conv2d(
    x, off, wt[:, :7], padding=1)))
check('error: unknown precision', raises(RuntimeError, 'precision', lambda: dtt.deform_conv2d(x, off, wt, padding=1, precision='fp16')))
check('error: bad mask channels', raises(RuntimeError, 'mask', lambda: dtt.deform_conv2d(x, off, wt, padding=1, mask=m[:, :5])))
check('error: an integer offset', raises(RuntimeError, 'floating-point', lambda: dtt.deform_conv2d(x, off.int(), wt,
                                                                                                  padding=1)))
check("error: bf16 tensors with mode='unfused'", raises(RuntimeError, "mode='unfused'", lambda: dtt.deform_conv2d(
    x.detach().to(BF16), off, wt, padding=1, mode='unfused')))
check("error: precision='bf16' with mode='unfused'", raises(RuntimeError, "mode='unfused'", lambda: dtt.deform_conv2d(
    x, off, wt, padding=1, mode='unfused', precision='bf16')))
check('error: deftc\'s own message (input too small)', raises(RuntimeError, 'too small', lambda: dtt.deform_conv2d(
    x[:, :, :1, :1], torch.zeros(2, 18, 1, 1, device=dev), wt, padding=0)))

failed = sum(1 for _, ok in results if not ok)
print('%d passed, %d failed' % (len(results) - failed, failed))
sys.exit(1 if failed else 0)
