"""deftc's models on the PyTorch side: torchvision's ResNets with deftc's deformable layers
swapped in, and safetensors files read and written with torch alone (no `safetensors` package),
so that weights go both ways between torchvision and deftc (docs/weights.md).

    import deftc_models as dm
    model = dm.from_deftc('runs/x.safetensors')       # what build/train export= wrote, loaded strictly
    net = torchvision.models.resnet50()
    dm.make_deformable(net, 'all', version=2)          # every 3x3 conv of the blocks -> DeformableConv3x3
    dm.save_file(net.state_dict(), 'x.safetensors')    # what build/train init_from= reads

A deformable 3x3 conv (DeformableConv3x3) keeps the plain conv's parameter name, `weight`, so a
plain checkpoint loads into it, and has a child `offset`: an nn.Conv2d (same stride, padding 1,
bias) whose output channels are torchvision.ops.deform_conv2d's offsets - channel 2(g*9 + k)
is dy and 2(g*9 + k) + 1 is dx of kernel tap k (row-major over the 3x3 window) of offset
group g - followed for DCNv2 by G*9 mask logits (channel 2*G*9 + g*9 + k) through a sigmoid.
That is deftc's layer (ops/deform/deform_layer.c), so state_dicts are the same on both sides. Only
torch and torchvision are imported here; deftc's C code never imports Python."""
import ctypes
import json
import os

import torch
import torchvision
from torch import nn
from torchvision.ops import deform_conv2d

_DTYPES = {torch.float32: 'F32', torch.bfloat16: 'BF16', torch.float16: 'F16', torch.float64: 'F64',
           torch.int64: 'I64', torch.int32: 'I32'}
_TORCH = {v: k for k, v in _DTYPES.items()}


def save_file(tensors, path, metadata=None):
    """Writes {name: tensor} as a safetensors file (HF's layout: header padded with spaces to a
    multiple of 8, larger elements first so that each tensor is aligned, no gaps); metadata: a
    {str: str} dict for __metadata__. Written to path.tmp and renamed."""
    items = sorted(tensors.items(), key=lambda kv: -kv[1].element_size())  # stable: the given order within a size
    header, blobs, at = {}, [], 0
    if metadata:
        header['__metadata__'] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in items:
        t = t.detach().to('cpu').contiguous()
        if t.dtype not in _DTYPES:
            raise ValueError('%s: dtype %s has no safetensors name here' % (name, t.dtype))
        n = t.numel() * t.element_size()
        blobs.append(ctypes.string_at(t.data_ptr(), n) if n else b'')
        header[name] = {'dtype': _DTYPES[t.dtype], 'shape': list(t.shape), 'data_offsets': [at, at + n]}
        at += n
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open(path + '.tmp', 'wb') as f:
        f.write(len(text).to_bytes(8, 'little'))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + '.tmp', path)


def load_file(path):
    """A safetensors file as ({name: tensor}, metadata dict) - the tensors copied out of the file."""
    with open(path, 'rb') as f:
        data = f.read()
    n = int.from_bytes(data[:8], 'little')
    header = json.loads(data[8:8 + n])
    meta = header.pop('__metadata__', {})
    out = {}
    for name, e in header.items():
        b, end = e['data_offsets']
        raw = bytearray(data[8 + n + b:8 + n + end])
        t = torch.frombuffer(raw, dtype=_TORCH[e['dtype']]) if raw else torch.empty(0, dtype=_TORCH[e['dtype']])
        out[name] = t.reshape(e['shape'])
    return out, meta


class DeformableConv3x3(nn.Module):
    """deftc's deformable layer: y = deform_conv2d(x, offsets, weight, mask) with the offsets (and
    for version 2 the mask's logits) made by the child conv `offset` from x (see the module's
    text for its channel order). Zero-initialized offset conv: starts out as the plain conv
    (version 2: times sigmoid(0) = 0.5)."""

    def __init__(self, in_channels, out_channels, stride=1, version=1, offset_groups=1):
        super().__init__()
        if version not in (1, 2) or in_channels % offset_groups:
            raise ValueError('version 1 or 2, and offset_groups dividing the %d input channels' % in_channels)
        self.stride, self.version, self.offset_groups = stride, version, offset_groups
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, 3, 3))
        nn.init.kaiming_normal_(self.weight, mode='fan_out', nonlinearity='relu')
        self.offset = nn.Conv2d(in_channels, (3 if version == 2 else 2) * offset_groups * 9, 3, stride, 1, bias=True)
        nn.init.zeros_(self.offset.weight)
        nn.init.zeros_(self.offset.bias)

    def forward(self, x):
        om = self.offset(x)
        gk = self.offset_groups * 9
        offset, mask = (om[:, :2 * gk], torch.sigmoid(om[:, 2 * gk:])) if self.version == 2 else (om, None)
        return deform_conv2d(x, offset, self.weight, None, stride=self.stride, padding=1, mask=mask)

    def extra_repr(self):
        return '%d, %d, stride=%d, version=%d, offset_groups=%d' % (self.weight.shape[1], self.weight.shape[0], self.stride,
                                                                    self.version, self.offset_groups)


def stages_of(stages):
    """'none' | 'all' | '2,3,4' | an iterable of ints 1..4 -> a sorted list of stages."""
    if isinstance(stages, str):
        stages = [] if stages == 'none' else [1, 2, 3, 4] if stages == 'all' else [int(s) for s in stages.split(',')]
    stages = sorted(set(int(s) for s in stages))
    if any(s < 1 or s > 4 for s in stages):
        raise ValueError('stages are 1..4 (layer1..layer4), got %s' % stages)
    return stages


def make_deformable(model, stages, version=1, offset_groups=1):
    """Swaps deftc's deformable layer in for the 3x3 convs of a torchvision ResNet's blocks in
    `stages` (both convs of a BasicBlock, conv2 of a Bottleneck: deftc's placement), keeping each
    conv's weight; the offset convs start at zero. Returns the model (changed in place)."""
    for s in stages_of(stages):
        for block in getattr(model, 'layer%d' % s):
            names = ['conv1', 'conv2'] if isinstance(block, torchvision.models.resnet.BasicBlock) else ['conv2']
            for name in names:
                old = getattr(block, name)
                if not isinstance(old, nn.Conv2d) or old.kernel_size != (3, 3) or old.groups != 1 or old.dilation != (1, 1) \
                        or old.padding != (1, 1) or old.bias is not None:
                    raise ValueError('layer%d: %s is not a plain 3x3 conv (padding 1, no groups, dilation or bias)' % (s, name))
                new = DeformableConv3x3(old.in_channels, old.out_channels, old.stride[0], version, offset_groups)
                with torch.no_grad():
                    new.weight.copy_(old.weight)
                setattr(block, name, new.to(old.weight.device))
    return model


def from_deftc(path):
    """The torchvision model a deftc export describes (its __metadata__: deftc_model, classes,
    deform, deform_version, offset_groups), with its weights loaded strictly."""
    tensors, meta = load_file(path)
    if 'deftc_model' not in meta:
        raise ValueError('%s has no deftc metadata (deftc_model): build the model and load_state_dict it yourself' % path)
    if float(meta.get('width', '1')) != 1:
        raise ValueError('%s is a width-%s model: torchvision\'s ResNets have width 1' % (path, meta['width']))
    model = getattr(torchvision.models, meta['deftc_model'])(weights=None, num_classes=int(meta['classes']))
    make_deformable(model, meta.get('deform', 'none'), int(meta.get('deform_version', '1')),
                    int(meta.get('offset_groups', '1')))
    model.load_state_dict(tensors, strict=True)
    return model
