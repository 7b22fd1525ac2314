# the compiled op raising its first argument error (a CPU call): what crashed test_deftc_torch_ops on the H200
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), 'python'))
import torch
import deftc_torch as dtt
import deftc_lib
print('path', dtt.OP_PATH, torch.__version__, flush=True)
x, off, w = torch.zeros(1, 4, 6, 6), torch.zeros(1, 18, 6, 6), torch.zeros(2, 4, 3, 3)
try:
    dtt.deform_conv2d(x, off[:, :5], w, padding=1)
    print('nothing raised')
except Exception as e:
    print('raised', type(e).__mro__, str(e)[:200], flush=True)
