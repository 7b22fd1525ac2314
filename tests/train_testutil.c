/* The tests' small training run (train_testutil.h). */
#include "tests/train_testutil.h"

#include <stdio.h>
#include <string.h>

void dt_test_run_cfg(dt_train_cfg *c, const char *data, int image_size, float width, int batch) {
    dt_config_defaults(c);
    if (data) snprintf(c->data, sizeof c->data, "%s", data);
    else c->synthetic = 1;
    strcpy(c->device, "cpu");
    c->image_size = image_size;
    c->width = width;
    c->batch = batch;
    c->progress = 0;
}
