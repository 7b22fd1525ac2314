"""deftc's deformable convolution for PyTorch: drop-ins for torchvision.ops.deform_conv2d and
torchvision.ops.DeformConv2d that run deftc's kernels (libdeftc.so) on the tensors' own device - a
CUDA GPU (on PyTorch's current stream) or the CPU - through the compiled operator when it is
built (python/csrc/deftc_torch_op.cpp: `make torch-op`), else through ctypes; OP_PATH says which
('compiled' or 'ctypes'), and $DEFTC_TORCH_OP=compiled|ctypes forces one.

    import deftc_torch as dtt
    y = dtt.deform_conv2d(x, offset, weight, bias, stride=1, padding=1, mask=mask)  # torchvision's signature
    conv = dtt.DeformConv2d(64, 64, 3, padding=1, groups=1)  # torchvision's constructor and state_dict keys
    dtt.swap_deform_convs(model)                          # replaces every torchvision DeformConv2d in place

The op is a registered PyTorch operator, torch.ops.deftc.deform_conv2d (defined in C++ by the
compiled operator, else by torch.library.custom_op here; with a fake implementation and a second
opaque op for its backward, torch.ops.deftc.deform_conv2d_backward), so torch.compile (fullgraph too), torch.export,
torch.fx.symbolic_trace and torch.library.opcheck see one operator; a TorchScript function
calls it as torch.ops.deftc.deform_conv2d(input, offset, weight, bias, stride, padding,
dilation, mask, mode, deterministic, precision), and DeformConv2d is scriptable.

Keyword-only extras: mode='deft' (channels-last kernels; 'unfused' = the float32 NCHW baseline),
deterministic=False (True: bitwise-reproducible gradients; 'deft' is so anyway) and precision:
  None    (default) the input's own dtype: float32 or bfloat16 as they are, float64 in double
          (deftc's f64 kernels: exact, slow, for gradcheck), float16 through float32 (deftc has
          no float16 kernels; the result is float16, as torchvision's)
  'bf16'  bf16 x and GEMM operands with fp32 accumulation: float32 tensors are converted to
          bf16 channels_last first and the result back to the input's dtype (those conversions
          cost a pass over x and over y in the forward, and over x and grad_y in the backward)
  'fp32', 'tf32'  float32 (bf16 tensors are widened first); 'tf32': the GEMMs on TF32 tensor cores

Tensors are passed to deftc as they are (no copy) when they are float32 or bfloat16 and dense in
PyTorch's contiguous (NCHW) or channels_last (NHWC) memory format - the weight too (its
channels_last is [cout, kh, kw, c/groups]). x, y and their gradients share one format: x's
(bf16 is always channels_last; 'unfused' is float32 NCHW; float64 is NCHW). A weight, offset or
mask in another format than deftc's kernels read is converted inside deftc through a small
scratch buffer (docs/deform_api.md). mode='deft' reads offsets and mask in any of these formats
and also as channel slices of a larger tensor - o[:, :18] and torch.sigmoid(o)[:, 18:] of an
offset conv's output o, as DCNv2 layers take them - where they lie, whatever their alignment
(_field: the descriptor's pitches), so such a layer's calls copy nothing. Anything else - other
strides, a view that is not 16-byte aligned, float16 - is copied into a dense tensor first (with
mode='deft' an offset or mask keeps its dtype, float16: float32, and its stride order).
Gradients come back in each input's own dtype and layout.

Autocast (CUDA or CPU) follows torchvision's autocast kernel - floating inputs cast to float32,
the op run, the result cast back to the input's dtype - except where deftc has the kernels
PyTorch's own convs would use: under bf16 autocast with mode='deft' and precision=None (or any
autocast with precision='bf16') x is cast to bf16 channels_last and the result is bf16
channels_last; the weight is passed as it is (an fp32 master weight is rounded to bf16 inside
deftc, as autocast's cast would, and its gradient comes back in fp32 without being rounded to
bf16 first); offsets and mask are passed as they are.

Semantics are torchvision's: weight groups from weight.shape[1] (the main convolution of a
grouped layer runs on a block-diagonal weight: groups times the dense GEMMs' work), offset groups
from offset.shape[1], DCNv2 with a mask, a batch of 0 gives an empty result (and zero parameter
gradients). Errors are RuntimeErrors with torchvision's wording for wrong sizes, raised before any
work, and torch.OutOfMemoryError when memory runs out (on the ctypes path deftc_lib's DeftcError,
also a ValueError, and DeftcOutOfMemory; the compiled operator raises PyTorch's own classes).

The library (deftc_lib.py) is $DEFTC_LIB when set, else libdeftc.so next to this module or in
../build/; build it with `make`."""
import ctypes
import math
import os
import sys
from typing import List, Optional, Sequence

