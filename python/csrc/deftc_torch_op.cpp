// deftc_torch_op.cpp: deftc::deform_conv2d and deftc::deform_conv2d_backward as compiled PyTorch
// operators - the schemas (TORCH_LIBRARY), their CPU and CUDA kernels, which call libdeftc.so's
// C API (ops/deform/dt_deform_api.h) on the tensors' data pointers, and the forward's autograd
// formula (TORCH_LIBRARY_IMPL). It is python/deftc_torch.py's ctypes kernels and autograd formula
// in C++: the same argument checks and messages, the same decisions of what is passed as it is
// and what is copied (deftc_torch.py's _Plan, _fmt, _as, _grad_as), the same C calls, the same
// gradients wanted. deftc_torch.py loads it (torch.ops.load_library) when it is built
// (`make torch-op`) and registers the rest in Python on top of it, as for the ctypes op: the fake
// kernels and autocast.
//
// ABI: PyTorch's regular C++ API (TORCH_LIBRARY, at::Tensor), not the LibTorch stable ABI
// (STABLE_TORCH_LIBRARY): the kernels allocate and copy in a memory format (channels_last
// empty_like, copy_) and read the current CUDA stream generically - the stable ABI's C shims
// cover only part of that. So the .so is built against, and only loads into, the PyTorch it was
// built with; `make torch-op` rebuilds it (deftc_torch.py says so when the load fails). Its
// errors are PyTorch's C++ exceptions (c10::Error, c10::OutOfMemoryError), which PyTorch turns
// into RuntimeError and torch.OutOfMemoryError wherever the op is called from - Python, the C++
// autograd engine's threads, a compiled graph - with no Python of its own on the error path.
#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/generic_math.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ops/deform/dt_deform_api.h"

