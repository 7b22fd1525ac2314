"""Host time of deftc's PyTorch operator (python/deftc_torch.py) on a problem so small that the
kernels' own time is a small part of it: a [1, 4, 4, 4] float32 input, a 3x3 kernel, padding 1,
bias, no mask; x, offset, weight and bias require grad. Three calls, each the median of 7 runs of
500 calls (after 100 warm-up calls), in us a call:
  pair      y = deform_conv2d(...) and torch.autograd.grad(y, (x, offset, weight, bias), gy)
  forward   deform_conv2d(...) under torch.no_grad()
  backward  torch.ops.deftc.deform_conv2d_backward(...) alone, every gradient wanted
  kernels   the C API's forward and backward alone (dt_deform_api_forward, _backward through
            ctypes, the descriptor made once): the pair's kernel time, to subtract from it
  floor     torch.autograd.grad(x * 2, (x,), gy): PyTorch's own pair of one elementwise op, the
            least a pair called from Python costs on this machine
On CUDA these are the time of 500 calls to the sync: where the GPU runs a call's ~30 tiny kernels
slower than the host queues them, the queue fills and they are the GPU's time. Two more lines
there: the host's time alone, and what a pair asks of CUDA:
  host      pair, forward, backward and kernels again, each run's 20 calls queued behind a kernel
            that keeps the GPU busy longer than they take (torch.cuda._sleep), timed before the
            sync: no launch waits for the GPU (20 pairs stay within the launch queue)
  cuda      the CUDA runtime and driver calls of one pair as PyTorch's profiler records them
            (CUPTI; it leaves out a few cheap queries such as cudaGetLastError), with the most
            frequent ones
The path is the one deftc_torch chooses ($DEFTC_TORCH_OP=compiled|ctypes forces one).

    DEFTC_TORCH_OP=compiled python3 bench/torch_op_host_time.py [--lib build/libdeftc.so] [--device cpu|cuda]"""
import argparse
import ctypes
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'python'))


def median_us(call, sync, runs=7, calls=500, warmup=100):
    for _ in range(warmup):
        call()
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def host_us(call, runs=7, calls=20, warmup=100):
    """call's host time alone on CUDA (see the docstring: 'host'), us a call."""
    import torch
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU cycles: longer than 20 calls take to queue
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def cuda_calls(call, pairs=20):
    """The CUDA runtime / driver calls one call makes, as the profiler records them: (total,
    [(name, count)] most frequent first), per call."""
    import collections
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(pairs):
            call()
        torch.cuda.synchronize()
    names = collections.Counter(e.name for e in prof.events() if e.device_type == DeviceType.CPU and
                                e.name.startswith('cu') and 'Synchronize' not in e.name)
    return sum(names.values()) / pairs, [(n, c / pairs) for n, c in names.most_common(8)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--lib', default=os.path.join(HERE, '..', 'build', 'libdeftc.so'))
    ap.add_argument('--device', default='cpu')
    args = ap.parse_args()
    os.environ['DEFTC_LIB'] = os.path.abspath(args.lib)
    import torch
    import deftc_torch as dtt
    torch.manual_seed(0)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == 'cuda' else (lambda: None)
    x, off = torch.randn(1, 4, 4, 4, device=dev), torch.randn(1, 18, 4, 4, device=dev)
    w, b = torch.randn(4, 4, 3, 3, device=dev), torch.randn(4, device=dev)
    leaves = tuple(t.requires_grad_() for t in (x, off, w, b))
    gy = torch.randn(1, 4, 4, 4, device=dev)

    def pair():
        y = dtt.deform_conv2d(x, off, w, b, padding=1)
        torch.autograd.grad(y, leaves, gy)

    def forward():
        with torch.no_grad():
            dtt.deform_conv2d(x, off, w, b, padding=1)

    def backward():
        torch.ops.deftc.deform_conv2d_backward(gy, x, off, w, b, (1, 1), (1, 1), (1, 1), None, 'deft', False, None,
                                               [True, True, True, True, False])

    from deftc_lib import library
    lib, plan = library(), dtt._Plan(x, off, w, b, (1, 1), (1, 1), (1, 1), None, 'deft', False, None)
    desc = plan.desc(dev)
    stream = dtt._stream(dev) if dev.type == 'cuda' else None
    y, grads = torch.empty_like(gy), [torch.empty_like(t) for t in leaves]
    # the C API's order: forward (x, offset, mask, weight, bias, y), backward (x, offset, mask,
    # weight, grad_y, grad_x, grad_offset, grad_mask, grad_weight, grad_bias); no mask here
    fwd_ptrs = [dtt._ptr(t.detach()) for t in (x, off)] + [None] + [dtt._ptr(t.detach()) for t in (w, b, y)]
    bwd_ptrs = ([dtt._ptr(t.detach()) for t in (x, off)] + [None] + [dtt._ptr(t) for t in (w.detach(), gy)] +
                [dtt._ptr(t) for t in grads[:2]] + [None] + [dtt._ptr(t) for t in grads[2:]])

    def kernels():
        status = lib.dt_deform_api_forward(ctypes.byref(desc), plan.flags, *fwd_ptrs, stream)
        status |= lib.dt_deform_api_backward(ctypes.byref(desc), plan.flags, *bwd_ptrs, stream)
        assert status == 0, status

    def floor():
        torch.autograd.grad(x * 2, (x,), gy)

    print('deftc_torch path %s, torch %s, %s' % (dtt.OP_PATH, torch.__version__, dev))
    calls = (('pair', pair), ('forward', forward), ('backward', backward), ('kernels', kernels), ('floor', floor))
    for name, call in calls:
        print('%-8s %7.1f us' % (name, median_us(call, sync)))
    if dev.type == 'cuda':
        print('host     ' + ', '.join('%s %.1f us' % (name, host_us(call)) for name, call in calls))
        total, top = cuda_calls(pair)
        print('cuda     %.1f calls a pair: %s' % (total, ', '.join('%s %.1f' % nc for nc in top)))


if __name__ == '__main__':
    main()