import torch
from torch import Tensor, nn

__all__ = ['deform_conv2d', 'DeformConv2d', 'swap_deform_convs', 'library']

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deftc_lib import (ALLOC_FN, BF16, CPU, CUDA, DETERMINISTIC, F32, F64, FREE_FN, MODES, NCHW, NHWC, TF32,  # noqa: E402
                       Cuda, DeftcError, Desc, check as _check, found as found_library, library)

PRECISIONS = (None, 'fp32', 'tf32', 'bf16')
_CODE = {torch.float32: F32, torch.bfloat16: BF16, torch.float64: F64}  # the dtypes deftc takes as they are
_MEMORY_FORMAT = {NCHW: torch.contiguous_format, NHWC: torch.channels_last}
_OP = 'deftc::deform_conv2d'


def _fail(msg, *args):
    raise DeftcError('%s: %s' % (_OP, msg % args))


def _pair(v, name):
    if isinstance(v, int):
        return v, v
    t = tuple(v)
    if len(t) != 2 or not all(isinstance(e, int) for e in t):
        raise DeftcError('%s: %s must be an int or a pair of ints, got %r' % (_OP, name, v))
    return t


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


def _stream(device):
    """PyTorch's current stream on `device` as a cudaStream_t; its default stream (handle 0) is
    passed as cudaStreamLegacy (0x1), since NULL would mean deftc's own, unsynchronized stream."""
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream or 1)


def _layout(t, prefer):
    """NCHW or NHWC when t is dense in that memory format (contiguous / channels_last), `prefer`
    when it is both (C == 1, or 1x1 images: the same bytes), None when it is neither."""
    if t.dim() != 4:
        return NCHW if t.is_contiguous() else None
    nchw, nhwc = t.is_contiguous(), t.is_contiguous(memory_format=torch.channels_last)
    if nchw and nhwc:
        return prefer
    return NCHW if nchw else NHWC if nhwc else None


def _fmt(t, prefer, copy_dtype=None):
    """(dtype, layout) in which deftc gets t in an f32 / bf16 call: t's own when it is float32 or
    bfloat16 and dense NCHW or NHWC (`prefer` when both); else - _as then copies it - the kernels'
    layout `prefer` and copy_dtype (default: t's dtype if float32 or bfloat16, else float32)."""
    layout = _layout(t, prefer)
    if t.dtype in (torch.float32, torch.bfloat16) and layout is not None:
        return t.dtype, layout
    return copy_dtype or (t.dtype if t.dtype in (torch.float32, torch.bfloat16) else torch.float32), prefer


def _field(t):
    """(dtype, layout, pitch) in which mode='deft' reads the offsets or mask t where they lie: float32 or
    bfloat16, dense NCHW / NHWC (pitch 0) or a channel slice of such a larger tensor - o[:, :18] and
    o[:, 18:] of an offset conv's output o - with its pitch (dt_deform_api.h: the elements from one
    position to the next, NHWC, or from one image to the next, NCHW); None when it has to be copied.
    Alignment does not matter: deft packs the fields element by element."""
    if t.dtype not in (torch.float32, torch.bfloat16) or t.dim() != 4:
        return None
    layout = _layout(t, NCHW)
    if layout is not None:
        return t.dtype, layout, 0
    n, c, h, w = t.shape
    sn, sc, sh, sw = t.stride()
    fits = lambda *dims: all(size == 1 or stride == want for size, stride, want in dims)
    ld = sw if w > 1 else sh if h > 1 else sn  # NHWC: from one position to the next
    if ld >= c and fits((c, sc, 1), (w, sw, ld), (h, sh, w * ld), (n, sn, h * w * ld)):
        return (t.dtype, NHWC, ld) if ld < 2 ** 31 else None
    if sn >= c * h * w and fits((w, sw, 1), (h, sh, w), (c, sc, h * w)):  # NCHW: from one image to the next
        return (t.dtype, NCHW, sn) if sn < 2 ** 31 else None
    return None


