"""deftc's deformable convolution for PyTorch: drop-ins for torchvision.ops.deform_conv2d and
torchvision.ops.DeformConv2d that run deftc's kernels (libdeftc.so, through ctypes - no compiled
extension) on the tensors' own CUDA device and PyTorch's current stream.

    import deftc_torch as dtt
    y = dtt.deform_conv2d(x, offset, weight, bias, stride=1, padding=1, mask=mask)  # torchvision's signature
    conv = dtt.DeformConv2d(64, 64, 3, padding=1)        # torchvision's constructor and state_dict keys
    dtt.swap_deform_convs(model)                          # replaces every torchvision DeformConv2d in place

Keyword-only extras: mode='deft' (channels-last kernels; 'unfused' = the float32 NCHW baseline),
deterministic=False (True: bitwise-reproducible gradients; 'deft' is so anyway) and precision:
  None    (default) the input's own dtype - float32 or bfloat16 (float64 computes in float32) -
          or, under torch.autocast('cuda', dtype=torch.bfloat16), bfloat16 (below)
  'bf16'  bf16 x and GEMM operands with fp32 accumulation: float32 tensors are converted to
          bf16 channels_last first and the result back to the input's dtype (those conversions
          cost a pass over x and over y, forward and backward)
  'fp32', 'tf32'  float32 (bf16 tensors are widened first); 'tf32': the GEMMs on TF32 tensor cores

Tensors are passed to deftc as they are (no copy) when they are float32 or bfloat16 and dense in
PyTorch's contiguous (NCHW) or channels_last (NHWC) memory format - the weight too (its
channels_last is [cout, kh, kw, c]). x, y and their gradients share one format: x's (bf16 is
always channels_last; 'unfused' is float32 NCHW). A weight, offset or mask in another format than
deftc's kernels read is converted inside deftc through a small scratch buffer
(docs/deform_api.md). Anything else - other strides, a view that is not 16-byte aligned,
float64 - is copied into a dense tensor first. Gradients come back in each input's own dtype and
layout. float16 tensors are refused outside autocast (deftc has no float16 kernels).

Autocast: torchvision's deform_conv2d has no bf16 kernel, so under autocast it runs in float32.
This op, whose point is deftc's bf16 kernels, runs the way PyTorch's own convs do instead: under
bf16 autocast (mode 'deft', precision None) x is cast to bf16 channels_last and the result is
bf16 channels_last; the weight is passed as it is (an fp32 master weight is rounded to bf16
inside deftc, as autocast's cast would, and its gradient comes back in fp32 without being
rounded to bf16 first); offsets and mask are passed as they are. Under float16 autocast, with
mode='unfused', or with precision='fp32'/'tf32' the op runs in float32 and returns float32, as
torchvision's does.

Semantics are torchvision's (offset groups from offset.shape[1], DCNv2 with a mask); weight
groups (torchvision's `groups`, weight.shape[1] < input channels) are not supported and raise.
CPU tensors raise: deftc's C API runs on the GPU.

The library (deftc_lib.py) is $DEFTC_LIB when set, else libdeftc.so next to this module or in
../build/; build it with `make`."""
import ctypes
import math
import os
import sys

import torch
from torch import nn

__all__ = ['deform_conv2d', 'DeformConv2d', 'swap_deform_convs', 'library']

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deftc_lib import BF16, DETERMINISTIC, F32, MODES, NCHW, NHWC, TF32, Desc, check as _check, library  # noqa: E402

PRECISIONS = (None, 'fp32', 'tf32', 'bf16')
_CODE = {torch.float32: F32, torch.bfloat16: BF16}  # the dtypes deftc takes as they are
_MEMORY_FORMAT = {NCHW: torch.contiguous_format, NHWC: torch.channels_last}


