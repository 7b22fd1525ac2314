#pragma once
#include "emu_bf16.h"
static inline float dt_ld(const float *p) { return *p; }
static inline float dt_ld(const __nv_bfloat16 *p) { return bf2f(p->u); }
static inline void dt_st(float *p, float v) { *p = v; }
static inline void dt_st(__nv_bfloat16 *p, float v) { p->u = f2bf(v); }
