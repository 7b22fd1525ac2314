"""The Python side that runs everywhere (make test, CI: no GPU, maybe no PyTorch): the library
loads, descriptors are checked - sizes, the struct's version, every dtype / layout combination
the kernels run or refuse, weight groups, f64, the device field (dt_deform_api_check needs no
GPU) - the C API runs on host buffers (.device CPU: f32 and f64, weight groups, an empty batch)
against a pure-Python definition, every refusal is a Python exception carrying deftc's message,
a missing library names what to build, and - when PyTorch is installed - deftc_torch refuses bad
arguments clearly (RuntimeErrors), runs on CPU tensors (zero offsets: PyTorch's conv2d) and
decides which tensors it passes as they are and which it copies (tests/api/test_deftc_torch_ops.py
has the rest of the operator's checks).

    python3 tests/api/test_deftc_torch_cpu.py [path/to/libdeftc.so]"""
import ctypes
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
if len(sys.argv) > 1:
    os.environ['DEFTC_LIB'] = os.path.abspath(sys.argv[1])
# PyTorch, when there is one, is imported before libdeftc.so is loaded, as a user's program does
# (import torch, then deftc_torch loads the library): a CUDA build of the library loaded first
# can bind a system NCCL older than the one PyTorch needs, and PyTorch then fails to import.
try:
    import torch as _torch
except ImportError:
    _torch = None  # PyTorch is not installed here: its checks are skipped
import deftc_lib  # noqa: E402

results = []


SKIPPED = 'skipped'  # what a check returns when this machine cannot run it (no PyTorch)


def case(name, fn):
    try:
        results.append((name, fn()))
    except Exception as e:  # a failed expectation
        results.append((name, '%s: %s' % (type(e).__name__, e)))


def expect_raises(exc, needle, fn):
    try:
        fn()
    except exc as e:
        if needle not in str(e):
            raise AssertionError('message %r does not contain %r' % (str(e), needle))
        return
    raise AssertionError('no %s raised' % exc.__name__)


def out_size():
    lib = deftc_lib.library()
    d = deftc_lib.Desc(2, 6, 9, 11, 4, 3, 3, 2, 1, 1, 1, 1, 1, 1, 0, 1)
    ho, wo = ctypes.c_int(), ctypes.c_int()
    deftc_lib.check(lib.dt_deform_api_out_size(ctypes.byref(d), ctypes.byref(ho), ctypes.byref(wo)))
    assert (ho.value, wo.value) == (5, 11), (ho.value, wo.value)


def bad_groups():
    lib = deftc_lib.library()
    d = deftc_lib.Desc(2, 6, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, 0, 0)
    expect_raises(deftc_lib.DeftcError, '6 channels cannot be split into 4 offset groups',
                  lambda: deftc_lib.check(lib.dt_deform_api_out_size(ctypes.byref(d), None, None)))


def host_pointers():
    """Without a GPU: 'no CUDA device' / 'built without CUDA'; with one: 'host memory'."""
    lib = deftc_lib.library()
    d = deftc_lib.Desc(1, 4, 6, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0)
    buf = (ctypes.c_float * 4096)()
    p = ctypes.cast(buf, ctypes.c_void_p)
    try:
        deftc_lib.check(lib.dt_deform_api_forward(ctypes.byref(d), 1, p, p, None, p, None, p, None))
    except deftc_lib.DeftcError as e:
        assert any(s in str(e) for s in ('no CUDA device', 'without CUDA', 'host memory', 'not a CUDA pointer')), str(e)
        return
    raise AssertionError('host pointers were accepted')


GEO = (2, 16, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0)  # n c h w cout kh kw s s p p d d G mask bias
DEFT, UNFUSED, TF32 = deftc_lib.MODES['deft'], deftc_lib.MODES['unfused'], deftc_lib.TF32
F32, BF16, F16, NCHW, NHWC = deftc_lib.F32, deftc_lib.BF16, deftc_lib.F16, deftc_lib.NCHW, deftc_lib.NHWC


def checked(mode, **fields):
    """dt_deform_api_check on GEO with these format fields (no GPU needed)."""
    lib = deftc_lib.library()
    deftc_lib.check(lib.dt_deform_api_check(ctypes.byref(deftc_lib.Desc(*GEO, **fields)), mode))


