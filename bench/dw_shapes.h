/* dw_shapes.h: MobileNetV2's depthwise 3x3 convolutions at a 224 input (pad 1), each distinct
 * (channels, spatial size, stride) of its inverted residual blocks once - the 2-D shapes that
 * build/bench --what depthwise and the depthwise lab (bench/lab/depthwise_lab.cu) both time, so
 * that their rows are the same problems. The label is also the key bench/torch_depthwise.py
 * writes cuDNN's times under. */
#ifndef DT_BENCH_DW_SHAPES_H
#define DT_BENCH_DW_SHAPES_H

typedef struct {
    const char *name; /* "112 C 32 s1": input H = W, channels, stride */
    int c, h, s;
} dt_dw_mbv2_shape;

static const dt_dw_mbv2_shape dt_dw_mbv2_shapes[] = {
    {"112 C 32 s1", 32, 112, 1}, {"112 C 96 s2", 96, 112, 2}, {"56 C 144 s1", 144, 56, 1},
    {"56 C 144 s2", 144, 56, 2}, {"28 C 192 s1", 192, 28, 1}, {"28 C 192 s2", 192, 28, 2},
    {"14 C 384 s1", 384, 14, 1}, {"14 C 576 s1", 576, 14, 1}, {"14 C 576 s2", 576, 14, 2},
    {"7 C 960 s1", 960, 7, 1}};
#define DT_DW_MBV2_SHAPES ((int)(sizeof dt_dw_mbv2_shapes / sizeof dt_dw_mbv2_shapes[0]))

#endif
