"""The Python side that runs everywhere (make test, CI: no GPU, maybe no PyTorch): the library
loads, descriptors are checked - sizes, the struct's version, every dtype / layout combination
the kernels run or refuse (dt_deform_api_check needs no GPU) - every refusal is a Python
exception carrying deftc's message, a missing library names what to build, and - when PyTorch is
installed - deftc_torch refuses bad arguments clearly (CPU tensors, float16, bf16 with the
unfused mode, ...) and decides which tensors it passes as they are and which it copies.

    python3 tests/api/test_deftc_torch_cpu.py [path/to/libdeftc.so]"""
import ctypes
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
if len(sys.argv) > 1:
    os.environ['DEFTC_LIB'] = os.path.abspath(sys.argv[1])
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
    for label, mode, fields, needle in cases:
        try:
            checked(mode, **fields)
        except deftc_lib.DeftcError as e:
            if needle not in str(e):
                raise AssertionError('%s: message %r does not contain %r' % (label, str(e), needle))
            continue
        raise AssertionError('%s was accepted' % label)


def desc_fields():
    """The Python struct is the C one: .size set, formats by name, geometry alone positionally."""
    d = deftc_lib.Desc(*GEO, dtype=BF16, layout=NHWC)
    assert d.size == ctypes.sizeof(deftc_lib.Desc) == 100 and (d.dtype, d.layout, d.offset_dtype) == (BF16, NHWC, F32)
    expect_raises(TypeError, 'geometry', lambda: deftc_lib.Desc(*GEO, 1))


def missing_library():
    code = ('import sys; sys.path.insert(0, %r); import deftc_lib\n'
            'try:\n    deftc_lib.library()\nexcept ImportError as e:\n    print(e)\n' % os.path.join(HERE, '..', '..', 'python'))
    env = dict(os.environ, DEFTC_LIB='/nonexistent/libdeftc.so')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True).stdout
    assert 'libdeftc.so not found' in out and 'make' in out, out


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None  # PyTorch is not installed here: the module cannot be used
    return torch


def torch_refuses_clearly():
    """deftc_torch's argument errors, which come before it looks at the device: CPU tensors are
    enough to reach each of them."""
    torch = torch_or_none()
    if torch is None:
        return SKIPPED
    import deftc_torch as dtt
    x, off, w = torch.zeros(1, 4, 6, 6), torch.zeros(1, 18, 6, 6), torch.zeros(2, 4, 3, 3)
    expect_raises(ValueError, 'CUDA', lambda: dtt.deform_conv2d(x, off, w, padding=1))
    expect_raises(ValueError, 'CUDA', lambda: dtt.deform_conv2d(x.bfloat16().contiguous(memory_format=torch.channels_last),
                                                                off.bfloat16(), w, padding=1))
    expect_raises(TypeError, 'float16', lambda: dtt.deform_conv2d(x.half(), off, w, padding=1))
    expect_raises(TypeError, 'floating-point', lambda: dtt.deform_conv2d(x, off.int(), w, padding=1))
    expect_raises(ValueError, "mode='unfused'", lambda: dtt.deform_conv2d(x.bfloat16(), off, w, padding=1, mode='unfused'))
    expect_raises(ValueError, "mode='unfused'", lambda: dtt.deform_conv2d(x, off, w, padding=1, mode='unfused',
                                                                          precision='bf16'))
    expect_raises(ValueError, 'precision', lambda: dtt.deform_conv2d(x, off, w, padding=1, precision='fp16'))
    expect_raises(ValueError, 'grouped', lambda: dtt.deform_conv2d(x, off, w[:, :2], padding=1))
    expect_raises(ValueError, 'mask', lambda: dtt.deform_conv2d(x, off, w, padding=1, mask=torch.zeros(1, 5, 6, 6)))
    expect_raises(ValueError, 'bias', lambda: dtt.deform_conv2d(x, off, w, torch.zeros(3), padding=1))
    expect_raises(ValueError, 'too small', lambda: dtt.deform_conv2d(x[:, :, :1, :1], off[:, :, :1, :1], w))


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
    assert dtt._fmt(x.double(), NHWC) == (f32, NHWC)                     # float64: copied to float32
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
    assert dtt._compute(xcl, 'deft', None, None) == (f32, NHWC, f32)
    assert dtt._compute(xcl, 'unfused', None, None) == (f32, NCHW, f32)  # the baseline is NCHW: copied
    assert dtt._compute(x.bfloat16(), 'deft', None, None) == (bf16, NHWC, bf16)
    assert dtt._compute(x, 'deft', 'bf16', None) == (bf16, NHWC, f32)
    assert dtt._compute(x.bfloat16(), 'deft', 'fp32', None) == (f32, NCHW, bf16)
    assert dtt._compute(x.double(), 'deft', None, None) == (f32, NCHW, torch.float64)
    assert dtt._compute(x, 'deft', None, bf16) == (bf16, NHWC, bf16)       # under bf16 autocast
    assert dtt._compute(x, 'unfused', None, bf16) == (f32, NCHW, f32)       # ... as torchvision: float32
    assert dtt._compute(x.half(), 'deft', None, torch.float16) == (f32, NCHW, f32)
    assert dtt._compute(x, 'deft', 'tf32', bf16) == (f32, NCHW, f32)


for name, fn in [('out_size', out_size), ('bad offset groups', bad_groups), ('host pointers refused', host_pointers),
                 ('descriptor: formats the kernels run accepted', formats_accepted),
                 ('descriptor: other formats refused, named', formats_refused), ('Desc fields', desc_fields),
                 ('missing library named', missing_library), ('torch: bad arguments refused clearly', torch_refuses_clearly),
                 ('torch: formats passed as they are, others copied', torch_formats)]:
    case(name, fn)
failed = [r for r in results if r[1] not in (None, SKIPPED)]
skipped = [r for r in results if r[1] == SKIPPED]
for name, err in results:
    label = 'ok' if err is None else 'skip' if err == SKIPPED else 'FAIL'
    print('%-5s python %s%s' % (label, name, ('  (PyTorch is not installed)' if err == SKIPPED else '\n    ' + err)
                                if err else ''))
print('%d passed, %d failed, %d skipped' % (len(results) - len(failed) - len(skipped), len(failed), len(skipped)))
sys.exit(1 if failed else 0)
