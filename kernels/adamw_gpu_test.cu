// AdamW, the gradient norm and clipping on the GPU against worker/optim.c (adamw_step,
// optim_grad_norm, optim_clip_grad_norm), over a parameter buffer cut into tensors with and
// without weight decay, for several steps; the bf16 copy of the parameters is checked too.
#include <string.h>

#include "kernels/gpu_testutil.h"
extern "C" { /* worker/optim.h is a C header without C++ guards */
#include "worker/optim.h"
}

int main(void)
{
    struct model m;
    struct adamw o;
    struct optim_config cfg;
    struct adamw_segment segs[4];
    const size_t counts[4] = {1000, 37, 70000, 5}; /* matrix, bias, big matrix, norm */
    size_t n = 0;
    uint64_t s = 3;

    gt_require_device("adamw_gpu_test");
    memset(&m, 0, sizeof(m));
    optim_config_default(&cfg);
    cfg.weight_decay = 0.1f;
    m.n_tensors = 4;
    for (int i = 0; i < 4; i++) {
        snprintf(m.tensors[i].name, sizeof(m.tensors[i].name), "t%d", i);
        m.tensors[i].offset = segs[i].offset = n;
        m.tensors[i].count = segs[i].count = counts[i];
        segs[i].decay = i % 2 == 0;
        m.tensors[i].decay = segs[i].decay != 0;
        n += counts[i];
    }
    m.n_params = n;
    m.params = gt_randv(n, &s, -1, 1);
    adamw_init(&o, n);
    float *d_p = GT_UPF(m.params, n), *d_m = GT_UPF(o.m, n), *d_v = GT_UPF(o.v, n), *d_g;
    float *d_norm, *d_coef;
    uint16_t *d_p16;
    CUDA_CHECK(cudaMalloc(&d_g, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_p16, n * 2));
    CUDA_CHECK(cudaMalloc(&d_norm, sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_coef, sizeof(float)));

    for (int step = 0; step < 5; step++) {
        /* large gradients on odd steps, so clipping acts on some steps and not on others */
        float span = step % 2 ? 0.1f : 0.001f;
        free(m.grads);
        m.grads = gt_randv(n, &s, -span, span);
        CUDA_CHECK(cudaMemcpy(d_g, m.grads, n * sizeof(float), cudaMemcpyHostToDevice));
        float lr = 1e-2f / (float)(step + 1);
        float norm = optim_clip_grad_norm(m.grads, n, cfg.grad_clip);
        grad_norm(d_norm, d_g, n, 0);
        grad_clip_coef(d_coef, d_norm, cfg.grad_clip, 1.0f, 0);
        gt_compare("grad_norm", d_norm, &norm, 1, 0, 1e-6);
        adamw_step(&o, &m, &cfg, lr);
        adamw_update(d_p, d_p16, d_g, d_m, d_v, segs, 4, lr, cfg.beta1, cfg.beta2, cfg.eps,
                     cfg.weight_decay, o.t, d_coef, 0);
        printf("step %d (lr %g, grad norm %g)\n", step + 1, (double)lr, (double)norm);
        gt_compare("adamw params", d_p, m.params, n, 1e-6, 1e-5);
        gt_compare("adamw m", d_m, o.m, n, 1e-9, 1e-5);
        gt_compare("adamw v", d_v, o.v, n, 1e-12, 1e-5);
    }
    float *p32;
    CUDA_CHECK(cudaMalloc(&p32, n * sizeof(float)));
    cast_bf16_to_f32(p32, d_p16, n, 0);
    gt_compare("adamw params_bf16", p32, m.params, n, 1e-6, 1.0 / 256);
    cudaFree(p32), cudaFree(d_p), cudaFree(d_m), cudaFree(d_v), cudaFree(d_g), cudaFree(d_p16);
    cudaFree(d_norm), cudaFree(d_coef);
    adamw_cleanup(&o);
    free(m.params);
    free(m.grads);
    return gt_summary("adamw_gpu_test");
}
