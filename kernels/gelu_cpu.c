#include "kernels/gelu.h"

#include <math.h>

/* sqrt(2/pi); GELU(x) ~= 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

void gelu_forward_cpu(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float t = tanhf(u);
        float sech2 = 1.0f - t * t;
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        dinp[i] += dout[i] * (0.5f * (1.0f + t) + 0.5f * x * sech2 * du);
    }
}