def _pair(v, name):
    if isinstance(v, int):
        return v, v
    t = tuple(v)
    if len(t) != 2 or not all(isinstance(e, int) for e in t):
        raise ValueError('deftc_torch: %s must be an int or a pair of ints, got %r' % (name, v))
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
    """(dtype, layout) in which deftc gets t: t's own when it is float32 or bfloat16 and dense NCHW
    or NHWC (`prefer` when both); else - _as then copies it - the kernels' layout `prefer` and
    copy_dtype (default: t's dtype if float32 or bfloat16, else float32)."""
    layout = _layout(t, prefer)
    if t.dtype in _CODE and layout is not None:
        return t.dtype, layout
    return copy_dtype or (t.dtype if t.dtype in _CODE else torch.float32), prefer


def _as(t, dtype, layout):
    """t in dtype and layout, 16-byte aligned: t itself when it is so already, else one copy."""
    mf = _MEMORY_FORMAT[layout]
    if t.dtype == dtype and t.is_contiguous(memory_format=mf) and t.data_ptr() % 16 == 0:
        return t
    return torch.empty_like(t, dtype=dtype, memory_format=mf).copy_(t)


def _grad_as(g, own):
    """A gradient g as autograd keeps it for an input like `own` (a meta tensor with the input's
    dtype and strides): in its dtype, with its strides when it is dense (contiguous when it is not,
    as empty_like makes it) - g itself when it is so already, else one copy."""
    layout = _layout(own, NCHW)
    if g.dtype == own.dtype and (g.stride() == own.stride() if layout is None else
                                 g.is_contiguous(memory_format=_MEMORY_FORMAT[layout])):
        return g
    return torch.empty_like(own, device=g.device).copy_(g)


def _autocast():
    """The autocast dtype in force for CUDA, or None."""
    return torch.get_autocast_dtype('cuda') if torch.is_autocast_enabled('cuda') else None


def _compute(x, mode, precision, autocast):
    """(dtype, layout) x runs in, and the dtype of the result."""
    if precision is None:
        if autocast is not None:
            dtype = torch.bfloat16 if autocast == torch.bfloat16 and mode == 'deft' else torch.float32
        else:
            dtype = x.dtype if x.dtype in _CODE else torch.float32
    else:
        dtype = torch.bfloat16 if precision == 'bf16' else torch.float32
    if dtype == torch.bfloat16:
        if mode == 'unfused':
            raise ValueError("deftc_torch: mode='unfused' is the float32 NCHW baseline; bf16 runs with mode='deft' "
                             "(or pass precision='fp32' to compute in float32)")
        layout = NHWC  # deftc's bf16 kernels are channels-last
    else:
        layout = NHWC if mode == 'deft' and _layout(x, NCHW) == NHWC else NCHW
    return dtype, layout, (dtype if autocast is not None else x.dtype)