def _stride_order(t):
    """The layout of torch.empty_like(t): NHWC when t, 4-D and not contiguous, has the channels-last
    stride order (a channel slice of a channels_last tensor), else NCHW. A copy of t made in it is a
    plain strided copy, and its gradient, made like it, is the one autograd keeps (_grad_as)."""
    if t.dim() != 4 or t.is_contiguous():
        return NCHW
    return NHWC if torch.empty_like(t, device='meta').is_contiguous(memory_format=torch.channels_last) else NCHW


def _as(t, dtype, layout):
    """t in dtype and layout, 16-byte aligned: t itself when it is so already, else one copy."""
    mf = _MEMORY_FORMAT[layout]
    if t.dtype == dtype and t.is_contiguous(memory_format=mf) and t.data_ptr() % 16 == 0:
        return t
    return torch.empty_like(t, dtype=dtype, memory_format=mf).copy_(t)


def _grad_as(g, own):
    """A gradient g as autograd keeps it for the input `own`: in own's dtype with the strides
    torch.empty_like(own) has (own's when it is dense, contiguous when it is not) - g itself
    when it is so already, else one copy. The fake backward returns torch.empty_like(own)."""
    if g.dtype == own.dtype and g.stride() == torch.empty_like(own, device='meta').stride():
        return g
    return torch.empty_like(own, device=g.device).copy_(g)


def _compute(x, mode, precision):
    """(dtype, layout) x, y and their gradients are computed in, and the result's (dtype, layout),
    from x's metadata and the options (autocast is decided before, by _autocast_kernel)."""
    if precision is None:
        dtype = x.dtype if x.dtype in _CODE else torch.float32  # float16: through float32
    else:
        dtype = torch.bfloat16 if precision == 'bf16' else torch.float32
    if dtype == torch.bfloat16:
        if mode == 'unfused':
            _fail("mode='unfused' is the float32 NCHW baseline; bf16 runs with mode='deft' (or pass precision='fp32' "
                  "to compute in float32)")
        layout = NHWC  # deftc's bf16 kernels are channels-last
    elif dtype == torch.float64:
        layout = NCHW  # deftc's f64 kernels are NCHW
    else:
        layout = NHWC if mode == 'deft' and _layout(x, NCHW) == NHWC else NCHW
    out = (dtype, layout) if x.dtype == dtype else (x.dtype, _layout(x, NCHW) or NCHW)
    return dtype, layout, out


