"""The C API (ops/deform/dt_deform_api.h) called from Python through ctypes (python/deftc_lib.py) on
PyTorch tensors' data pointers, against torchvision.ops.deform_conv2d itself: forward and every
gradient, for both implementations and the deterministic flag, with the buffers in each format
the descriptor can state - f32 / bf16, NCHW / NHWC (channels_last), the weight, the offsets and
the mask in formats of their own - and the descriptor's refusals. Needs a GPU, torch and
torchvision.

    python3 tests/api/test_deform_api.py [path/to/libdeftc.so]

Prints one line per check and 'N passed, N failed'; exits non-zero if any failed."""
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
sys.path.insert(0, HERE)
os.environ['DEFTC_LIB'] = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else 'build/libdeftc.so')
import torch  # noqa: E402

import deftc_lib as dl  # noqa: E402
from deform_bounds import NAMES, U_BF16, U_TF32, factor, majorants, offsets, reference, rel, terms, within  # noqa: E402

UNFUSED, DEFT, DET, TF32 = 0, 1, 16, 32
TORCH_DTYPE = {dl.F32: torch.float32, dl.BF16: torch.bfloat16}
MEMORY_FORMAT = {dl.NCHW: torch.contiguous_format, dl.NHWC: torch.channels_last}
results = []


def check(name, ok, detail=''):
    results.append(ok)
    print('%-5s %s%s' % ('ok' if ok else 'FAIL', name, ('  ' + detail) if detail else ''))


def ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


def stream():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or 1)  # 1: cudaStreamLegacy (NULL = deftc's own)


def in_format(t, f):
    """t (fp32) as a tensor in format f = (dtype code, layout code): the caller's buffer."""
    dtype, layout = f
    return t.to(TORCH_DTYPE[dtype]).contiguous(memory_format=MEMORY_FORMAT[layout])


def empty_in(t):
    return torch.empty_like(t)  # preserves the format of a dense tensor


F32_NCHW, F32_NHWC, BF16_NCHW, BF16_NHWC = (dl.F32, dl.NCHW), (dl.F32, dl.NHWC), (dl.BF16, dl.NCHW), (dl.BF16, dl.NHWC)

CASES = [  # n, c, h, w, cout, k, s, p, d, G, mask, bias
    (2, 16, 13, 11, 8, 3, 1, 1, 1, 1, True, True),
    (5, 32, 17, 17, 16, 3, 2, 1, 1, 2, False, False),
    (1, 8, 12, 14, 4, 3, 1, 2, 2, 4, True, False),
    (4, 64, 28, 28, 64, 3, 1, 1, 1, 1, False, False),
]

# label, formats of (x/y, weight, offset, mask), modes
FORMATS = [
    ('f32 nchw', (F32_NCHW, F32_NCHW, F32_NCHW, F32_NCHW), (UNFUSED, DEFT, UNFUSED | DET, DEFT | DET)),
    ('f32 nhwc (channels_last x and weight)', (F32_NHWC, F32_NHWC, F32_NCHW, F32_NCHW), (DEFT, DEFT | DET)),
    ('f32 nhwc, nhwc offsets and mask', (F32_NHWC, F32_NHWC, F32_NHWC, F32_NHWC), (DEFT,)),
    ('mixed: f32 nchw x, nhwc weight', (F32_NCHW, F32_NHWC, F32_NCHW, F32_NCHW), (UNFUSED, DEFT)),
    ('mixed: f32 nhwc x, nchw weight', (F32_NHWC, F32_NCHW, F32_NCHW, F32_NCHW), (DEFT,)),
    ('f32 nchw, bf16 offsets and mask', (F32_NCHW, F32_NCHW, BF16_NCHW, BF16_NCHW), (UNFUSED, DEFT)),
    ('f32 nchw, TF32', (F32_NCHW, F32_NCHW, F32_NCHW, F32_NCHW), (DEFT | TF32, UNFUSED | TF32)),
    ('bf16 nhwc', (BF16_NHWC, BF16_NHWC, F32_NCHW, F32_NCHW), (DEFT, DEFT | DET)),
    ('bf16 nhwc x, f32 nchw weight (a master weight)', (BF16_NHWC, F32_NCHW, F32_NCHW, F32_NCHW), (DEFT,)),
    ('bf16 nhwc, f32 nhwc weight, bf16 nhwc offsets and mask (autocast, channels_last)',
     (BF16_NHWC, F32_NHWC, BF16_NHWC, BF16_NHWC), (DEFT, DEFT | DET)),
]


