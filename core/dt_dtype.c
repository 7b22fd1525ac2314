#include "core/dt_dtype.h"

static const char *const g_dtype_names[DT_NUM_DTYPES] = {"f32", "bf16", "f16", "i32", "u8"};
static const size_t g_dtype_sizes[DT_NUM_DTYPES] = {4, 2, 2, 4, 1};
static const char *const g_layout_names[DT_NUM_LAYOUTS] = {"nchw", "nhwc"};
static const char *const g_precision_names[] = {"fp32", "tf32", "bf16"};

size_t dt_dtype_size(dt_dtype t) { return (unsigned)t < DT_NUM_DTYPES ? g_dtype_sizes[t] : 0; }
const char *dt_dtype_name(dt_dtype t) { return (unsigned)t < DT_NUM_DTYPES ? g_dtype_names[t] : "?"; }
int dt_dtype_is_int(dt_dtype t) { return t == DT_I32 || t == DT_U8; }
const char *dt_layout_name(dt_layout l) { return (unsigned)l < DT_NUM_LAYOUTS ? g_layout_names[l] : "?"; }
const char *dt_precision_name(dt_precision p) { return (unsigned)p <= DT_PREC_BF16 ? g_precision_names[p] : "?"; }

static int parse(const char *s, const char *const *names, int n, int *out) {
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
    return -1;
}

int dt_dtype_parse(const char *s, dt_dtype *out) {
    int i;
    if (parse(s, g_dtype_names, DT_NUM_DTYPES, &i)) return -1;
    *out = (dt_dtype)i;
    return 0;
}

int dt_layout_parse(const char *s, dt_layout *out) {
    int i;
    if (parse(s, g_layout_names, DT_NUM_LAYOUTS, &i)) return -1;
    *out = (dt_layout)i;
    return 0;
}

int dt_precision_parse(const char *s, dt_precision *p) {
    int i;
    if (parse(s, g_precision_names, 3, &i)) return -1;
    *p = (dt_precision)i;
    return 0;
}

dt_dtype dt_precision_act_dtype(dt_precision p) { return p == DT_PREC_BF16 ? DT_BF16 : DT_F32; }
dt_math dt_precision_math(dt_precision p) { return p == DT_PREC_TF32 ? DT_MATH_TF32 : DT_MATH_FP32; }
dt_layout dt_precision_layout(dt_precision p) { return p == DT_PREC_BF16 ? DT_NHWC : DT_NCHW; }