def refused(cases):
    """Each (label, mode, fields, needle) refused by dt_deform_api_check with needle in the message."""
    for label, mode, fields, needle in cases:
        try:
            checked(mode, **fields)
        except deftc_lib.DeftcError as e:
            if needle not in str(e):
                raise AssertionError('%s: message %r does not contain %r' % (label, str(e), needle))
            continue
        raise AssertionError('%s was accepted' % label)


def formats_accepted():
    """Every format combination the kernels run (or deftc converts) passes the checks."""
    checked(DEFT)
    checked(UNFUSED | TF32)
    checked(DEFT, dtype=F32, layout=NHWC, weight_layout=NHWC)
    checked(DEFT, dtype=BF16, layout=NHWC, weight_dtype=BF16, weight_layout=NHWC)
    checked(DEFT | 16, dtype=BF16, layout=NHWC, offset_dtype=BF16, offset_layout=NHWC, mask_dtype=BF16, mask_layout=NHWC)
    checked(UNFUSED, weight_layout=NHWC, offset_dtype=BF16)


def formats_refused():
    """Each format the kernels do not run is refused with a message naming it."""
    cases = [('f16 x', DEFT, dict(dtype=F16, layout=NHWC), 'f16'),
             ('bf16 nchw x', DEFT, dict(dtype=BF16, layout=NCHW), 'channels last'),
             ('unfused with bf16 x', UNFUSED, dict(dtype=BF16, layout=NHWC), 'unfused baseline is f32 NCHW'),
             ('unfused with nhwc x', UNFUSED, dict(dtype=F32, layout=NHWC), 'unfused baseline'),
             ('TF32 with bf16 x', DEFT | TF32, dict(dtype=BF16, layout=NHWC), 'DT_DEFORM_API_TF32 is for f32 x'),
             ('f16 offsets', DEFT, dict(offset_dtype=F16), 'desc.offset_dtype'),
             ('i32 mask', DEFT, dict(mask_dtype=3), 'desc.mask_dtype'),
             ('weight layout 2', DEFT, dict(weight_layout=2), 'desc.weight_layout'),
             ('x dtype 9', DEFT, dict(dtype=9), 'desc.dtype 9'),
             ('a struct of another size', DEFT, dict(size=64), 'desc.size is 64'),
             ('the former bf16 flag (64)', DEFT | 64, {}, 'not a flag')]
    refused(cases)


def desc_fields():
    """The Python struct is the C one: .size set, formats by name, geometry alone positionally,
    no weight groups and CUDA by default."""
    d = deftc_lib.Desc(*GEO, dtype=BF16, layout=NHWC)
    assert d.size == ctypes.sizeof(deftc_lib.Desc) == 116 and (d.dtype, d.layout, d.offset_dtype) == (BF16, NHWC, F32)
    assert (d.weight_groups, d.device, d.offset_pitch, d.mask_pitch) == (1, deftc_lib.CUDA, 0, 0)
    expect_raises(TypeError, 'geometry', lambda: deftc_lib.Desc(*GEO, 1))
    assert issubclass(deftc_lib.DeftcError, RuntimeError) and issubclass(deftc_lib.DeftcError, ValueError)


def groups_f64_device():
    """Weight groups, f64 and the device field: what is accepted, what is refused and named."""
    F64 = deftc_lib.F64
    every_f64 = dict(dtype=F64, weight_dtype=F64, offset_dtype=F64, mask_dtype=F64)
    checked(DEFT, weight_groups=2)                                  # 16 -> 8 channels in 2 groups
    checked(UNFUSED | 16, weight_groups=8, device=deftc_lib.CPU)
    checked(DEFT, **every_f64)
    checked(UNFUSED, weight_groups=4, device=deftc_lib.CPU, **every_f64)
    cases = [('3 weight groups', DEFT, dict(weight_groups=3), 'cannot be split into 3 weight groups'),
             ('f64 x, f32 weight', DEFT, dict(every_f64, weight_dtype=F32), 'desc.weight_dtype is f32'),
             ('f32 x, f64 mask', DEFT, dict(mask_dtype=F64), 'desc.mask_dtype (mask and grad_mask) is f64'),
             ('f64 channels last', DEFT, dict(every_f64, layout=NHWC), 'NCHW in every tensor'),
             ('f64 with TF32', DEFT | TF32, every_f64, 'DT_DEFORM_API_TF32 is for f32 x'),
             ('device 5', DEFT, dict(device=5), 'desc.device is 5')]
    refused(cases)