def mode_name(mode):
    return ('deft' if mode & DEFT else 'unfused') + ('+det' if mode & DET else '') + ('+tf32' if mode & TF32 else '')


def run(lib, mode, cs, fmts, seed):
    """Runs one case through the API; returns [y, dx, doffset, dmask, dweight, dbias] and the inputs."""
    n, c, h, w, cout, k, s, p, d, G, mask, bias = cs
    g = torch.Generator(device='cpu').manual_seed(seed)
    ho = (h + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (k - 1) - 1) // s + 1
    fx, fw, fo, fm = fmts
    cuda = lambda t: t.cuda()
    x = in_format(cuda(torch.randn(n, c, h, w, generator=g)), fx)
    off = in_format(cuda(offsets(n, 2 * G * k * k, ho, wo, generator=g)), fo)
    m = in_format(cuda(torch.rand(n, G * k * k, ho, wo, generator=g)), fm) if mask else None
    wt = in_format(cuda(torch.randn(cout, c, k, k, generator=g) / (c * k * k) ** .5), fw)
    b = cuda(torch.randn(cout, generator=g)) if bias else None
    gy = in_format(cuda(torch.randn(n, cout, ho, wo, generator=g)), fx)
    desc = dl.Desc(n, c, h, w, cout, k, k, s, s, p, p, d, d, G, int(mask), int(bias), dtype=fx[0], layout=fx[1],
                   weight_dtype=fw[0], weight_layout=fw[1], offset_dtype=fo[0], offset_layout=fo[1],
                   mask_dtype=fm[0], mask_layout=fm[1])
    y = torch.empty((n, cout, ho, wo), dtype=x.dtype, device='cuda', memory_format=MEMORY_FORMAT[fx[1]])
    dl.check(lib.dt_deform_api_forward(ctypes.byref(desc), mode, ptr(x), ptr(off), ptr(m), ptr(wt), ptr(b), ptr(y),
                                       stream()))
    gx, goff, gw = empty_in(x), empty_in(off), empty_in(wt)
    gm = empty_in(m) if mask else None
    gb = torch.empty_like(b) if bias else None
    dl.check(lib.dt_deform_api_backward(ctypes.byref(desc), mode, ptr(x), ptr(off), ptr(m), ptr(wt), ptr(gy), ptr(gx),
                                        ptr(goff), ptr(gm), ptr(gw), ptr(gb), stream()))
    torch.cuda.synchronize()
    return [y, gx, goff, gm, gw, gb], (x, off, m, wt, b, gy, s, p, d)


def compare(label, mode, fmts, got, inputs):
    """f32 results of an f32 computation: relative L2 error <= 1e-4; everything else within the
    format bound (deform_bounds.py) - bf16 x: r = 4 roundings of u = 2^-8; TF32: r = 4 of 2^-10;
    an f32 computation's bf16 result (a gradient of a bf16 weight, offset or mask): r = 1."""
    x, off, m, wt, b, gy, s, p, d = inputs
    ref = reference(x, off, m, wt, b, gy, s, p, d)
    big = majorants(x, off, m, wt, b, gy, s, p, d)
    n = terms(x, wt, off)
    bf16_x = fmts[0][0] == dl.BF16
    worst, ok = 0.0, True
    for name, gt, r, mj in zip(NAMES, got, ref, big):
        if gt is None:
            continue
        if gt.shape != r.shape:
            ok = False
            continue
        if bf16_x or mode & TF32:
            good, w = within(gt, r, mj, factor(U_BF16 if bf16_x else U_TF32, 4, n))
        elif gt.dtype == torch.bfloat16:
            good, w = within(gt, r, mj, factor(U_BF16, 1, n))
        else:
            w = rel(gt, r) / 1e-4
            good = w <= 1
        ok &= good
        worst = max(worst, w if w == w else float('inf'))
    check(label, ok, "worst %.3g of the bound" % worst)
    if bf16_x:  # the bf16 kernels ran: an fp32 computation would agree to ~1e-6
        check(label + ': differs from fp32 (bf16 ran)', rel(got[0], ref[0]) > 1e-4, 'rel err %.2e' % rel(got[0], ref[0]))