class _DeformConv2dFn(torch.autograd.Function):
    """The op on tensors in the formats of `desc` (copies made by _as only where deform_conv2d's
    choice differs from a tensor's own); gradients returned in each input's own format."""

    @staticmethod
    def forward(ctx, x, offset, mask, weight, bias, desc, flags, fmts, out_dtype):
        (xd, xl), (od, ol), (md, ml), (wd, wl) = fmts
        xs, os_, ws = _as(x, xd, xl), _as(offset, od, ol), _as(weight, wd, wl)
        ms = _as(mask, md, ml) if mask is not None else None
        bs = _as(bias, torch.float32, NCHW) if bias is not None else None
        y = torch.empty((desc.n, desc.cout) + tuple(offset.shape[2:]), dtype=xd, device=x.device,
                        memory_format=_MEMORY_FORMAT[xl])  # [n, cout, ho, wo]: the offsets' positions
        with torch.cuda.device(x.device):
            _check(library().dt_deform_api_forward(ctypes.byref(desc), flags, _ptr(xs), _ptr(os_), _ptr(ms), _ptr(ws),
                                                   _ptr(bs), _ptr(y), _stream(x.device)))
        ctx.save_for_backward(xs, os_, ms, ws)
        ctx.desc, ctx.flags, ctx.x_fmt = desc, flags, (xd, xl)
        # each input's dtype and strides, without its memory, for its gradient
        ctx.own = [torch.empty_like(t, device='meta') if t is not None else None for t in (x, offset, mask, weight, bias)]
        if out_dtype == xd:
            return y
        return _as(y, out_dtype, _layout(x, NCHW) or NCHW)  # precision= against the input's dtype

    @staticmethod
    def backward(ctx, gy):
        xs, os_, ms, ws = ctx.saved_tensors
        need = ctx.needs_input_grad
        gx = torch.empty_like(xs) if need[0] else None
        goff = torch.empty_like(os_) if need[1] else None
        gmask = torch.empty_like(ms) if ms is not None and need[2] else None
        gw = torch.empty_like(ws) if need[3] else None
        gb = xs.new_empty(ctx.desc.cout, dtype=torch.float32) if ctx.desc.has_bias and need[4] else None
        grads = (gx, goff, gmask, gw, gb)
        if any(g is not None for g in grads):
            gy = _as(gy, *ctx.x_fmt)
            with torch.cuda.device(xs.device):
                _check(library().dt_deform_api_backward(ctypes.byref(ctx.desc), ctx.flags, _ptr(xs), _ptr(os_),
                                                        _ptr(ms), _ptr(ws), _ptr(gy), _ptr(gx), _ptr(goff),
                                                        _ptr(gmask), _ptr(gw), _ptr(gb), _stream(xs.device)))
        back = tuple(_grad_as(g, own) if g is not None else None for g, own in zip(grads, ctx.own))
        return back + (None, None, None, None)


def _check_tensor(name, t, autocast):
    if not isinstance(t, torch.Tensor):
        raise TypeError('deftc_torch: %s must be a tensor, got %s' % (name, type(t).__name__))
    if not t.is_floating_point():
        raise TypeError('deftc_torch: %s must be a floating-point tensor, got %s' % (name, t.dtype))
    if t.dtype == torch.float16 and autocast is None:
        raise TypeError('deftc_torch: %s is float16; deftc has no float16 kernels: pass float32 or bfloat16 (under '
                        'torch.autocast(dtype=torch.float16) the op runs in float32)' % name)