def direct(n, c, h, w, cout, k, pad, G, WG, x, off, mask, wt, b):
    """The definition (stride 1, dilation 1), in Python floats: y[n][o][p] flattened NCHW."""
    ho, wo = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    P, K, cw, ow = ho * wo, k * k, c // WG, cout // WG

    def sample(plane, yy, xx):
        if yy <= -1 or yy >= h or xx <= -1 or xx >= w:
            return 0.0
        y0, x0 = int(yy // 1), int(xx // 1)
        v = 0.0
        for a in (0, 1):
            for bb in (0, 1):
                if 0 <= y0 + a < h and 0 <= x0 + bb < w:
                    v += ((yy - y0) if a else 1 - (yy - y0)) * ((xx - x0) if bb else 1 - (xx - x0)) * \
                        plane[(y0 + a) * w + x0 + bb]
        return v
    y = []
    for i in range(n):
        for o in range(cout):
            for p in range(P):
                s = b[o]
                for j in range(cw):
                    ch = o // ow * cw + j
                    tap0 = (i * G + ch // (c // G)) * K
                    for kk in range(K):
                        t = tap0 + kk
                        yy = p // wo - pad + kk // k + off[2 * t * P + p]
                        xx = p % wo - pad + kk % k + off[(2 * t + 1) * P + p]
                        plane = x[(i * c + ch) * h * w:(i * c + ch + 1) * h * w]
                        s += wt[(o * cw + j) * K + kk] * mask[t * P + p] * sample(plane, yy, xx)
                y.append(s)
    return y


def cpu_device_runs():
    """.device CPU: the C API on host buffers (ctypes arrays), f32 and f64 with 2 weight groups
    and 2 offset groups, against the definition; the bias gradient (the sum of grad_y); an empty
    batch zeroes the parameter gradients."""
    import random
    lib = deftc_lib.library()
    rnd = random.Random(3)
    n, c, h, w, cout, k, pad, G, WG = 2, 4, 5, 4, 4, 3, 1, 2, 2
    P, K = h * w, k * k
    x = [rnd.gauss(0, 1) for _ in range(n * c * h * w)]
    off = [rnd.randint(-2, 1) + 0.15 + 0.7 * rnd.random() for _ in range(n * 2 * G * K * P)]
    mask = [rnd.random() for _ in range(n * G * K * P)]
    wt = [rnd.gauss(0, 0.3) for _ in range(cout * (c // WG) * K)]
    b = [rnd.gauss(0, 1) for _ in range(cout)]
    gy = [rnd.gauss(0, 1) for _ in range(n * cout * P)]
    want = direct(n, c, h, w, cout, k, pad, G, WG, x, off, mask, wt, b)
    for label, ctype, dt, tol in (('f32', ctypes.c_float, F32, 1e-5), ('f64', ctypes.c_double, deftc_lib.F64, 1e-12)):
        arr = lambda v: (ctype * len(v))(*v)  # noqa: E731
        bufs = [arr(v) for v in (x, off, mask, wt, b, gy)]
        y, gb = (ctype * len(want))(), (ctype * cout)()
        d = deftc_lib.Desc(n, c, h, w, cout, k, k, 1, 1, pad, pad, 1, 1, G, 1, 1, dtype=dt, weight_dtype=dt,
                           offset_dtype=dt, mask_dtype=dt, weight_groups=WG, device=deftc_lib.CPU)
        p = [ctypes.cast(t, ctypes.c_void_p) for t in bufs + [y, gb]]
        deftc_lib.check(lib.dt_deform_api_forward(ctypes.byref(d), DEFT, p[0], p[1], p[2], p[3], p[4], p[6], None))
        err = max(abs(a - e) for a, e in zip(y, want)) / max(abs(e) for e in want)
        assert err <= tol, '%s: y max error %.3g of the largest |y|' % (label, err)
        deftc_lib.check(lib.dt_deform_api_backward(ctypes.byref(d), DEFT, p[0], p[1], p[2], p[3], p[5], None, None,
                                                   None, None, p[7], None))
        for o in range(cout):
            s = sum(gy[(i * cout + o) * P + q] for i in range(n) for q in range(P))
            assert abs(gb[o] - s) <= 1e-4 * max(1.0, abs(s)), '%s: grad_bias[%d] %g, expected %g' % (label, o, gb[o], s)
        d.n = 0
        gw = arr([float('nan')] * len(wt))
        deftc_lib.check(lib.dt_deform_api_backward(ctypes.byref(d), DEFT, None, None, None, p[3], None, None, None,
                                                   None, ctypes.cast(gw, ctypes.c_void_p), p[7], None))
        assert all(v == 0 for v in gw) and all(v == 0 for v in gb), '%s: an empty batch left gradients' % label


def errors_are_exceptions():
    """A failed call raises DeftcError (a RuntimeError) with deftc's message and status -1, and the
    library stays usable: the next, good call runs. DeftcOutOfMemory is a MemoryError (and
    torch.OutOfMemoryError with PyTorch) and a DeftcError, so one except catches every failure."""
    lib = deftc_lib.library()
    n, c, h, w, cout, k = 1, 2, 4, 4, 2, 3
    d = deftc_lib.Desc(n, c, h, w, cout, k, k, 1, 1, 1, 1, 1, 1, 1, 0, 0, device=deftc_lib.CPU, weight_groups=3)
    F = ctypes.c_float
    x, off, wt, y = (F * (c * h * w))(), (F * (2 * k * k * h * w))(), (F * (cout * c * k * k))(), (F * (cout * h * w))()
    p = [ctypes.cast(t, ctypes.c_void_p) for t in (x, off, wt, y)]

    def bad():
        deftc_lib.check(lib.dt_deform_api_forward(ctypes.byref(d), DEFT, p[0], p[1], None, p[2], None, p[3], None))
    try:
        bad()
        raise AssertionError('no DeftcError raised')
    except deftc_lib.DeftcError as e:
        assert isinstance(e, RuntimeError) and e.status == deftc_lib.ERR_ARG, (type(e), e.status)
        assert 'weight groups' in str(e) and str(e).startswith('deftc: '), str(e)
    d.weight_groups = 1
    for i in range(len(x)):
        x[i] = 1.0
    for i in range(len(wt)):
        wt[i] = 0.5
    deftc_lib.check(lib.dt_deform_api_forward(ctypes.byref(d), DEFT, p[0], p[1], None, p[2], None, p[3], None))
    assert y[5] == 0.5 * c * k * k, 'the call after the failure: y[5] = %g' % y[5]
    oom = deftc_lib.DeftcOutOfMemory('deftc: out of memory', deftc_lib.ERR_OOM)
    assert isinstance(oom, MemoryError) and isinstance(oom, deftc_lib.DeftcError)
    if _torch is not None and hasattr(_torch, 'OutOfMemoryError'):
        assert isinstance(oom, _torch.OutOfMemoryError)
    lib.dt_deform_api_error.restype = ctypes.c_char_p
    assert isinstance(deftc_lib.error_for(deftc_lib.ERR_OOM), deftc_lib.DeftcOutOfMemory)
    assert type(deftc_lib.error_for(deftc_lib.ERR_DEVICE)) is deftc_lib.DeftcError


def missing_library():
    code = ('import sys; sys.path.insert(0, %r); import deftc_lib\n'
            'try:\n    deftc_lib.library()\nexcept ImportError as e:\n    print(e)\n' % os.path.join(HERE, '..', '..', 'python'))
    env = dict(os.environ, DEFTC_LIB='/nonexistent/libdeftc.so')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True).stdout
    assert 'libdeftc.so not found' in out and 'make' in out, out


def torch_or_none():
    return _torch


def torch_refuses_clearly():
    """deftc_torch's argument errors: RuntimeErrors (deftc_lib.DeftcError) naming the argument,
    with torchvision's words for the sizes."""
    torch = torch_or_none()
    if torch is None:
        return SKIPPED
    import deftc_torch as dtt
    x, off, w = torch.zeros(1, 4, 6, 6), torch.zeros(1, 18, 6, 6), torch.zeros(2, 4, 3, 3)
    expect_raises(RuntimeError, 'floating-point', lambda: dtt.deform_conv2d(x, off.int(), w, padding=1))
    expect_raises(RuntimeError, "mode='unfused'", lambda: dtt.deform_conv2d(x.bfloat16(), off, w, padding=1,
                                                                            mode='unfused'))
    expect_raises(RuntimeError, "mode='unfused'", lambda: dtt.deform_conv2d(x, off, w, padding=1, mode='unfused',
                                                                            precision='bf16'))
    expect_raises(RuntimeError, 'precision', lambda: dtt.deform_conv2d(x, off, w, padding=1, precision='fp16'))
    expect_raises(RuntimeError, "mode must be 'deft' or 'unfused'", lambda: dtt.deform_conv2d(x, off, w, mode='fast'))
    expect_raises(RuntimeError, 'weight groups', lambda: dtt.deform_conv2d(x, off, w[:, :3], padding=1))
    expect_raises(RuntimeError, 'mask.shape[1] is not valid', lambda: dtt.deform_conv2d(
        x, off, w, padding=1, mask=torch.zeros(1, 5, 6, 6)))
    expect_raises(RuntimeError, 'the shape of the offset tensor', lambda: dtt.deform_conv2d(x, off[:, :2], w, padding=1))
    expect_raises(RuntimeError, 'bias', lambda: dtt.deform_conv2d(x, off, w, torch.zeros(3), padding=1))
    expect_raises(RuntimeError, 'too small', lambda: dtt.deform_conv2d(x[:, :, :1, :1], off[:, :, :1, :1], w))
    expect_raises(RuntimeError, 'is on meta', lambda: dtt.deform_conv2d(x, off.to('meta'), w, padding=1))


def torch_runs_on_cpu():
    """CPU tensors run on deftc's CPU twins; with zero offsets (and no mask) a deformable
    convolution is PyTorch's conv2d - weight groups, stride, padding and dilation too - in every
    dtype the op takes."""
    torch = torch_or_none()
    if torch is None:
        return SKIPPED
    import deftc_torch as dtt
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(3, 6, 9, 8, generator=g), torch.randn(4, 3, 3, 3, generator=g), torch.randn(4, generator=g)
    want = F.conv2d(x.double(), w.double(), b.double(), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    off = torch.zeros(3, 2 * 9, *want.shape[2:])
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        for mode in ('deft', 'unfused') if dtype in (torch.float32, torch.float64) else ('deft',):
            y = dtt.deform_conv2d(x.to(dtype), off.to(dtype), w.to(dtype), b.to(dtype), stride=(2, 1), padding=(1, 2),
                                  dilation=(1, 2), mode=mode)
            err = float((y.double() - want).norm() / want.norm())
            assert y.dtype == dtype and err <= tol, '%s %s: %s, rel err %.3g' % (dtype, mode, y.dtype, err)
    empty = dtt.deform_conv2d(x[:0], off[:0], w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2))
    assert tuple(empty.shape) == (0,) + tuple(want.shape[1:]), tuple(empty.shape)


def torch_formats():
    """What deftc_torch hands to deftc as it is and what it copies (the decisions alone; the
    GPU test checks the pointers)."""
    torch = torch_or_none()
    if torch is None:
        return SKIPPED
    import deftc_torch as dtt
    cl = torch.channels_last
    x = torch.randn(2, 8, 5, 7)
    f32, bf16 = torch.float32, torch.bfloat16
    assert dtt._fmt(x, NCHW) == (f32, NCHW)
    assert dtt._fmt(x.contiguous(memory_format=cl), NCHW) == (f32, NHWC)
    assert dtt._fmt(x.bfloat16().contiguous(memory_format=cl), NCHW) == (bf16, NHWC)
    assert dtt._fmt(x.double(), NHWC) == (f32, NHWC)                     # in an f32 call float64 is copied
    odd = x.bfloat16().transpose(2, 3)                                   # neither layout: copied, in bf16
    assert dtt._fmt(odd, NHWC) == (bf16, NHWC)
    assert dtt._fmt(odd, NCHW, f32) == (f32, NCHW)                       # offsets: into what the kernels read
    assert dtt._fmt(x.bfloat16(), NCHW, f32) == (bf16, NCHW)             # ... but dense ones go as they are
    assert dtt._as(odd, bf16, NHWC) is not odd and dtt._as(odd, bf16, NHWC).is_contiguous(memory_format=cl)
    one = torch.randn(8, 1, 3, 3)                                        # C == 1: both layouts, the preferred one
    assert dtt._fmt(one, NHWC) == (f32, NHWC) and dtt._as(one, f32, NHWC) is one
    flat = torch.zeros(2 * 8 * 5 * 7 + 1)[1:].view(2, 8, 5, 7)           # dense but 4 bytes off alignment: copied
    assert dtt._fmt(flat, NCHW) == (f32, NCHW) and dtt._as(flat, f32, NCHW) is not flat
    xcl = x.contiguous(memory_format=cl)
    f64, f16 = torch.float64, torch.float16
    assert dtt._compute(xcl, 'deft', None) == (f32, NHWC, (f32, NHWC))
    assert dtt._compute(xcl, 'unfused', None) == (f32, NCHW, (f32, NCHW))  # the baseline is NCHW: copied
    assert dtt._compute(x.bfloat16(), 'deft', None) == (bf16, NHWC, (bf16, NHWC))
    assert dtt._compute(x, 'deft', 'bf16') == (bf16, NHWC, (f32, NCHW))
    assert dtt._compute(x.bfloat16(), 'deft', 'fp32') == (f32, NCHW, (bf16, NCHW))
    assert dtt._compute(x.double(), 'deft', None) == (f64, NCHW, (f64, NCHW))   # deftc's f64 kernels
    assert dtt._compute(x.half(), 'deft', None) == (f32, NCHW, (f16, NCHW))     # through float32, float16 out
    assert dtt._compute(xcl.half(), 'deft', None) == (f32, NHWC, (f16, NHWC))


def torch_offset_slices():
    """The offsets and mask as a DCNv2 layer makes them: channel slices of one offset-conv output
    (channels_last under autocast, or contiguous). mode='deft' reads them where they lie, with
    their pitches (no copy at all); 'unfused' copies them into f32 NCHW. Either way the result and
    every gradient are those of the same op on dense copies of the slices, bit for bit."""
    torch = torch_or_none()
    if torch is None:
        return SKIPPED
    import deftc_torch as dtt
    g = torch.Generator().manual_seed(3)
    cl, bf16, f32 = torch.channels_last, torch.bfloat16, torch.float32
    o = torch.randn(2, 27, 6, 5, generator=g).contiguous(memory_format=cl)
    sl = o.to(bf16)[:, :18]
    assert not sl.is_contiguous() and not sl.is_contiguous(memory_format=cl)
    assert dtt._field(sl) == (bf16, NHWC, 27) and dtt._field(o[:, 18:]) == (f32, NHWC, 27)
    assert dtt._field(o.contiguous()[:, 9:]) == (f32, NCHW, 27 * 30) and dtt._field(o) == (f32, NHWC, 0)
    assert dtt._field(sl.transpose(2, 3)) is None and dtt._field(o.half()) is None  # copied
    assert dtt._stride_order(sl) == NHWC and dtt._stride_order(sl.transpose(2, 3)) == NCHW
    assert dtt._stride_order(o) == NHWC and dtt._stride_order(o.contiguous()) == NCHW
    x = torch.randn(2, 8, 6, 5, generator=g).contiguous(memory_format=cl)
    w = torch.randn(4, 8, 3, 3, generator=g).contiguous(memory_format=cl)
    gy = torch.randn(2, 4, 6, 5, generator=g).contiguous(memory_format=cl)

    def pair(dtype, whole, copy, **kw):
        """y and the gradients of x, w and the offset conv's output `whole`, its slices given as they
        are (copy: identity) or as dense copies"""
        leaf = whole.to(dtype).requires_grad_()
        xl, wl = x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
        sig = torch.sigmoid(leaf)  # the whole output's (on a slice PyTorch's sigmoid may round otherwise)
        y = dtt.deform_conv2d(xl, copy(leaf[:, :18]), wl, padding=1, mask=copy(sig[:, 18:]), **kw)
        y.backward(gy.to(y.dtype))
        return [y.detach(), xl.grad, wl.grad, leaf.grad]

    for dtype, whole, mode in ((bf16, o, 'deft'), (f32, o, 'deft'), (f32, o.contiguous(), 'deft'),
                               (f32, o, 'unfused')):
        dense = lambda t, mf=cl if whole.is_contiguous(memory_format=cl) else torch.contiguous_format: t.contiguous(
            memory_format=mf)
        got, want = pair(dtype, whole, lambda t: t, mode=mode), pair(dtype, whole, dense, mode=mode)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), '%s %s: a slice and its dense copy differ' % (
            dtype, mode)
    # what a deft pair copies: nothing (4 copies when the slices were copied keeping their format,
    # 6 when they went to f32 NCHW)
    from torch.profiler import ProfilerActivity, profile
    for dtype, whole in ((bf16, o), (f32, o.contiguous())):
        leaf = whole.to(dtype).requires_grad_()
        sig = torch.sigmoid(leaf)
        off, m, xd, wd, gyd = leaf[:, :18], sig[:, 18:], x.to(dtype), w.to(dtype), gy.to(dtype)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            y = dtt.deform_conv2d(xd, off, wd, padding=1, mask=m)
            torch.autograd.grad(y, (off, m), gyd)
        copies = sum(e.name == 'aten::copy_' for e in prof.events())
        assert copies == 0, '%s: %d copies in a pair of sliced offsets and mask' % (dtype, copies)


def torch_autocast():
    """Under CPU autocast: bf16 (mode 'deft') computes and returns bf16 channels_last; otherwise
    torchvision's rule - float32 in, float32 out; float16 in, float16 out."""
    torch = torch_or_none()
    if torch is None:
        return SKIPPED
    import deftc_torch as dtt
    x, off, w = torch.randn(2, 4, 6, 6), torch.randn(2, 18, 6, 6), torch.randn(4, 4, 3, 3)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        y = dtt.deform_conv2d(x, off, w, padding=1)
        yu = dtt.deform_conv2d(x, off, w, padding=1, mode='unfused')
    assert y.dtype == torch.bfloat16 and y.is_contiguous(memory_format=torch.channels_last), (y.dtype, y.stride())
    assert yu.dtype == torch.float32, yu.dtype
    with torch.autocast('cpu', dtype=torch.float16):
        y32, y16 = dtt.deform_conv2d(x, off, w, padding=1), dtt.deform_conv2d(x.half(), off, w, padding=1)
    assert (y32.dtype, y16.dtype) == (torch.float32, torch.float16), (y32.dtype, y16.dtype)

for name, fn in [('errors are exceptions, the library usable after', errors_are_exceptions), ('out_size', out_size), ('bad offset groups', bad_groups), ('host pointers refused', host_pointers),
                 ('descriptor: formats the kernels run accepted', formats_accepted),
                 ('descriptor: other formats refused, named', formats_refused), ('Desc fields', desc_fields),
                 ('descriptor: weight groups, f64, device', groups_f64_device),
                 ('CPU device: f32 and f64 with weight groups against the definition', cpu_device_runs),
                 ('missing library named', missing_library), ('torch: bad arguments refused clearly', torch_refuses_clearly),
                 ('torch: CPU tensors run (zero offsets: conv2d)', torch_runs_on_cpu),
                 ('torch: formats passed as they are, others copied', torch_formats),
                 ('torch: offsets and mask as channel slices of one tensor, read where they lie', torch_offset_slices),
                 ('torch: autocast on the CPU', torch_autocast)]:
    case(name, fn)
failed = [r for r in results if r[1] not in (None, SKIPPED)]
skipped = [r for r in results if r[1] == SKIPPED]
for name, err in results:
    label = 'ok' if err is None else 'skip' if err == SKIPPED else 'FAIL'
    print('%-5s python %s%s' % (label, name, ('  (PyTorch is not installed)' if err == SKIPPED else '\n    ' + err)
                                if err else ''))
print('%d passed, %d failed, %d skipped' % (len(results) - len(failed) - len(skipped), len(failed), len(skipped)))
sys.exit(1 if failed else 0)