def refuses(lib, label, desc, mode, needle, call=None):
    rc = call() if call else lib.dt_deform_api_check(ctypes.byref(desc), mode)
    msg = lib.dt_deform_api_error().decode()
    check('refused: ' + label, rc == -1 and needle in msg, msg)


def errors(lib):
    base = dict(dtype=dl.BF16, layout=dl.NHWC)
    geo = (2, 16, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0)
    refuses(lib, 'bad offset groups', dl.Desc(1, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, 0, 0), DEFT,
            '3 channels cannot be split into 2 offset groups')
    refuses(lib, 'a struct of another size', dl.Desc(*geo, size=64), DEFT, 'desc.size is 64')
    refuses(lib, 'f16 x', dl.Desc(*geo, dtype=dl.F16, layout=dl.NHWC), DEFT, 'f16')
    refuses(lib, 'bf16 nchw x', dl.Desc(*geo, dtype=dl.BF16, layout=dl.NCHW), DEFT, 'channels last')
    refuses(lib, 'unfused with bf16 x', dl.Desc(*geo, **base), UNFUSED, 'unfused baseline is f32 NCHW')
    refuses(lib, 'unfused with nhwc x', dl.Desc(*geo, dtype=dl.F32, layout=dl.NHWC), UNFUSED, 'unfused baseline')
    refuses(lib, 'TF32 with bf16 x', dl.Desc(*geo, **base), DEFT | TF32, 'DT_DEFORM_API_TF32 is for f32 x')
    refuses(lib, 'f16 offsets', dl.Desc(*geo, offset_dtype=dl.F16), DEFT, 'desc.offset_dtype')
    refuses(lib, 'weight layout 2', dl.Desc(*geo, weight_layout=2), DEFT, 'desc.weight_layout')
    refuses(lib, 'the former bf16 flag (64)', dl.Desc(*geo), DEFT | 64, 'not a flag')
    refuses(lib, 'f64 x with an f32 weight', dl.Desc(*geo, dtype=dl.F64, offset_dtype=dl.F64, mask_dtype=dl.F64), DEFT,
            'desc.weight_dtype is f32')
    refuses(lib, 'weight groups that do not divide', dl.Desc(*geo, weight_groups=3), DEFT, 'weight groups')
    # a 4-byte-aligned but not 16-byte-aligned x (a view with a storage offset)
    d = dl.Desc(*geo, **base)
    x = torch.zeros(2 * 16 * 9 * 9 + 4, dtype=torch.bfloat16, device='cuda')
    xv = x[2:2 + 2 * 16 * 9 * 9].view(2, 9, 9, 16).permute(0, 3, 1, 2)
    off = torch.zeros(2, 18, 9, 9, device='cuda')
    m = torch.zeros(2, 9, 9, 9, device='cuda')
    wt = torch.zeros(8, 16, 3, 3, dtype=torch.bfloat16, device='cuda').contiguous(memory_format=torch.channels_last)
    y = torch.empty(2, 8, 9, 9, dtype=torch.bfloat16, device='cuda').contiguous(memory_format=torch.channels_last)
    refuses(lib, 'misaligned x', d, DEFT, '16-byte aligned', lambda: lib.dt_deform_api_forward(
        ctypes.byref(d), DEFT, ptr(xv), ptr(off), ptr(m), ptr(wt), None, ptr(y), stream()))
    refuses(lib, 'host memory', d, DEFT, 'host memory', lambda: lib.dt_deform_api_forward(
        ctypes.byref(d), DEFT, ptr(x[:1].cpu().pin_memory()), ptr(off), ptr(m), ptr(wt), None, ptr(y), stream()))


def main():
    lib = dl.library()
    errors(lib)
    for label, fmts, modes in FORMATS:
        for mode in modes:
            for i, cs in enumerate(CASES):
                got, inputs = run(lib, mode, cs, fmts, seed=i)
                compare('%s, %s, case %d %s' % (label, mode_name(mode), i, cs), mode, fmts, got, inputs)
    failed = results.count(False)
    print('%d passed, %d failed' % (len(results) - failed, failed))
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
