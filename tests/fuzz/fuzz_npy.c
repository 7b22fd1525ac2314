/* libFuzzer target: the .npy parser (dt_npy_parse) on any bytes. */
#include <stdint.h>

#include "core/dt_npy.h"

/* Where the values read go, so that the reads are not optimized away. */
static volatile float g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_err err;
    dt_tensor *t = dt_npy_parse(data, size, "fuzz.npy", DT_CPU, &err);
    if (t) {
        /* every element is read: ASan checks the tensor holds what its shape says */
        for (int64_t i = 0; i < t->numel; i++) g_sink += dt_data_f32(t)[i];
        dt_tensor_free(t);
    }
    return 0;
}