def deform_conv2d(input, offset, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), mask=None, *,
                  mode='deft', deterministic=False, precision=None):
    """torchvision.ops.deform_conv2d on deftc's kernels (same arguments and result; the formats,
    autocast and precision= as in the module's docstring)."""
    autocast = _autocast()
    tensors = {'input': input, 'offset': offset, 'weight': weight, 'bias': bias, 'mask': mask}
    for name, t in tensors.items():
        if t is not None:
            _check_tensor(name, t, autocast)
    if mode not in MODES:
        raise ValueError("deftc_torch: mode must be 'deft' or 'unfused', got %r" % (mode,))
    if precision not in PRECISIONS:
        raise ValueError("deftc_torch: precision must be None, 'fp32', 'tf32' or 'bf16', got %r" % (precision,))
    if input.dim() != 4 or weight.dim() != 4 or offset.dim() != 4:
        raise ValueError('deftc_torch: input, offset and weight must be 4-D (got %d, %d, %d dims)'
                         % (input.dim(), offset.dim(), weight.dim()))
    n, c, h, w = input.shape
    cout, cin_w, kh, kw = weight.shape
    if cin_w != c:
        raise ValueError('deftc_torch: weight %s has %d input channels, the input %d; grouped weights (torchvision\'s '
                         '`groups`) are not supported' % (tuple(weight.shape), cin_w, c))
    if offset.shape[1] % (2 * kh * kw):
        raise ValueError('deftc_torch: offset has %d channels, not a multiple of 2*kh*kw = %d'
                         % (offset.shape[1], 2 * kh * kw))
    groups = offset.shape[1] // (2 * kh * kw)
    if mask is not None and mask.shape[1] != groups * kh * kw:
        raise ValueError('deftc_torch: mask has %d channels, expected offset groups * kh * kw = %d'
                         % (mask.shape[1], groups * kh * kw))
    if bias is not None and tuple(bias.shape) != (cout,):
        raise ValueError('deftc_torch: bias %s must be (%d,)' % (tuple(bias.shape), cout))
    xd, xl, out_dtype = _compute(input, mode, precision, autocast)
    # offsets and mask that must be copied anyway are copied into what the kernels read, f32 NCHW
    fmts = ((xd, xl), _fmt(offset, NCHW, torch.float32),
            _fmt(mask, NCHW, torch.float32) if mask is not None else (torch.float32, NCHW), _fmt(weight, xl))
    sh, sw = _pair(stride, 'stride')
    ph, pw = _pair(padding, 'padding')
    dh, dw = _pair(dilation, 'dilation')
    desc = Desc(n, c, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, int(mask is not None), int(bias is not None),
                dtype=_CODE[xd], layout=xl, offset_dtype=_CODE[fmts[1][0]], offset_layout=fmts[1][1],
                mask_dtype=_CODE[fmts[2][0]], mask_layout=fmts[2][1], weight_dtype=_CODE[fmts[3][0]],
                weight_layout=fmts[3][1])
    flags = MODES[mode] | (DETERMINISTIC if deterministic else 0) | (TF32 if precision == 'tf32' else 0)
    lib = library()
    ho, wo = ctypes.c_int(), ctypes.c_int()
    _check(lib.dt_deform_api_out_size(ctypes.byref(desc), ctypes.byref(ho), ctypes.byref(wo)))  # deftc's message
    if offset.shape[0] != n or tuple(offset.shape[2:]) != (ho.value, wo.value):
        raise ValueError('deftc_torch: offset %s must be (%d, %d, %d, %d)' % (tuple(offset.shape), n, offset.shape[1],
                                                                              ho.value, wo.value))
    if mask is not None and (mask.shape[0] != n or tuple(mask.shape[2:]) != (ho.value, wo.value)):
        raise ValueError('deftc_torch: mask %s must be (%d, %d, %d, %d)' % (tuple(mask.shape), n, mask.shape[1],
                                                                            ho.value, wo.value))
    _check(lib.dt_deform_api_check(ctypes.byref(desc), flags))
    for name, t in tensors.items():
        if t is None:
            continue
        if t.device.type != 'cuda':
            raise ValueError('deftc_torch: %s is on %s; deftc runs on CUDA tensors (move the model and inputs to a '
                             'GPU, or use torchvision.ops.deform_conv2d on the CPU)' % (name, t.device))
        if t.device != input.device:
            raise ValueError('deftc_torch: %s is on %s, the input on %s' % (name, t.device, input.device))
    return _DeformConv2dFn.apply(input, offset, mask, weight, bias, desc, flags, fmts, out_dtype)


class DeformConv2d(nn.Module):
    """torchvision.ops.DeformConv2d on deftc's kernels: same constructor, parameters and
    state_dict keys (weight, bias), forward(input, offset, mask=None)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 *, mode='deft', deterministic=False, precision=None):
        super().__init__()
        if groups != 1:
            raise ValueError('deftc_torch.DeformConv2d: groups=%d; grouped weights are not supported (groups=1)' % groups)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size, 'kernel_size')
        self.stride, self.padding, self.dilation = _pair(stride, 'stride'), _pair(padding, 'padding'), _pair(dilation, 'dilation')
        self.groups = groups
        self.mode, self.deterministic, self.precision = mode, deterministic, precision
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, *self.kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):  # torchvision's initialization
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input, offset, mask=None):
        return deform_conv2d(input, offset, self.weight, self.bias, stride=self.stride, padding=self.padding,
                             dilation=self.dilation, mask=mask, mode=self.mode, deterministic=self.deterministic,
                             precision=self.precision)

    def extra_repr(self):
        return ('{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}, padding={padding}, '
                'dilation={dilation}, bias={has_bias}, mode={mode}, precision={precision}').format(has_bias=self.bias is not None, **self.__dict__)


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
