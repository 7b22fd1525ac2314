/* libFuzzer target: the checkpoint parser (dt_checkpoint_parse) on any bytes. The checksum
 * guards the contents, so the input's checksum field is recomputed first half of the time:
 * otherwise nearly every input would stop at the checksum, never reaching the parser of the
 * contents that a crafted file (with a valid checksum) reaches. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dt_checkpoint.h"

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* Where the values read go, so that the reads are not optimized away. */
static volatile float g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *file = malloc(size ? size : 1);
    memcpy(file, data, size);
    if (size > 28 && (data[size - 1] & 1)) { /* magic(8) version(4) length(8) checksum(8) */
        uint64_t sum = fnv1a(file + 28, size - 28);
        memcpy(file + 20, &sum, 8);
    }
    dt_checkpoint ck;
    dt_err err;
    if (dt_checkpoint_parse(file, size, "fuzz.ckpt", &ck, &err) == 0) {
        /* every tensor is read whole: ASan checks it lies inside the file */
        for (int i = 0; i < ck.n; i++) {
            int64_t n = dt_numel(ck.ndim[i], ck.shape[i]);
            for (int64_t k = 0; k < n; k++) {
                float v;
                memcpy(&v, (const char *)ck.data[i] + 4 * k, 4);
                g_sink += v;
            }
            dt_checkpoint_find(&ck, ck.names[i]);
        }
        dt_checkpoint_free(&ck);
    }
    return 0;
}
