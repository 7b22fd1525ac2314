# The compiled op's raised errors, one after another, on the CPU and on CUDA (the H200's crash)
import sys, os
sys.path.insert(0, 'python')
import torch, deftc_torch as dtt
print(dtt.OP_PATH, torch.__version__, flush=True)
for dev in ['cpu'] + (['cuda'] if torch.cuda.is_available() else []):
    x = torch.randn(2, 4, 8, 8, device=dev, requires_grad=True); off = torch.zeros(2, 18, 8, 8, device=dev)
    w = torch.randn(4, 4, 3, 3, device=dev)
    for i, (what, fn) in enumerate([('weight groups', lambda: dtt.deform_conv2d(x, off, w[:, :3], padding=1)),
                                    ('no grad, weight groups', lambda: dtt.deform_conv2d(x.detach(), off, w[:, :3], padding=1)),
                                    ('offset channels', lambda: dtt.deform_conv2d(x, off[:, :5], w, padding=1)),
                                    ('weight groups again', lambda: dtt.deform_conv2d(x, off, w[:, :3], padding=1))]):
        print(dev, i, what, '...', flush=True)
        try:
            fn()
            print('   nothing raised', flush=True)
        except RuntimeError as e:
            print('   raised %s: %s' % (type(e).__name__, str(e).splitlines()[0][:90]), flush=True)
print('done')
