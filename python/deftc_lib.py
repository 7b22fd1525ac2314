"""libdeftc.so's deformable-convolution C API (ops/deform/dt_deform_api.h) through ctypes, without
PyTorch: loading the library, the descriptor, and errors as Python exceptions. deftc_torch.py
builds the PyTorch op on it.

The library is $DEFTC_LIB when that is set, else libdeftc.so next to this module, else
../build/libdeftc.so (the repository's build folder); build it with `make`."""
import ctypes
import os

MODES = {'unfused': 0, 'deft': 1}
DETERMINISTIC = 16  # flag or-ed into a mode
TF32 = 32           # flag or-ed into a mode: f32 x, the GEMMs on TF32 tensor cores
# dt_dtype / dt_layout values (core/dt_dtype.h) of the descriptor's format fields, and the API's
# own DT_DEFORM_API_F64 (every tensor of the call double)
F32, BF16, F16, F64 = 0, 1, 2, 8
NCHW, NHWC = 0, 1
CUDA, CPU = 0, 1  # desc.device: where every buffer lives

GEOMETRY = ('n', 'c', 'h', 'w', 'cout', 'kh', 'kw', 'stride_h', 'stride_w', 'pad_h', 'pad_w', 'dil_h', 'dil_w',
            'offset_groups', 'has_mask', 'has_bias')
FORMATS = ('dtype', 'layout', 'weight_dtype', 'weight_layout', 'offset_dtype', 'offset_layout', 'mask_dtype',
           'mask_layout')
PLACEMENT = ('weight_groups', 'device')  # the 108-byte version's fields
PITCHES = ('offset_pitch', 'mask_pitch')  # the 116-byte version's: offsets and mask as channel slices


class Desc(ctypes.Structure):
    """dt_deform_desc: Desc(n, c, h, w, cout, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    offset_groups, has_mask, has_bias, dtype=F32, layout=NCHW, weight_dtype=..., ...,
    weight_groups=1, device=CUDA, offset_pitch=0, mask_pitch=0). .size is set to this struct's size,
    116 bytes (the library refuses a size it does not know: a stale library or module shows up as
    that message, not as misread fields)."""
    _fields_ = [(n, ctypes.c_int) for n in GEOMETRY + ('size',) + FORMATS + PLACEMENT + PITCHES]

    def __init__(self, *geometry, **fields):
        if len(geometry) > len(GEOMETRY):
            raise TypeError('Desc takes the %d geometry fields positionally, the formats by name' % len(GEOMETRY))
        fields.setdefault('size', ctypes.sizeof(Desc))
        fields.setdefault('weight_groups', 1)
        super().__init__(*geometry, **fields)


# dt_deform_cuda's scratch allocator: alloc(ctx, bytes, stream) -> pointer (None: out of memory),
# free(ctx, ptr, stream).
ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class Cuda(ctypes.Structure):
    """dt_deform_cuda (dt_deform_api_set_cuda): the CUDA device the calling thread's next calls'
    buffers are on (-1: found from the buffers) and an optional scratch allocator."""
    _fields_ = [('device', ctypes.c_int), ('alloc', ALLOC_FN), ('free', FREE_FN), ('ctx', ctypes.c_void_p)]


class DeftcError(RuntimeError, ValueError):
    """A call deftc refused or that failed inside (a bad argument or descriptor, a CUDA error); the
    message is deftc's. A RuntimeError, as torchvision's own errors are (and a ValueError, as
    deftc's were before). .status is the C status (core/dt_common.h)."""

    def __init__(self, msg, status=-1):
        super().__init__(msg)
        self.status = status


# The statuses of core/dt_common.h (dt_status).
ERR_ARG, ERR_OOM, ERR_DEVICE = -1, -2, -3


def _oom_bases():
    """MemoryError, and torch.OutOfMemoryError (itself a RuntimeError) when PyTorch is importable, so
    that `except torch.OutOfMemoryError` - what batch-size finders catch - sees deftc's too."""
    try:
        import torch
        oom = getattr(torch, 'OutOfMemoryError', None) or getattr(torch.cuda, 'OutOfMemoryError', None)
    except Exception:  # no PyTorch (or a broken one): plain Python
        oom = None
    return (DeftcError, oom, MemoryError) if oom is not None else (DeftcError, MemoryError)


class DeftcOutOfMemory(*_oom_bases()):
    """deftc ran out of host or device memory (DT_ERR_OOM); the call released what it took, so a
    smaller call may succeed."""


_lib = None


def candidates():
    """Where the library is looked for, in order ($DEFTC_LIB alone when set)."""
    if os.environ.get('DEFTC_LIB'):
        return [os.environ['DEFTC_LIB']]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, 'libdeftc.so'), os.path.join(here, '..', 'build', 'libdeftc.so')]


def found():
    """The path of the libdeftc.so that library() loads (the first of candidates() that exists), or None."""
    return next((c for c in candidates() if os.path.isfile(c)), None)


def library():
    """The loaded libdeftc.so (loaded on first use); ImportError naming what to build if absent."""
    global _lib
    if _lib is not None:
        return _lib
    path = found()
    if path is None:
        raise ImportError('deftc: libdeftc.so not found (looked at: %s); build it with `make` in the deftc '
                          'repository, or point DEFTC_LIB at it' % ', '.join(candidates()))
    lib = ctypes.CDLL(path)
    if not hasattr(lib, 'dt_deform_api_check'):
        raise ImportError('deftc: %s predates the descriptor with formats (dt_deform_api_check is missing); rebuild '
                          'it with `make`' % path)
    vp, desc = ctypes.c_void_p, ctypes.POINTER(Desc)
    lib.dt_deform_api_forward.argtypes = [desc, ctypes.c_int] + [vp] * 7
    lib.dt_deform_api_backward.argtypes = [desc, ctypes.c_int] + [vp] * 11
    lib.dt_deform_api_forward.restype = lib.dt_deform_api_backward.restype = ctypes.c_int
    lib.dt_deform_api_out_size.argtypes = [desc, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    lib.dt_deform_api_out_size.restype = ctypes.c_int
    lib.dt_deform_api_check.argtypes = [desc, ctypes.c_int]
    lib.dt_deform_api_check.restype = ctypes.c_int
    lib.dt_deform_api_error.restype = ctypes.c_char_p
    lib.dt_deform_api_set_cuda.argtypes = [ctypes.POINTER(Cuda)]
    lib.dt_deform_api_set_cuda.restype = ctypes.c_int
    _lib = lib
    return lib


def error_of(rc, msg):
    """The exception for status rc with message msg: DeftcOutOfMemory for ERR_OOM, else DeftcError."""
    return DeftcOutOfMemory(msg, rc) if rc == ERR_OOM else DeftcError(msg, rc)


def error_for(rc):
    """The exception for a failed call's status rc, with deftc's message (the calling thread's)."""
    return error_of(rc, 'deftc: ' + library().dt_deform_api_error().decode(errors='replace'))


def check(rc):
    """Raises DeftcOutOfMemory (out of memory) or DeftcError (anything else) with deftc's message
    when a call returned non-zero. The library is usable after either."""
    if rc != 0:
        raise error_for(rc)
