"""The C API (layers/dt_deform_api.h) called from Python through ctypes on PyTorch tensors'
data pointers, against torchvision.ops.deform_conv2d itself: forward and every gradient, for
both implementations and the deterministic flag. Needs a GPU, torch and torchvision.

    python3 tests/api/test_deform_api.py [path/to/libdeftc.so]

Prints one line per case and exits non-zero if any case disagrees."""
import ctypes, sys
import torch
from torchvision.ops import deform_conv2d


class Desc(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        'n', 'c', 'h', 'w', 'cout', 'kh', 'kw', 'stride_h', 'stride_w', 'pad_h', 'pad_w',
        'dil_h', 'dil_w', 'offset_groups', 'has_mask', 'has_bias')]


def ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


def run_case(lib, mode, n, c, h, w, cout, k, s, p, d, G, mask, bias, seed):
    torch.manual_seed(seed)
    dev = 'cuda'
    ho = (h + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (k - 1) - 1) // s + 1
    x = torch.randn(n, c, h, w, device=dev, requires_grad=True)
    off = (torch.randn(n, 2 * G * k * k, ho, wo, device=dev) * 1.5).requires_grad_()
    m = torch.rand(n, G * k * k, ho, wo, device=dev, requires_grad=True) if mask else None
    wt = (torch.randn(cout, c, k, k, device=dev) / (c * k * k) ** .5).requires_grad_()
    b = torch.randn(cout, device=dev, requires_grad=True) if bias else None
    gy = torch.randn(n, cout, ho, wo, device=dev)
    y_ref = deform_conv2d(x, off, wt, b, stride=s, padding=p, dilation=d, mask=m)
    y_ref.backward(gy)
    desc = Desc(n, c, h, w, cout, k, k, s, s, p, p, d, d, G, int(mask), int(bias))
    y = torch.empty_like(y_ref)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or 1)  # 1: cudaStreamLegacy (NULL = deftc's own)
    with torch.no_grad():
        xd, od, md, wd = x.detach(), off.detach(), m.detach() if mask else None, wt.detach()
        bd = b.detach() if bias else None
        rc = lib.dt_deform_api_forward(ctypes.byref(desc), mode, ptr(xd), ptr(od), ptr(md), ptr(wd), ptr(bd), ptr(y), stream)
        assert rc == 0, lib.dt_deform_api_error().decode()
        g = {name: torch.empty_like(t) for name, t in (('x', xd), ('off', od), ('w', wd))}
        g['m'] = torch.empty_like(md) if mask else None
        g['b'] = torch.empty_like(bd) if bias else None
        rc = lib.dt_deform_api_backward(ctypes.byref(desc), mode, ptr(xd), ptr(od), ptr(md), ptr(wd), ptr(gy.contiguous()),
                                        ptr(g['x']), ptr(g['off']), ptr(g['m']), ptr(g['w']), ptr(g['b']), stream)
        assert rc == 0, lib.dt_deform_api_error().decode()
    torch.cuda.synchronize()
    pairs = [('y', y, y_ref), ('dx', g['x'], x.grad), ('doffset', g['off'], off.grad), ('dweight', g['w'], wt.grad)]
    if mask:
        pairs.append(('dmask', g['m'], m.grad))
    if bias:
        pairs.append(('dbias', g['b'], b.grad))
    worst = 0.0
    for name, got, ref in pairs:
        err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        worst = max(worst, err if err == err else float('inf'))
    return worst


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else 'build/libdeftc.so'
    lib = ctypes.CDLL(path)
    lib.dt_deform_api_error.restype = ctypes.c_char_p
    # a bad descriptor is an error code with a message, not a crash
    bad = Desc(1, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, 0, 0)
    assert lib.dt_deform_api_forward(ctypes.byref(bad), 0, None, None, None, None, None, None, None) == -1
    print('bad descriptor ->', lib.dt_deform_api_error().decode())
    cases = [  # n, c, h, w, cout, k, s, p, d, G, mask, bias
        (2, 16, 13, 11, 8, 3, 1, 1, 1, 1, True, True),
        (5, 32, 17, 17, 16, 3, 2, 1, 1, 2, False, False),
        (1, 8, 12, 14, 4, 3, 1, 2, 2, 4, True, False),
        (4, 64, 28, 28, 64, 3, 1, 1, 1, 1, False, False),
    ]
    failed = 0
    for mode, label in ((0, 'unfused'), (1, 'deft'), (16, 'unfused+det'), (17, 'deft+det')):
        for i, cs in enumerate(cases):
            err = run_case(lib, mode, *cs, seed=i)
            ok = err < 1e-4
            failed += not ok
            print(f'{"ok  " if ok else "FAIL"} {label:12} case {i} {cs}: worst rel err {err:.2e}')
    print(f'{16 - failed} passed, {failed} failed')
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
