/* train_testutil.h: the small CPU training run the tests start from, one definition for the
 * training, config, weights, data-parallel and data tests; each sets what its test is about on
 * top (steps, learning rate, deformable stages, log, ...). */
#ifndef DT_TRAIN_TESTUTIL_H
#define DT_TRAIN_TESTUTIL_H

#include "train/dt_config.h"

/* The defaults, then: the dataset at `data` (NULL: synthetic images), the CPU, images of
 * image_size px, a ResNet-18 of that width, that batch, no progress line. */
void dt_test_run_cfg(dt_train_cfg *c, const char *data, int image_size, float width, int batch);

#endif
