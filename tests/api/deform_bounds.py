"""What the GPU tests of tests/api/ compare deftc's deformable convolution with: torchvision's
fp32 op on the same input values, and - where deftc rounds to bf16 (or multiplies in TF32) - an
elementwise error bound derived from the format's unit roundoff.

The bound. Every result (y and each gradient) is a sum of products. If deftc rounds to a format
of unit roundoff u at most r times along any path from the inputs to a result (bf16: 8
significant bits, round to nearest even, u = 2^-8; TF32 inside cuBLAS: u = 2^-10, which also
covers truncation to its 10 stored bits), and both sides sum at most n terms in fp32
(gamma_n = n 2^-24 each), then
    |deftc - torchvision| <= ((1 + u)^r - 1 + 2 gamma_n) * M
where M is the same sum taken over the terms' absolute values. r = 4 covers the longest path of
the bf16 kernels: y = a sampled column (rounded, and at most once more with its mask) times a
rounded weight, the sum rounded to a bf16 y; dx = a rounded weight times bf16 grad_y, rounded
to a bf16 column gradient, gathered, rounded to a bf16 dx; likewise dweight, doffset and dmask
take at most three roundings. M is computed with torchvision itself:
  y, dx, dweight, dmask: the op on |x|, |w|, |grad_y| with the same offsets and mask (bilinear
    weights and the mask are >= 0, so every product is then >= 0 and the result is M);
  doffset: the derivative of a bilinear sample along dy (or dx) is a combination of its 4
    corner values with coefficients in [-1, 1], so its terms are bounded by the sum of the
    |corners|, which is 4x the bilinear sample of |x| at the centre of the cell. That cell's
    centre is base + floor(offset) + 0.5 (base, the tap's grid position, is an integer), so
    torchvision's dmask at offsets floor(offset) + 0.5 on |x|, |w|, |grad_y| is
    sum_c |dcol_c| * (that sample), and M_doffset = 4 * mask * that, for both components.
(y adds |bias|). The tests' masks are >= 0 (torch.rand), as DCNv2's sigmoid makes them.

Offsets. Bilinear interpolation has a kink wherever a sampling coordinate is an integer: the
derivative along the offset is one-sided there, and two correct implementations may take
either side (a difference of up to twice M_doffset). bf16 offsets (8 significant bits) land on
integers often, so the tests' offsets keep a fractional part in [0.1, 0.9] (offsets())."""
import torch
from torchvision.ops import deform_conv2d

U_BF16 = 2.0 ** -8
U_TF32 = 2.0 ** -10
NAMES = ['y', 'dx', 'doffset', 'dmask', 'dweight', 'dbias']


def offsets(*shape, generator, scale=1.5):
    """N(0, scale^2) offsets (CPU, fp32) moved off the kinks: fractional part in [0.1, 0.9],
    which bf16's rounding (a step of 2^-5 below 8) keeps away from integers."""
    o = torch.randn(*shape, generator=generator) * scale
    return o.floor() + 0.1 + 0.8 * (o - o.floor())


def factor(u, r, n):
    """(1 + u)^r - 1 + 2 gamma_n: the bound's factor on M."""
    return (1 + u) ** r - 1 + 2 * n * 2.0 ** -24


def terms(x, weight, offset):
    """A generous n: the longest fp32 sum of the op (dweight over every position, y over the
    columns, the column gradient over the output channels)."""
    return offset.shape[0] * offset.shape[2] * offset.shape[3] + weight[0].numel() + weight.shape[0] * weight[0, 0].numel()


def reference(x, offset, mask, weight, bias, gy, stride, padding, dilation):
    """torchvision's fp32 op and its gradients on the given values (any dtype, widened exactly):
    [y, dx, doffset, dmask, dweight, dbias], None where the input is None."""
    leaves = [t.detach().float().requires_grad_() if t is not None else None for t in (x, offset, mask, weight, bias)]
    y = deform_conv2d(leaves[0], leaves[1], leaves[3], leaves[4], stride=stride, padding=padding, dilation=dilation,
                      mask=leaves[2])
    y.backward(gy.float())
    return [y.detach()] + [t.grad if t is not None else None for t in leaves]


def majorants(x, offset, mask, weight, bias, gy, stride, padding, dilation):
    """M for [y, dx, doffset, dmask, dweight, dbias] (module docstring); None where the input is None."""
    xa, wa, gya, off = x.detach().float().abs(), weight.detach().float().abs(), gy.float().abs(), offset.detach().float()
    n, gk2, ho, wo = off.shape
    ones = torch.ones(n, gk2 // 2, ho, wo, device=off.device)
    m = mask.detach().float() if mask is not None else ones
    lx, lw, lm = xa.clone().requires_grad_(), wa.clone().requires_grad_(), m.clone().requires_grad_()
    y = deform_conv2d(lx, off, lw, None, stride=stride, padding=padding, dilation=dilation, mask=lm)
    y.backward(gya)
    centre = ones.clone().requires_grad_()
    yc = deform_conv2d(xa, off.floor() + 0.5, wa, None, stride=stride, padding=padding, dilation=dilation, mask=centre)
    yc.backward(gya)
    m_doff = (4 * centre.grad * m).repeat_interleave(2, dim=1)  # channel (g*K + k)*2 + {dy, dx}
    m_y = y.detach() + (bias.detach().float().abs().view(1, -1, 1, 1) if bias is not None else 0)
    return [m_y, lx.grad, m_doff, lm.grad if mask is not None else None, lw.grad,
            gya.sum((0, 2, 3)) if bias is not None else None]


def within(got, ref, bound_m, k):
    """(ok, worst |got - ref| / (k M)) elementwise."""
    err = (got.detach().float() - ref.float()).abs()
    lim = k * bound_m + 1e-30
    return bool((err <= lim).all()), (err / lim).max().item()


def rel(a, b):
    """Relative L2 error of a against b."""
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