class _Plan:
    """One call as deftc gets it, decided from the tensors' metadata alone (sizes may be symbolic
    under torch.compile): the descriptor's numbers, each tensor's (dtype, layout), the result's,
    the mode flags. The real kernels and the fake one build it the same way."""

    def __init__(self, input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision):
        if mode not in MODES:
            _fail("mode must be 'deft' or 'unfused', got %r", mode)
        if precision not in PRECISIONS:
            _fail("precision must be None, 'fp32', 'tf32' or 'bf16', got %r", precision)
        for name, t in (('input', input), ('offset', offset), ('weight', weight), ('bias', bias), ('mask', mask)):
            if t is None:
                continue
            if not t.is_floating_point():
                _fail('%s must be a floating-point tensor, got %s', name, t.dtype)
            if t.device != input.device:
                _fail('%s is on %s, the input on %s', name, t.device, input.device)
            if t.dim() != (1 if name == 'bias' else 4):
                _fail('%s must be %d-D, got %d dimensions', name, 1 if name == 'bias' else 4, t.dim())
        (self.stride, self.padding, self.dilation) = (_pair(stride, 'stride'), _pair(padding, 'padding'),
                                                      _pair(dilation, 'dilation'))
        n, c, h, w = input.shape
        cout, cw, kh, kw = weight.shape
        (sh, sw), (ph, pw), (dh, dw) = self.stride, self.padding, self.dilation
        if min(c, h, w, cout, cw, kh, kw) < 1:
            _fail('input %s and weight %s must have positive sizes (but the batch)', tuple(input.shape),
                  tuple(weight.shape))
        if sh < 1 or sw < 1 or ph < 0 or pw < 0 or dh < 1 or dw < 1:
            _fail('stride (%d, %d) and dilation (%d, %d) must be positive, padding (%d, %d) not negative', sh, sw, dh, dw,
                  ph, pw)
        if c % cw or cout % (c // cw):
            _fail('weight.shape[1] = %d does not divide the input channels %d into weight groups of which the %d '
                  'output channels are a multiple', cw, c, cout)
        groups = offset.shape[1] // (2 * kh * kw)
        if groups == 0:
            _fail('the shape of the offset tensor at dimension 1 is not valid. It should be a multiple of 2 * '
                  'weight.size[2] * weight.size[3].\nGot offset.shape[1]=%d, while 2 * weight.size[2] * '
                  'weight.size[3]=%d', offset.shape[1], 2 * kh * kw)
        if offset.shape[1] != groups * 2 * kh * kw:
            _fail('offset.shape[1] is not valid: got: %d expected: %d', offset.shape[1], groups * 2 * kh * kw)
        if mask is not None and mask.shape[1] != groups * kh * kw:
            _fail('mask.shape[1] is not valid: got: %d expected: %d', mask.shape[1], groups * kh * kw)
        if c % groups:
            _fail('%d input channels cannot be split into %d offset groups', c, groups)
        ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if ho < 1 or wo < 1:
            _fail('Calculated output size too small - out_h: %d out_w: %d (input %dx%d is too small for the kernel)', ho,
                  wo, h, w)
        if offset.shape[0] != n:
            _fail('invalid batch size of offset (%d, the input %d)', offset.shape[0], n)
        if tuple(offset.shape[2:]) != (ho, wo):
            _fail('offset output dims: (%d, %d) - computed output dims: (%d, %d)', offset.shape[2], offset.shape[3], ho,
                  wo)
        if mask is not None and mask.shape[0] != n:
            _fail('invalid batch size of mask (%d, the input %d)', mask.shape[0], n)
        if mask is not None and tuple(mask.shape[2:]) != (ho, wo):
            _fail('mask output dims: (%d, %d) - computed output dims: (%d, %d)', mask.shape[2], mask.shape[3], ho, wo)
        if bias is not None and bias.shape[0] != cout:
            _fail('bias has %d elements, the weight %d output channels', bias.shape[0], cout)
        xd, xl, self.out = _compute(input, mode, precision)
        self.x = (xd, xl)
        self.kept, self.pitch = (False, False), (0, 0)  # offset, mask: handed over where they lie; their pitches
        if xd == torch.float64:  # every tensor double NCHW
            self.off = self.mask = self.w = (xd, NCHW)
            self.bias_dtype = xd
        elif mode == 'deft':  # offsets and mask: deft reads either dtype and layout, and channel slices, where
            # they lie (_field); one that must be copied keeps its dtype and stride order
            fields = [_field(t) if t is not None else (torch.float32, NCHW, 0) for t in (offset, mask)]
            self.kept = tuple(f is not None for f in fields)
            self.off, self.mask = (f[:2] if f else _fmt(t, _stride_order(t)) for f, t in zip(fields, (offset, mask)))
            self.pitch = tuple(f[2] if f else 0 for f in fields)
            self.w = _fmt(weight, xl)
            self.bias_dtype = torch.float32
        else:  # unfused: offsets and mask that must be copied anyway are copied into what its kernels read, f32 NCHW
            self.off = _fmt(offset, NCHW, torch.float32)
            self.mask = _fmt(mask, NCHW, torch.float32) if mask is not None else (torch.float32, NCHW)
            self.w = _fmt(weight, xl)
            self.bias_dtype = torch.float32
        self.geometry = (n, c, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, int(mask is not None),
                         int(bias is not None))
        self.weight_groups, self.shape = c // cw, (n, cout, ho, wo)
        self.flags = MODES[mode] | (DETERMINISTIC if deterministic else 0) | (TF32 if precision == 'tf32' else 0)

    def desc(self, device):
        return Desc(*self.geometry, dtype=_CODE[self.x[0]], layout=self.x[1], offset_dtype=_CODE[self.off[0]],
                    offset_layout=self.off[1], mask_dtype=_CODE[self.mask[0]], mask_layout=self.mask[1],
                    weight_dtype=_CODE[self.w[0]], weight_layout=self.w[1], weight_groups=self.weight_groups,
                    device=CPU if device.type == 'cpu' else CUDA, offset_pitch=self.pitch[0], mask_pitch=self.pitch[1])

    def inputs(self, input, offset, weight, bias, mask):
        """The tensors in the formats deftc gets (copies only where _as must): x, offset, mask, weight, bias."""
        off = offset if self.kept[0] else _as(offset, *self.off)
        m = None if mask is None else mask if self.kept[1] else _as(mask, *self.mask)
        return (_as(input, *self.x), off, m, _as(weight, *self.w),
                _as(bias, self.bias_dtype, NCHW) if bias is not None else None)


@ALLOC_FN
def _torch_alloc(ctx, nbytes, stream):
    """Scratch from PyTorch's caching allocator, for the current stream (the call's); None (NULL)
    when it is out of memory - no Python exception may cross deftc's C frames."""
    try:
        return torch.cuda.caching_allocator_alloc(nbytes)
    except Exception:
        return None


@FREE_FN
def _torch_free(ctx, ptr, stream):
    torch.cuda.caching_allocator_delete(ptr)


def _cuda():
    """The thread's dt_deform_cuda for a call on the current CUDA device: the device stated (deftc queries no
    pointer), and while PyTorch captures a CUDA graph on the current stream the scratch from
    PyTorch's allocator (the graph's private pool: deftc's own pool would hand the graph's
    addresses to later work); else deftc's pool, which costs no Python call per block."""
    if torch.cuda.is_current_stream_capturing():
        return Cuda(torch.cuda.current_device(), _torch_alloc, _torch_free, None)
    return Cuda(torch.cuda.current_device(), ALLOC_FN(), FREE_FN(), None)


def _run(plan, entry, device, *tensors):
    """One call of the C API on the tensors' device: checked first (before any work), then queued on
    PyTorch's current CUDA stream, or run on the CPU."""
    lib = library()
    desc = plan.desc(device)
    _check(lib.dt_deform_api_check(ctypes.byref(desc), plan.flags))  # deftc's own message
    ptrs = [_ptr(t) for t in tensors]
    if device.type == 'cuda':
        with torch.cuda.device(device):
            _check(lib.dt_deform_api_set_cuda(ctypes.byref(_cuda())))
            try:
                _check(getattr(lib, entry)(ctypes.byref(desc), plan.flags, *ptrs, _stream(device)))
            finally:  # the thread's setting is this call's alone
                lib.dt_deform_api_set_cuda(None)
    else:
        _check(getattr(lib, entry)(ctypes.byref(desc), plan.flags, *ptrs, None))


# ---- the operator ----

def _choose_op_path():
    """('compiled', the .so's path) when the compiled operator is built beside the libdeftc.so that
    deftc_lib finds (`make torch-op`: build/deftc_torch_op.so), else ('ctypes', None);
    $DEFTC_TORCH_OP=compiled or ctypes forces one (compiled: an ImportError when it is not built)."""
    forced = os.environ.get('DEFTC_TORCH_OP', '')
    if forced not in ('', 'compiled', 'ctypes'):
        raise ImportError("deftc_torch: DEFTC_TORCH_OP must be 'compiled' or 'ctypes' (unset: compiled when it is "
                          "built), got %r" % forced)
    lib = found_library()
    so = os.path.join(os.path.dirname(lib), 'deftc_torch_op.so') if lib else None
    built = so is not None and os.path.isfile(so)
    if forced == 'compiled' and not built:
        raise ImportError('deftc_torch: DEFTC_TORCH_OP=compiled, but the compiled operator is not built beside %s: '
                          'run `make torch-op`' % (lib or 'libdeftc.so (not found either)'))
    return ('compiled', so) if built and forced != 'ctypes' else ('ctypes', None)


def _deform_conv2d(input: Tensor, offset: Tensor, weight: Tensor, bias: Optional[Tensor], stride: Sequence[int],
                   padding: Sequence[int], dilation: Sequence[int], mask: Optional[Tensor], mode: str = 'deft',
                   deterministic: bool = False, precision: Optional[str] = None) -> Tensor:
    plan = _Plan(input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision)
    xs, os_, ms, ws, bs = plan.inputs(input, offset, weight, bias, mask)
    y = torch.empty(plan.shape, dtype=plan.x[0], device=input.device, memory_format=_MEMORY_FORMAT[plan.x[1]])
    _run(plan, 'dt_deform_api_forward', input.device, xs, os_, ms, ws, bs, y)
    return _as(y, *plan.out)  # y itself unless precision= (or float16) differs from the input's dtype


def _deform_conv2d_fake(input, offset, weight, bias, stride, padding, dilation, mask, mode='deft', deterministic=False,
                        precision=None):
    plan = _Plan(input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision)
    return torch.empty(plan.shape, dtype=plan.out[0], device=input.device, memory_format=_MEMORY_FORMAT[plan.out[1]])


def _deform_conv2d_backward(grad: Tensor, input: Tensor, offset: Tensor, weight: Tensor, bias: Optional[Tensor],
                            stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                            mask: Optional[Tensor], mode: str, deterministic: bool, precision: Optional[str],
                            wanted: Sequence[bool]) -> List[Tensor]:
    """The gradients wanted of (input, offset, weight, bias, mask), in that order, each in its
    input's dtype and strides (torch.empty_like's)."""
    plan = _Plan(input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision)
    xs, os_, ms, ws, bs = plan.inputs(input, offset, weight, bias, mask)
    gx = torch.empty_like(xs) if wanted[0] else None
    goff = torch.empty_like(os_) if wanted[1] else None
    gw = torch.empty_like(ws) if wanted[2] else None
    gb = torch.empty(bias.shape, dtype=plan.bias_dtype, device=input.device) if wanted[3] else None
    gm = torch.empty_like(ms) if wanted[4] else None
    gy = _as(grad, *plan.x)
    _run(plan, 'dt_deform_api_backward', input.device, xs, os_, ms, ws, gy, gx, goff, gm, gw, gb)
    return [_grad_as(g, own) for g, own in zip((gx, goff, gw, gb, gm), (input, offset, weight, bias, mask))
            if g is not None]


def _deform_conv2d_backward_fake(grad, input, offset, weight, bias, stride, padding, dilation, mask, mode,
                                 deterministic, precision, wanted):
    _Plan(input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision)
    return [torch.empty_like(t) for t, w in zip((input, offset, weight, bias, mask), wanted) if w]


def _setup_context(ctx, inputs, output):
    input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision = inputs
    ctx.save_for_backward(input, offset, weight, bias, mask)
    ctx.options = (stride, padding, dilation, mode, deterministic, precision)


def _backward(ctx, grad):
    input, offset, weight, bias, mask = ctx.saved_tensors
    need = ctx.needs_input_grad  # the op's 11 inputs: input, offset, weight, bias, ..., mask (7)
    wanted = [need[0], need[1], need[2], bias is not None and need[3], mask is not None and need[7]]
    stride, padding, dilation, mode, deterministic, precision = ctx.options
    got = iter(torch.ops.deftc.deform_conv2d_backward(grad, input, offset, weight, bias, stride, padding, dilation,
                                                      mask, mode, deterministic, precision, wanted))
    gx, goff, gw, gb, gm = (next(got) if w else None for w in wanted)
    return gx, goff, gw, gb, None, None, None, gm, None, None, None


# OP_PATH: which kernels torch.ops.deftc.deform_conv2d and its backward run - 'compiled' (the C++
# operator, python/csrc/deftc_torch_op.cpp, which defines both ops, their CPU and CUDA kernels and
# the autograd formula, so that a forward + backward pair runs no Python of its own) or 'ctypes'
# (the Python functions above, defined as ops here, with _setup_context and _backward as their
# autograd formula). Fake kernels and autocast are registered in Python on either.
OP_PATH, _COMPILED_OP = _choose_op_path()
if OP_PATH == 'compiled':
    try:
        torch.ops.load_library(_COMPILED_OP)
    except OSError as e:  # built against another PyTorch (its C++ ABI is not stable across versions)
        raise ImportError('deftc_torch: %s does not load into this PyTorch %s (%s): rebuild it with `make torch-op`, '
                          'or set DEFTC_TORCH_OP=ctypes' % (_COMPILED_OP, torch.__version__, e)) from e
else:
    torch.library.custom_op(_OP, _deform_conv2d, mutates_args=(), device_types=('cpu', 'cuda'))
    torch.library.custom_op('deftc::deform_conv2d_backward', _deform_conv2d_backward, mutates_args=(),
                            device_types=('cpu', 'cuda'))
torch.library.register_fake(_OP, _deform_conv2d_fake)
torch.library.register_fake('deftc::deform_conv2d_backward', _deform_conv2d_backward_fake)
if OP_PATH == 'ctypes':
    torch.library.register_autograd(_OP, _backward, setup_context=_setup_context)


def _autocast_kernel(device_type):
    """The op under autocast on `device_type`: torchvision's rule (floating inputs but float64 to
    float32, the result back in the input's dtype), or deftc's bf16 path where it has one."""
    def kernel(input, offset, weight, bias, stride, padding, dilation, mask, mode='deft', deterministic=False,
               precision=None):
        eligible = input.dtype in (torch.float16, torch.bfloat16, torch.float32)
        bf16 = precision == 'bf16' or (precision is None and mode == 'deft' and
                                       torch.get_autocast_dtype(device_type) == torch.bfloat16)
        with torch.autocast(device_type, enabled=False):
            if eligible and bf16:  # one cast of x, the one autocast makes for a conv; a bf16 channels_last result
                x = input.to(torch.bfloat16, memory_format=torch.channels_last)
                return torch.ops.deftc.deform_conv2d(x, offset, weight, bias, stride, padding, dilation, mask, mode,
                                                     deterministic, precision)

            def f32(t):
                return t.float() if t is not None and t.dtype in (torch.float16, torch.bfloat16) else t
            y = torch.ops.deftc.deform_conv2d(f32(input), f32(offset), f32(weight), f32(bias), stride, padding,
                                              dilation, f32(mask), mode, deterministic, precision)
            return y.to(input.dtype)
    return kernel


_autocast_lib = torch.library.Library('deftc', 'FRAGMENT')
_autocast_lib.impl('deform_conv2d', _autocast_kernel('cpu'), 'AutocastCPU')
_autocast_lib.impl('deform_conv2d', _autocast_kernel('cuda'), 'AutocastCUDA')


def deform_conv2d(input, offset, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), mask=None, *,
                  mode='deft', deterministic=False, precision=None):
    """torchvision.ops.deform_conv2d on deftc's kernels (same arguments and result; the formats,
    autocast and precision= as in the module's docstring): torch.ops.deftc.deform_conv2d with
    stride, padding and dilation made pairs. Traceable by torch.fx and torch.compile as it is."""
    return torch.ops.deftc.deform_conv2d(input, offset, weight, bias, _pair(stride, 'stride'),
                                         _pair(padding, 'padding'), _pair(dilation, 'dilation'), mask, mode,
                                         deterministic, precision)


