"""The Python side that runs everywhere (make test, CI: no GPU, maybe no PyTorch): the library
loads, descriptors are checked, every refusal is a Python exception carrying deftc's message,
a missing library names what to build, and - when PyTorch is installed - deftc_torch refuses
CPU tensors clearly.

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


def case(name, fn):
    try:
        fn()
        results.append((name, None))
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


def missing_library():
    code = ('import sys; sys.path.insert(0, %r); import deftc_lib\n'
            'try:\n    deftc_lib.library()\nexcept ImportError as e:\n    print(e)\n' % os.path.join(HERE, '..', '..', 'python'))
    env = dict(os.environ, DEFTC_LIB='/nonexistent/libdeftc.so')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True).stdout
    assert 'libdeftc.so not found' in out and 'make' in out, out


def torch_refuses_cpu_tensors():
    try:
        import torch
    except ImportError:
        return  # PyTorch is not installed here: the module cannot be used, nothing else to check
    import deftc_torch
    x, off, w = torch.zeros(1, 4, 6, 6), torch.zeros(1, 18, 6, 6), torch.zeros(2, 4, 3, 3)
    expect_raises(ValueError, 'CUDA', lambda: deftc_torch.deform_conv2d(x, off, w, padding=1))


for name, fn in [('out_size', out_size), ('bad offset groups', bad_groups), ('host pointers refused', host_pointers),
                 ('missing library named', missing_library), ('torch: CPU tensors refused', torch_refuses_cpu_tensors)]:
    case(name, fn)
failed = [r for r in results if r[1]]
for name, err in results:
    print('%-5s python %s%s' % ('FAIL' if err else 'ok', name, ('\n    ' + err) if err else ''))
print('%d passed, %d failed' % (len(results) - len(failed), len(failed)))
sys.exit(1 if failed else 0)
