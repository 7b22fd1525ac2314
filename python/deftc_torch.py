"""deftc's deformable convolution for PyTorch: drop-ins for torchvision.ops.deform_conv2d and
torchvision.ops.DeformConv2d that run deftc's kernels (libdeftc.so, through ctypes - no compiled
extension) on the tensors' own CUDA device and PyTorch's current stream.

    import deftc_torch as dtt
    y = dtt.deform_conv2d(x, offset, weight, bias, stride=1, padding=1, mask=mask)  # torchvision's signature
    conv = dtt.DeformConv2d(64, 64, 3, padding=1)        # torchvision's constructor and state_dict keys
    dtt.swap_deform_convs(model)                          # replaces every torchvision DeformConv2d in place

Keyword-only extras: mode='deft' (channels-last kernels; 'unfused' = the NCHW baseline),
deterministic=False (True: bitwise-reproducible gradients; 'deft' is so anyway) and
precision='fp32' ('bf16': bf16 columns and GEMM operands with fp32 accumulation - a bf16
deformable conv, which torchvision does not have; 'tf32': TF32 tensor cores for the GEMMs).
Buffers stay float32 in every precision.

Semantics are torchvision's (offset groups from offset.shape[1], DCNv2 with a mask); weight
groups (torchvision's `groups`, weight.shape[1] < input channels) are not supported and raise.
Inputs may be non-contiguous (copied only when needed); under torch.autocast the op runs in
float32 (as torchvision's does) and returns float32. CPU tensors raise: deftc's C API runs on
the GPU.

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
from deftc_lib import MODES as _MODES, DETERMINISTIC as _DETERMINISTIC, PRECISIONS as _PRECISIONS, Desc as _Desc, \
    check as _check, library

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


def _f32(t):
    """t as a contiguous float32 tensor (a copy only when needed); None stays None."""
    return t.contiguous().float() if t is not None else None


class _DeformConv2dFn(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type='cuda', cast_inputs=torch.float32)
    def forward(ctx, x, offset, mask, weight, bias, desc, mode):
        lib = library()
        dtype = x.dtype
        x, offset, mask, weight, bias = (_f32(t) for t in (x, offset, mask, weight, bias))
        ho, wo = ctypes.c_int(), ctypes.c_int()
        _check(lib.dt_deform_api_out_size(ctypes.byref(desc), ctypes.byref(ho), ctypes.byref(wo)))
        y = x.new_empty((desc.n, desc.cout, ho.value, wo.value))
        stream = _stream(x.device)
        with torch.cuda.device(x.device):
            _check(lib.dt_deform_api_forward(ctypes.byref(desc), mode, _ptr(x), _ptr(offset), _ptr(mask), _ptr(weight),
                                             _ptr(bias), _ptr(y), stream))
        ctx.save_for_backward(x, offset, mask, weight, bias)
        ctx.desc, ctx.mode = desc, mode
        return y if dtype == torch.float32 else y.to(dtype)

    @staticmethod
    @torch.amp.custom_bwd(device_type='cuda')
    def backward(ctx, gy):
        x, offset, mask, weight, bias = ctx.saved_tensors
        need = ctx.needs_input_grad
        gx = torch.empty_like(x) if need[0] else None
        goff = torch.empty_like(offset) if need[1] else None
        gmask = torch.empty_like(mask) if mask is not None and need[2] else None
        gw = torch.empty_like(weight) if need[3] else None
        gb = torch.empty_like(bias) if bias is not None and need[4] else None
        if any(g is not None for g in (gx, goff, gmask, gw, gb)):
            gy = gy.contiguous().float()
            stream = _stream(x.device)
            with torch.cuda.device(x.device):
                _check(library().dt_deform_api_backward(ctypes.byref(ctx.desc), ctx.mode, _ptr(x), _ptr(offset),
                                                        _ptr(mask), _ptr(weight), _ptr(gy), _ptr(gx), _ptr(goff),
                                                        _ptr(gmask), _ptr(gw), _ptr(gb), stream))
        return gx, goff, gmask, gw, gb, None, None


def deform_conv2d(input, offset, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), mask=None, *,
                  mode='deft', deterministic=False, precision='fp32'):
    """torchvision.ops.deform_conv2d on deftc's kernels (same arguments and result)."""
    tensors = {'input': input, 'offset': offset, 'weight': weight, 'bias': bias, 'mask': mask}
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError('deftc_torch: %s must be a tensor, got %s' % (name, type(t).__name__))
        if t.device.type != 'cuda':
            raise ValueError('deftc_torch: %s is on %s; deftc runs on CUDA tensors (move the model and inputs to a '
                             'GPU, or use torchvision.ops.deform_conv2d on the CPU)' % (name, t.device))
        if t.device != input.device:
            raise ValueError('deftc_torch: %s is on %s, the input on %s' % (name, t.device, input.device))
        if not t.is_floating_point():
            raise TypeError('deftc_torch: %s must be a floating-point tensor, got %s' % (name, t.dtype))
    if mode not in _MODES:
        raise ValueError("deftc_torch: mode must be 'deft' or 'unfused', got %r" % (mode,))
    if precision not in _PRECISIONS:
        raise ValueError("deftc_torch: precision must be 'fp32', 'tf32' or 'bf16', got %r" % (precision,))
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
    sh, sw = _pair(stride, 'stride')
    ph, pw = _pair(padding, 'padding')
    dh, dw = _pair(dilation, 'dilation')
    desc = _Desc(n, c, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, int(mask is not None), int(bias is not None))
    m = _MODES[mode] | (_DETERMINISTIC if deterministic else 0) | _PRECISIONS[precision]
    ho, wo = ctypes.c_int(), ctypes.c_int()
    _check(library().dt_deform_api_out_size(ctypes.byref(desc), ctypes.byref(ho), ctypes.byref(wo)))  # deftc's message
    ho, wo = ho.value, wo.value
    if mask is not None and (mask.shape[0] != n or tuple(mask.shape[2:]) != (ho, wo)):
        raise ValueError('deftc_torch: mask %s must be (%d, %d, %d, %d)' % (tuple(mask.shape), n, mask.shape[1], ho, wo))
    if offset.shape[0] != n or tuple(offset.shape[2:]) != (ho, wo):
        raise ValueError('deftc_torch: offset %s must be (%d, %d, %d, %d)' % (tuple(offset.shape), n, offset.shape[1], ho, wo))
    return _DeformConv2dFn.apply(input, offset, mask, weight, bias, desc, m)


class DeformConv2d(nn.Module):
    """torchvision.ops.DeformConv2d on deftc's kernels: same constructor, parameters and
    state_dict keys (weight, bias), forward(input, offset, mask=None)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 *, mode='deft', deterministic=False, precision='fp32'):
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


def swap_deform_convs(model, mode='deft', deterministic=False, precision='fp32'):
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
