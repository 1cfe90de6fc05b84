/*
 * cuda_bf16.h (gantry CUDA emulator) - __nv_bfloat16 on the CPU: 16 bits of storage, conversions
 * that round like the hardware's cvt.rn.bf16.f32 (to nearest, ties to even; every NaN becomes the
 * canonical 0x7FFF), and bf16 -> fp32 exactly. Only what Gantry's kernels use.
 */
#ifndef GANTRY_EMU_CUDA_BF16_H
#define GANTRY_EMU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

static inline unsigned short emu_f32_to_bf16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

static inline float emu_bf16_to_f32(unsigned short h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(emu_f32_to_bf16_rn(f)) {}
    __nv_bfloat16(double f) : __x(emu_f32_to_bf16_rn((float)f)) {}
    operator float() const { return emu_bf16_to_f32(__x); }
};
typedef __nv_bfloat16 nv_bfloat16;

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    __nv_bfloat16 h;
    h.__x = emu_f32_to_bf16_rn(f);
    return h;
}
static inline __nv_bfloat16 __float2bfloat16(float f)
{
    return __float2bfloat16_rn(f);
}
static inline float __bfloat162float(__nv_bfloat16 h)
{
    return emu_bf16_to_f32(h.__x);
}

#endif /* GANTRY_EMU_CUDA_BF16_H */
