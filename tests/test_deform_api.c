/* The C API's argument checking (CPU; the numeric path is tested on the GPU against
 * torchvision by tests/api/test_deform_api.py). */
#include <string.h>

#include "dt_deform_api.h"
#include "dt_device.h"
#include "dt_test.h"

DT_TEST(deform_api_rejects_bad_descriptors) {
    /* f32 NCHW everywhere (every dtype / layout field 0) */
    dt_deform_desc d = {2, 6, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, (int)sizeof(dt_deform_desc), 0, 0, 0, 0, 0, 0, 0, 0};
    int ho, wo;
    EXPECT_EQ_INT(dt_deform_api_out_size(&d, &ho, &wo), 0);
    EXPECT_EQ_INT(ho, 9);
    EXPECT_EQ_INT(wo, 9);
    d.offset_groups = 4;
    EXPECT_EQ_INT(dt_deform_api_out_size(&d, &ho, &wo), -1);
    EXPECT_MSG(strstr(dt_deform_api_error(), "6 channels cannot be split into 4 offset groups"), "%s", dt_deform_api_error());
    d.offset_groups = 1;
    d.h = 1;
    d.pad_h = 0;
    EXPECT_EQ_INT(dt_deform_api_out_size(&d, &ho, &wo), -1);
    EXPECT_MSG(strstr(dt_deform_api_error(), "too small"), "%s", dt_deform_api_error());
    d.h = 9;
    d.pad_h = 1;
    EXPECT_EQ_INT(dt_deform_api_forward(&d, 7, NULL, NULL, NULL, NULL, NULL, NULL, NULL), -1);
    if (dt_gpu_count() > 0) EXPECT_MSG(strstr(dt_deform_api_error(), "unknown mode 7"), "%s", dt_deform_api_error());
    /* Without a GPU the call says so instead of crashing. */
    if (dt_gpu_count() == 0) {
        EXPECT_EQ_INT(dt_deform_api_forward(&d, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL), -1);
        EXPECT_MSG(strstr(dt_deform_api_error(), "CUDA"), "%s", dt_deform_api_error());
    }
}