namespace {

const char *const OP = "deftc::deform_conv2d";

// The C API's status for an out of memory (-2, DT_ERR_OOM of core/dt_common.h: a header of the
// library's inside, which the operator, a client of dt_deform_api.h alone, does not include)
constexpr int STATUS_OOM = -2;

// An error of the op: c10::OutOfMemoryError for deftc's DT_ERR_OOM (torch.OutOfMemoryError in
// Python: a smaller call may succeed), c10::Error (RuntimeError) with deftc's message otherwise.
// Not deftc_lib's Python classes, which the ctypes path raises: a C++ exception that carries a
// Python object across PyTorch's bindings depends on the two libraries' pybind11 builds agreeing
// (on the H200's PyTorch 2.11 the first one raised ended the process), PyTorch's own do not.
[[noreturn]] void raise_deftc(int status, const std::string &message) {
    const c10::SourceLocation where{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
    if (status == STATUS_OOM) throw c10::OutOfMemoryError(where, message);
    throw c10::Error(where, message);
}

// A refused argument: deftc_torch.py's _fail, "deftc::deform_conv2d: <what>", status -1.
[[noreturn]] void fail(const std::string &what) { raise_deftc(-1, std::string(OP) + ": " + what); }

// Messages are built with std::string and std::to_string alone, no iostreams: nothing of the
// C++ runtime's locale machinery on the error path (the Makefile's CXXRT says what a second copy
// of that runtime in the process did to it).

// ints joined by ", " ("1, 4, 6, 6")
std::string join(at::IntArrayRef v) {
    std::string s;
    for (size_t i = 0; i < v.size(); i++) {
        if (i) s += ", ";
        s += std::to_string(v[i]);
    }
    return s;
}

// Python's repr of a shape (tuple(t.shape)): "(3,)", "(1, 4, 6, 6)".
std::string shape_repr(at::IntArrayRef shape) {
    std::string s = "(";
    s += join(shape);
    s += shape.size() == 1 ? ",)" : ")";
    return s;
}

// Python's repr of a dtype: "torch.int32".
std::string dtype_repr(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

at::MemoryFormat memory_format(int layout) {
    return layout == DT_NHWC ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// dt_dtype code of a dtype deftc takes as it is (float32, bfloat16, float64).
int dtype_code(at::ScalarType t) {
    return t == at::kFloat ? int(DT_F32) : t == at::kBFloat16 ? int(DT_BF16) : int(DT_DEFORM_API_F64);
}

// NCHW or NHWC when t is dense in that memory format, `prefer` when it is both (C == 1, or 1x1
// images: the same bytes), -1 when it is neither (deftc_torch.py's _layout).
int layout_of(const at::Tensor &t, int prefer) {
    if (t.dim() != 4) return t.is_contiguous() ? DT_NCHW : -1;
    bool nchw = t.is_contiguous(), nhwc = t.is_contiguous(at::MemoryFormat::ChannelsLast);
    if (nchw && nhwc) return prefer;
    return nchw ? DT_NCHW : nhwc ? DT_NHWC : -1;
}

struct Format {
    at::ScalarType dtype;
    int layout;
    int pitch = 0;      // an offset or mask handed over where it lies (kept): dt_deform_api.h's pitch
    bool kept = false;  // handed over as it is, whatever its alignment (field_of)
};

// The format deftc gets t in, in an f32 / bf16 call (_fmt): t's own when it is float32 or
// bfloat16 and dense NCHW or NHWC; else - as_format then copies it - the kernels' layout `prefer`
// and copy_dtype (none: t's dtype if float32 or bfloat16, else float32).
Format format_of(const at::Tensor &t, int prefer, std::optional<at::ScalarType> copy_dtype = std::nullopt) {
    int layout = layout_of(t, prefer);
    bool kept = t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16;
    if (kept && layout >= 0) return {t.scalar_type(), layout};
    return {copy_dtype.value_or(kept ? t.scalar_type() : at::kFloat), prefer};
}

// The layout of at::empty_like(t) (_stride_order): NHWC when t, 4-D and not contiguous, has the
// channels-last stride order (a channel slice of a channels_last tensor), else NCHW. A copy of t
// made in it is a plain strided copy, and its gradient, made like it, is the one autograd keeps.
int stride_order(const at::Tensor &t) {
    if (t.dim() != 4 || t.is_contiguous()) return DT_NCHW;
    return t.suggest_memory_format() == at::MemoryFormat::ChannelsLast ? DT_NHWC : DT_NCHW;
}

// The format in which mode='deft' reads the offsets or mask t where they lie (_field): float32 or
// bfloat16, dense NCHW / NHWC (pitch 0) or a channel slice of such a larger tensor with its pitch;
// nullopt when it has to be copied. Alignment does not matter: deft packs the fields element by
// element.
std::optional<Format> field_of(const at::Tensor &t) {
    if ((t.scalar_type() != at::kFloat && t.scalar_type() != at::kBFloat16) || t.dim() != 4) return std::nullopt;
    int layout = layout_of(t, DT_NCHW);
    if (layout >= 0) return Format{t.scalar_type(), layout, 0, true};
    const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
    const int64_t sn = t.stride(0), sc = t.stride(1), sh = t.stride(2), sw = t.stride(3);
    auto fits = [](std::initializer_list<std::array<int64_t, 3>> dims) {
        for (const auto &d : dims)
            if (d[0] != 1 && d[1] != d[2]) return false;
        return true;
    };
    const int64_t ld = w > 1 ? sw : h > 1 ? sh : sn;  // NHWC: from one position to the next
    if (ld >= c && fits({{c, sc, 1}, {w, sw, ld}, {h, sh, w * ld}, {n, sn, h * w * ld}}))
        return ld < (int64_t{1} << 31) ? std::optional<Format>(Format{t.scalar_type(), DT_NHWC, int(ld), true}) : std::nullopt;
    if (sn >= c * h * w && fits({{w, sw, 1}, {h, sh, w}, {c, sc, h * w}}))  // NCHW: from one image to the next
        return sn < (int64_t{1} << 31) ? std::optional<Format>(Format{t.scalar_type(), DT_NCHW, int(sn), true}) : std::nullopt;
    return std::nullopt;
}

// t in format f, 16-byte aligned: t itself when it is so already (or f keeps it), else one copy (_as).
at::Tensor as_format(const at::Tensor &t, Format f) {
    if (f.kept) return t;
    at::MemoryFormat mf = memory_format(f.layout);
    if (t.scalar_type() == f.dtype && t.is_contiguous(mf) && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0)
        return t;
    return at::empty_like(t, t.options().dtype(f.dtype), mf).copy_(t);
}

// A gradient g as autograd keeps it for the input `own`: in own's dtype with the strides
// at::empty_like(own) has - g itself when it is so already, else one copy (_grad_as).
at::Tensor as_grad_of(const at::Tensor &g, const at::Tensor &own) {
    if (g.scalar_type() != own.scalar_type()) return at::empty_like(own, own.options().device(g.device())).copy_(g);
    // A dense `own` (the usual case) gets its own strides from at::empty_like: compared directly,
    // without the meta tensor (an allocation through the dispatcher for each gradient).
    if (own.is_non_overlapping_and_dense() && g.strides() == own.strides()) return g;
    if (g.strides() == at::empty_like(own, own.options().device(at::kMeta)).strides())
        return g;
    return at::empty_like(own, own.options().device(g.device())).copy_(g);
}

std::pair<int64_t, int64_t> pair_of(at::IntArrayRef v, const char *name) {
    if (v.size() != 2) {
        fail(std::string(name) + " must be an int or a pair of ints, got [" + join(v) + "]");
    }
    return {v[0], v[1]};
}

std::string format(const char *fmt, std::initializer_list<int64_t> args) {
    std::string s;
    auto a = args.begin();
    for (const char *p = fmt; *p; p++) {
        if (*p == '%' && a != args.end()) s += std::to_string(*a++);
        else s += *p;
    }
    return s;
}

// One call as deftc gets it, decided from the tensors' metadata (deftc_torch.py's _Plan, its
// checks and messages in its order): the descriptor, each tensor's format, the result's.
struct Plan {
    dt_deform_desc desc{};
    Format x_format, offset_format, mask_format, weight_format, out_format;
    at::ScalarType bias_dtype;
    std::vector<int64_t> shape;  // y: [n, cout, ho, wo]
    int flags;

    Plan(const at::Tensor &input, const at::Tensor &offset, const at::Tensor &weight,
         const std::optional<at::Tensor> &bias, at::IntArrayRef stride, at::IntArrayRef padding,
         at::IntArrayRef dilation, const std::optional<at::Tensor> &mask_t, c10::string_view mode, bool deterministic,
         std::optional<c10::string_view> precision);
};

void check_tensor(const char *name, const at::Tensor &t, const at::Tensor &input) {
    if (!t.is_floating_point()) fail(std::string(name) + " must be a floating-point tensor, got " + dtype_repr(t.scalar_type()));
    if (t.device() != input.device())
        fail(std::string(name) + " is on " + t.device().str() + ", the input on " + input.device().str());
    int64_t want = std::string(name) == "bias" ? 1 : 4;
    if (t.dim() != want) fail(std::string(name) + format(" must be %-D, got % dimensions", {want, t.dim()}));
}

// x, y and their gradients' format and the result's from x's metadata and the options (_compute).
void decide_compute(Plan &p, const at::Tensor &x, c10::string_view mode, std::optional<c10::string_view> precision) {
    at::ScalarType t = x.scalar_type();
    at::ScalarType dtype;
    if (!precision) dtype = (t == at::kFloat || t == at::kBFloat16 || t == at::kDouble) ? t : at::kFloat;
    else dtype = *precision == "bf16" ? at::kBFloat16 : at::kFloat;
    int layout;
    if (dtype == at::kBFloat16) {
        if (mode == "unfused")
            fail("mode='unfused' is the float32 NCHW baseline; bf16 runs with mode='deft' (or pass precision='fp32' "
                 "to compute in float32)");
        layout = DT_NHWC;  // deftc's bf16 kernels are channels-last
    } else if (dtype == at::kDouble) {
        layout = DT_NCHW;  // deftc's f64 kernels are NCHW
    } else {
        layout = mode == "deft" && layout_of(x, DT_NCHW) == DT_NHWC ? DT_NHWC : DT_NCHW;
    }
    p.x_format = {dtype, layout};
    int own = layout_of(x, DT_NCHW);
    p.out_format = t == dtype ? p.x_format : Format{t, own >= 0 ? own : DT_NCHW};
}

Plan::Plan(const at::Tensor &input, const at::Tensor &offset, const at::Tensor &weight,
           const std::optional<at::Tensor> &bias, at::IntArrayRef stride, at::IntArrayRef padding,
           at::IntArrayRef dilation, const std::optional<at::Tensor> &mask_t, c10::string_view mode, bool deterministic,
           std::optional<c10::string_view> precision) {
    if (mode != "deft" && mode != "unfused") fail("mode must be 'deft' or 'unfused', got '" + std::string(mode) + "'");
    if (precision && *precision != "fp32" && *precision != "tf32" && *precision != "bf16")
        fail("precision must be None, 'fp32', 'tf32' or 'bf16', got '" + std::string(*precision) + "'");
    check_tensor("input", input, input);
    check_tensor("offset", offset, input);
    check_tensor("weight", weight, input);
    if (bias) check_tensor("bias", *bias, input);
    if (mask_t) check_tensor("mask", *mask_t, input);
    auto [sh, sw] = pair_of(stride, "stride");
    auto [ph, pw] = pair_of(padding, "padding");
    auto [dh, dw] = pair_of(dilation, "dilation");
    int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
    int64_t cout = weight.size(0), cw = weight.size(1), kh = weight.size(2), kw = weight.size(3);
    if (std::min({c, h, w, cout, cw, kh, kw}) < 1)
        fail("input " + shape_repr(input.sizes()) + " and weight " + shape_repr(weight.sizes()) +
             " must have positive sizes (but the batch)");
    if (sh < 1 || sw < 1 || ph < 0 || pw < 0 || dh < 1 || dw < 1)
        fail(format("stride (%, %) and dilation (%, %) must be positive, padding (%, %) not negative",
                    {sh, sw, dh, dw, ph, pw}));
    if (c % cw || cout % (c / cw))
        fail(format("weight.shape[1] = % does not divide the input channels % into weight groups of which the % "
                    "output channels are a multiple", {cw, c, cout}));
    int64_t groups = offset.size(1) / (2 * kh * kw);
    if (groups == 0)
        fail(format("the shape of the offset tensor at dimension 1 is not valid. It should be a multiple of 2 * "
                    "weight.size[2] * weight.size[3].\nGot offset.shape[1]=%, while 2 * weight.size[2] * "
                    "weight.size[3]=%", {offset.size(1), 2 * kh * kw}));
    if (offset.size(1) != groups * 2 * kh * kw)
        fail(format("offset.shape[1] is not valid: got: % expected: %", {offset.size(1), groups * 2 * kh * kw}));
    if (mask_t && mask_t->size(1) != groups * kh * kw)
        fail(format("mask.shape[1] is not valid: got: % expected: %", {mask_t->size(1), groups * kh * kw}));
    if (c % groups) fail(format("% input channels cannot be split into % offset groups", {c, groups}));
    // Python's // floors: the numerator is negative when the input is too small for the kernel.
    int64_t ho = c10::div_floor_integer(h + 2 * ph - dh * (kh - 1) - 1, sh) + 1;
    int64_t wo = c10::div_floor_integer(w + 2 * pw - dw * (kw - 1) - 1, sw) + 1;
    if (ho < 1 || wo < 1)
        fail(format("Calculated output size too small - out_h: % out_w: % (input %x% is too small for the kernel)",
                    {ho, wo, h, w}));
    if (offset.size(0) != n) fail(format("invalid batch size of offset (%, the input %)", {offset.size(0), n}));
    if (offset.size(2) != ho || offset.size(3) != wo)
        fail(format("offset output dims: (%, %) - computed output dims: (%, %)", {offset.size(2), offset.size(3), ho, wo}));
    if (mask_t && mask_t->size(0) != n) fail(format("invalid batch size of mask (%, the input %)", {mask_t->size(0), n}));
    if (mask_t && (mask_t->size(2) != ho || mask_t->size(3) != wo))
        fail(format("mask output dims: (%, %) - computed output dims: (%, %)", {mask_t->size(2), mask_t->size(3), ho, wo}));
    if (bias && bias->size(0) != cout)
        fail(format("bias has % elements, the weight % output channels", {bias->size(0), cout}));
    decide_compute(*this, input, mode, precision);
    if (x_format.dtype == at::kDouble) {  // every tensor double NCHW
        offset_format = mask_format = weight_format = {at::kDouble, DT_NCHW};
        bias_dtype = at::kDouble;
    } else if (mode == "deft") {  // offsets and mask: deft reads either dtype and layout, and channel slices,
        // where they lie (field_of); one that must be copied keeps its dtype and stride order
        offset_format = field_of(offset).value_or(format_of(offset, stride_order(offset)));
        mask_format = mask_t ? field_of(*mask_t).value_or(format_of(*mask_t, stride_order(*mask_t)))
                             : Format{at::kFloat, DT_NCHW};
        weight_format = format_of(weight, x_format.layout);
        bias_dtype = at::kFloat;
    } else {  // unfused: offsets and mask that must be copied anyway are copied into what its kernels read, f32 NCHW
        offset_format = format_of(offset, DT_NCHW, at::kFloat);
        mask_format = mask_t ? format_of(*mask_t, DT_NCHW, at::kFloat) : Format{at::kFloat, DT_NCHW};
        weight_format = format_of(weight, x_format.layout);
        bias_dtype = at::kFloat;
    }
    int64_t geometry[] = {n, c, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, mask_t.has_value(), bias.has_value()};
    int *fields = &desc.n;  // the descriptor's first 16 ints are the geometry, in this order
    for (int i = 0; i < 16; i++) fields[i] = static_cast<int>(geometry[i]);
    desc.size = sizeof(dt_deform_desc);
    desc.dtype = dtype_code(x_format.dtype), desc.layout = x_format.layout;
    desc.offset_dtype = dtype_code(offset_format.dtype), desc.offset_layout = offset_format.layout;
    desc.mask_dtype = dtype_code(mask_format.dtype), desc.mask_layout = mask_format.layout;
    desc.offset_pitch = offset_format.pitch, desc.mask_pitch = mask_format.pitch;
    desc.weight_dtype = dtype_code(weight_format.dtype), desc.weight_layout = weight_format.layout;
    desc.weight_groups = static_cast<int>(c / cw);
    desc.device = input.device().is_cpu() ? DT_DEFORM_API_CPU : DT_DEFORM_API_CUDA;
    shape = {n, cout, ho, wo};
    flags = (mode == "deft" ? DT_DEFORM_API_DEFT : DT_DEFORM_API_UNFUSED) |
            (deterministic ? DT_DEFORM_API_DETERMINISTIC : 0) | (precision && *precision == "tf32" ? DT_DEFORM_API_TF32 : 0);
}

const void *ptr(const std::optional<at::Tensor> &t) { return t ? t->data_ptr() : nullptr; }

// The C API's stream argument: PyTorch's current stream on `device`, its default stream (handle
// 0) passed as cudaStreamLegacy (handle 1), since NULL would mean deftc's own, unsynchronized
// stream; NULL on the CPU, where there is none. Read through the device guard interface, so that
// this file needs no CUDA header and builds against a CPU-only PyTorch as well.
void *stream_of(const at::Device &device) {
    if (device.is_cpu()) return nullptr;
    void *s = c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle();
    return s ? s : reinterpret_cast<void *>(1);
}

// One C API call's status: deftc's message (the calling thread's) as deftc_lib's exception.
void check_status(int rc) {
    if (rc != 0) raise_deftc(rc, std::string("deftc: ") + dt_deform_api_error());
}

// The C API's scratch from PyTorch's CUDA caching allocator (c10::GetAllocator(CUDA) is it, read
// without a CUDA header): raw_allocate takes a block for the current stream of the current
// device - the guard's device and the stream the call is queued on - so PyTorch reuses it in that
// stream's order, and while a CUDA graph is captured it comes from the graph's private pool. No
// C++ exception may cross deftc's C frames: an out of memory is a NULL (deftc raises DT_ERR_OOM).
thread_local int scratch_blocks;  // taken by this thread's current call (for the tests' allocation counts)

void *torch_alloc(void *, size_t bytes, void *) {
    try {
        void *p = c10::GetAllocator(c10::DeviceType::CUDA)->raw_allocate(bytes);
        scratch_blocks++;
        return p;
    } catch (...) {
        return nullptr;
    }
}

void torch_free(void *, void *ptr, void *) {
    try {
        c10::GetAllocator(c10::DeviceType::CUDA)->raw_deallocate(ptr);
    } catch (...) {
    }
}

// The calling thread's CUDA setting for the one call on `device` (the forward runs on the
// caller's thread, the backward on the autograd engine's thread of the device): the device stated
// (no pointer queries) and PyTorch's allocator, put back to the defaults when the call is over, so
// that the thread's other C API calls (ctypes ones too) are not affected; the CPU needs none.
struct UseCuda {
    bool set;
    explicit UseCuda(const at::Device &device) : set(!device.is_cpu()) {
        scratch_blocks = 0;
        if (!set) return;
        dt_deform_cuda cuda{device.index() >= 0 ? int(device.index()) : 0, torch_alloc, torch_free, nullptr};
        check_status(dt_deform_api_set_cuda(&cuda));
    }
    ~UseCuda() {
        if (set) dt_deform_api_set_cuda(nullptr);
    }
};

// The data pointers of the last forward and backward C call (the order of their arguments: x,
// offset, mask, weight, bias, y; x, offset, mask, weight, grad_y, grad_x, grad_offset,
// grad_mask, grad_weight, grad_bias) and the scratch blocks it took from PyTorch's allocator, for
// the tests that check nothing was copied on this path (deftc_torch_op_last_call below). The
// backward may run on another thread than the forward.
std::mutex last_mutex;
uintptr_t last_call[2][11];  // [10]: the scratch blocks

void record(int which, std::initializer_list<const void *> ptrs) {
    std::lock_guard<std::mutex> lock(last_mutex);
    int i = 0;
    for (const void *p : ptrs) last_call[which][i++] = reinterpret_cast<uintptr_t>(p);
}

void record_scratch(int which) {
    std::lock_guard<std::mutex> lock(last_mutex);
    last_call[which][10] = static_cast<uintptr_t>(scratch_blocks);
}

at::Tensor forward(const at::Tensor &input, const at::Tensor &offset, const at::Tensor &weight,
                   const std::optional<at::Tensor> &bias, at::IntArrayRef stride, at::IntArrayRef padding,
                   at::IntArrayRef dilation, const std::optional<at::Tensor> &mask, c10::string_view mode,
                   bool deterministic, std::optional<c10::string_view> precision) {
    Plan p(input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision);
    at::Tensor xs = as_format(input, p.x_format), os = as_format(offset, p.offset_format), ws = as_format(weight, p.weight_format);
    std::optional<at::Tensor> ms, bs;
    if (mask) ms = as_format(*mask, p.mask_format);
    if (bias) bs = as_format(*bias, {p.bias_dtype, DT_NCHW});
    at::Tensor y = at::empty(p.shape, input.options().dtype(p.x_format.dtype), memory_format(p.x_format.layout));
    c10::OptionalDeviceGuard guard(input.device());
    UseCuda cuda(input.device());
    record(0, {xs.data_ptr(), os.data_ptr(), ptr(ms), ws.data_ptr(), ptr(bs), y.data_ptr()});
    check_status(dt_deform_api_forward(&p.desc, p.flags, xs.data_ptr(), os.data_ptr(), ptr(ms), ws.data_ptr(), ptr(bs),
                                       y.data_ptr(), stream_of(input.device())));
    record_scratch(0);
    return as_format(y, p.out_format);  // y itself unless precision= (or float16) differs from the input's dtype
}

// The gradients wanted of (input, offset, weight, bias, mask), in that order, each in its input's
// dtype and strides (at::empty_like's).
std::vector<at::Tensor> backward(const at::Tensor &grad, const at::Tensor &input, const at::Tensor &offset,
                                 const at::Tensor &weight, const std::optional<at::Tensor> &bias, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef dilation,
                                 const std::optional<at::Tensor> &mask, c10::string_view mode, bool deterministic,
                                 std::optional<c10::string_view> precision, const c10::List<bool> &wanted) {
    Plan p(input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision);
    at::Tensor xs = as_format(input, p.x_format), os = as_format(offset, p.offset_format), ws = as_format(weight, p.weight_format);
    std::optional<at::Tensor> ms, gx, goff, gw, gb, gm;
    if (mask) ms = as_format(*mask, p.mask_format);
    if (wanted[0]) gx = at::empty_like(xs);
    if (wanted[1]) goff = at::empty_like(os);
    if (wanted[2]) gw = at::empty_like(ws);
    if (wanted[3]) gb = at::empty(bias->sizes(), input.options().dtype(p.bias_dtype));
    if (wanted[4]) gm = at::empty_like(*ms);
    at::Tensor gy = as_format(grad, p.x_format);
    c10::OptionalDeviceGuard guard(input.device());
    UseCuda cuda(input.device());
    auto out = [](std::optional<at::Tensor> &t) { return t ? t->data_ptr() : nullptr; };
    record(1, {xs.data_ptr(), os.data_ptr(), ptr(ms), ws.data_ptr(), gy.data_ptr(), out(gx), out(goff), out(gm), out(gw),
               out(gb)});
    check_status(dt_deform_api_backward(&p.desc, p.flags, xs.data_ptr(), os.data_ptr(), ptr(ms), ws.data_ptr(),
                                        gy.data_ptr(), out(gx), out(goff), out(gm), out(gw), out(gb),
                                        stream_of(input.device())));
    record_scratch(1);
    std::vector<at::Tensor> grads;
    const std::optional<at::Tensor> *got[] = {&gx, &goff, &gw, &gb, &gm};
    const at::Tensor *own[] = {&input, &offset, &weight, bias ? &*bias : nullptr, mask ? &*mask : nullptr};
    for (int i = 0; i < 5; i++)
        if (*got[i]) grads.push_back(as_grad_of(**got[i], *own[i]));
    return grads;
}

// deftc::deform_conv2d's autograd formula (the Autograd key's kernel, so that a forward +
// backward pair runs no Python beyond the caller's): the forward redispatches below autograd to
// the CPU / CUDA kernel (or the fake one under torch.compile), the backward calls
// deftc::deform_conv2d_backward through the dispatcher. deftc_torch.py's _setup_context and
// _backward in C++ - the ctypes path registers those; the behaviour is the same:
//  - the gradients wanted are those of the inputs that required grad at the forward (Python's
//    ctx.needs_input_grad is fixed then too), bias and mask only when given;
//  - an undefined incoming gradient is materialized as zeros (set_materialize_grads' default);
//  - a double backward goes through deform_conv2d_backward, which has no autograd formula, as
//    Python's backward calling it does.
at::Tensor forward_below_autograd(const at::Tensor &input, const at::Tensor &offset, const at::Tensor &weight,
                                  const std::optional<at::Tensor> &bias, c10::SymIntArrayRef stride,
                                  c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                                  const std::optional<at::Tensor> &mask, c10::string_view mode, bool deterministic,
                                  std::optional<c10::string_view> precision) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("deftc::deform_conv2d", "")
                         .typed<at::Tensor(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                           const std::optional<at::Tensor> &, c10::SymIntArrayRef, c10::SymIntArrayRef,
                                           c10::SymIntArrayRef, const std::optional<at::Tensor> &, c10::string_view,
                                           bool, std::optional<c10::string_view>)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(input, offset, weight, bias, stride, padding, dilation, mask, mode, deterministic, precision);
}

class DeformConv2dAutograd : public torch::autograd::Function<DeformConv2dAutograd> {
  public:
    static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &input, const at::Tensor &offset,
                              const at::Tensor &weight, const std::optional<at::Tensor> &bias, c10::SymIntArrayRef stride,
                              c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                              const std::optional<at::Tensor> &mask, c10::string_view mode, bool deterministic,
                              std::optional<c10::string_view> precision) {
        at::Tensor y = forward_below_autograd(input, offset, weight, bias, stride, padding, dilation, mask, mode,
                                              deterministic, precision);
        at::Tensor none;  // an absent bias or mask is saved as an undefined tensor
        ctx->save_for_backward({input, offset, weight, bias.value_or(none), mask.value_or(none)});
        c10::List<bool> wanted({input.requires_grad(), offset.requires_grad(), weight.requires_grad(),
                                bias && bias->requires_grad(), mask && mask->requires_grad()});
        ctx->saved_data["wanted"] = wanted;
        ctx->saved_data["stride"] = stride;
        ctx->saved_data["padding"] = padding;
        ctx->saved_data["dilation"] = dilation;
        ctx->saved_data["mode"] = std::string(mode);
        ctx->saved_data["deterministic"] = deterministic;
        ctx->saved_data["precision"] = precision ? c10::IValue(std::string(*precision)) : c10::IValue();
        return y;
    }

    // One gradient for each of the op's 11 arguments (undefined for the options and for the
    // inputs that wanted none): input, offset, weight, bias, stride, padding, dilation, mask, ...
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("deftc::deform_conv2d_backward", "")
                             .typed<std::vector<at::Tensor>(
                                 const at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                 const std::optional<at::Tensor> &, c10::SymIntArrayRef, c10::SymIntArrayRef,
                                 c10::SymIntArrayRef, const std::optional<at::Tensor> &, c10::string_view, bool,
                                 std::optional<c10::string_view>, const c10::List<bool> &)>();
        torch::autograd::variable_list saved = ctx->get_saved_variables();
        auto given = [](const at::Tensor &t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
        const c10::IValue &precision = ctx->saved_data["precision"];
        c10::List<bool> wanted = ctx->saved_data["wanted"].toBoolList();
        // Without create_graph there is no graph to record: past the backward op's autograd
        // fallback (a boxed call that would only redispatch); with it, through the fallback, as
        // Python's backward calling the op goes.
        std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
        if (!at::GradMode::is_enabled()) below_autograd.emplace();
        std::vector<at::Tensor> got = op.call(
            grads[0], saved[0], saved[1], saved[2], given(saved[3]), ctx->saved_data["stride"].toSymIntVector(),
            ctx->saved_data["padding"].toSymIntVector(), ctx->saved_data["dilation"].toSymIntVector(),
            given(saved[4]), ctx->saved_data["mode"].toStringRef(), ctx->saved_data["deterministic"].toBool(),
            precision.isNone() ? std::nullopt : std::optional<c10::string_view>(precision.toStringRef()), wanted);
        torch::autograd::variable_list out(11);
        const int argument[] = {0, 1, 2, 3, 7};  // (input, offset, weight, bias, mask) among the op's arguments
        size_t next = 0;
        for (int i = 0; i < 5; i++)
            if (wanted[i]) out[argument[i]] = got[next++];
        return out;
    }
};

at::Tensor forward_autograd(const at::Tensor &input, const at::Tensor &offset, const at::Tensor &weight,
                            const std::optional<at::Tensor> &bias, c10::SymIntArrayRef stride,
                            c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                            const std::optional<at::Tensor> &mask, c10::string_view mode, bool deterministic,
                            std::optional<c10::string_view> precision) {
    bool recorded = at::GradMode::is_enabled() && (input.requires_grad() || offset.requires_grad() ||
                                                   weight.requires_grad() || (bias && bias->requires_grad()) ||
                                                   (mask && mask->requires_grad()));
    if (!recorded)  // no graph to record (no_grad, or no input requiring grad): the kernel alone, no node
        return forward_below_autograd(input, offset, weight, bias, stride, padding, dilation, mask, mode,
                                      deterministic, precision);
    return DeformConv2dAutograd::apply(input, offset, weight, bias, stride, padding, dilation, mask, mode,
                                       deterministic, precision);
}

}  // namespace

// The schemas and tag torch.library.custom_op gives deftc_torch.py's ctypes op (from its type
// hints), so that both paths are the same operator to every caller, TorchScript and export included.
TORCH_LIBRARY(deftc, m) {
    m.def("deform_conv2d(Tensor input, Tensor offset, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, "
          "SymInt[] dilation, Tensor? mask, str mode=\"deft\", bool deterministic=False, str? precision=None) -> Tensor",
          {at::Tag::pt2_compliant_tag});
    m.def("deform_conv2d_backward(Tensor grad, Tensor input, Tensor offset, Tensor weight, Tensor? bias, "
          "SymInt[] stride, SymInt[] padding, SymInt[] dilation, Tensor? mask, str mode, bool deterministic, "
          "str? precision, bool[] wanted) -> Tensor[]",
          {at::Tag::pt2_compliant_tag});
}

TORCH_LIBRARY_IMPL(deftc, CPU, m) {
    m.impl("deform_conv2d", &forward);
    m.impl("deform_conv2d_backward", &backward);
}

TORCH_LIBRARY_IMPL(deftc, CUDA, m) {
    m.impl("deform_conv2d", &forward);
    m.impl("deform_conv2d_backward", &backward);
}

TORCH_LIBRARY_IMPL(deftc, Autograd, m) { m.impl("deform_conv2d", &forward_autograd); }

// For the tests (ctypes on this .so): the data pointers the last forward (which = 0: 6 of them)
// or backward (which = 1: 10) handed to the C API, NULL for an absent tensor, into out[0..9], and
// the scratch blocks that call took from PyTorch's allocator into out[10].
extern "C" __attribute__((visibility("default"))) void deftc_torch_op_last_call(int which, uintptr_t *out) {
    std::lock_guard<std::mutex> lock(last_mutex);
    for (int i = 0; i < 11; i++) out[i] = last_call[which != 0][i];
}
