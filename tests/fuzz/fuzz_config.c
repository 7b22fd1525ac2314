/* libFuzzer target: the config parser (dt_config_parse, then the cross-key checks) on any
 * bytes, and the same bytes as one command-line override. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dt_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_train_cfg c;
    dt_err err;
    dt_config_defaults(&c);
    if (dt_config_parse(&c, (const char *)data, size, "fuzz.cfg", &err) == 0) dt_config_check(&c, &err);
    /* An override is a C string: cut at the first NUL, as argv would be. */
    char *arg = malloc(size + 1);
    memcpy(arg, data, size);
    arg[size] = 0;
    dt_config_defaults(&c);
    dt_config_set(&c, arg, &err);
    free(arg);
    return 0;
}