class DeformConv2d(nn.Module):
    """torchvision.ops.DeformConv2d on deftc's kernels: same constructor (groups too), parameters
    and state_dict keys (weight [out, in/groups, kh, kw], bias), forward(input, offset, mask=None).
    Scriptable (torch.jit.script): its forward calls the operator itself."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 *, mode='deft', deterministic=False, precision=None):
        super().__init__()
        if in_channels % groups != 0:
            raise ValueError('in_channels must be divisible by groups')
        if out_channels % groups != 0:
            raise ValueError('out_channels must be divisible by groups')
        if mode not in MODES or precision not in PRECISIONS:
            raise ValueError("deftc_torch.DeformConv2d: mode must be 'deft' or 'unfused', precision None, 'fp32', "
                             "'tf32' or 'bf16' (got %r, %r)" % (mode, precision))
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size, 'kernel_size')
        self.stride, self.padding, self.dilation = _pair(stride, 'stride'), _pair(padding, 'padding'), _pair(dilation, 'dilation')
        self.groups = groups
        self.mode, self.deterministic, self.precision = mode, deterministic, precision
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, *self.kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):  # torchvision's initialization
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor, offset: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        return torch.ops.deftc.deform_conv2d(input, offset, self.weight, self.bias, self.stride, self.padding,
                                             self.dilation, mask, self.mode, self.deterministic, self.precision)

    def extra_repr(self):
        return ('{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}, padding={padding}, '
                'dilation={dilation}, groups={groups}, bias={has_bias}, mode={mode}, precision={precision}').format(
                    has_bias=self.bias is not None, **self.__dict__)


def swap_deform_convs(model, mode='deft', deterministic=False, precision=None):
    """Replaces every torchvision.ops.DeformConv2d in `model` (in place) by deftc's, sharing its
    parameter tensors (an optimizer built before keeps working). Returns the number replaced."""
    import torchvision
    count = 0
    for name, child in list(model.named_children()):
        if isinstance(child, torchvision.ops.DeformConv2d):
            new = DeformConv2d(child.in_channels, child.out_channels, child.kernel_size, child.stride, child.padding,
                               child.dilation, child.groups, child.bias is not None, mode=mode, deterministic=deterministic,
                               precision=precision)
            new.weight = child.weight
            new.bias = child.bias
            setattr(model, name, new)
            count += 1
        else:
            count += swap_deform_convs(child, mode, deterministic, precision)
    return count
