"""The PyTorch side of the training benchmarks, shared by bench/cpu_train_torch.py (CPU, vs
bench/cpu_train.c) and bench/gpu_torch.py (GPU, vs bench/gpu_bench.cu): gantry's Transformer
classifier (the network hack/torch_ref.py checks against worker/model.c, parameters laid out by its
tensor_table), a timing init, and AdamW with weight decay on matrices only, as gantry's optimizer.

Attention uses F.scaled_dot_product_attention with the key padding mask (PyTorch's fastest path)
rather than the explicit softmax of the reference; both compute the same function.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hack"))
import torch_ref  # noqa: E402


def config(a):
    """torch_ref's cfg from parsed benchmark flags (vocab, classes, seq, hidden, layers, heads)."""
    return dict(V=a.vocab, K=a.classes, maxT=a.seq, C=a.hidden, L=a.layers, NH=a.heads,
                F=4 * a.hidden)


def init_params(cfg, g, device=None):
    """name -> leaf tensor (requires_grad) on device: N(0, 0.02) matrices drawn from generator g
    in tensor_table order, zero biases, unit LayerNorm weights. Enough for timing; torch_ref's
    build_model (model.c's exact draws) would draw millions of normals in Python."""
    p = {}
    for name, shape, decay in torch_ref.tensor_table(cfg):
        t = torch.randn(shape, generator=g) * 0.02 if decay else torch.zeros(shape)
        if name.startswith("ln") and name.endswith("w"):
            t = torch.ones(shape)
        if device is not None:
            t = t.to(device)
        p[name] = t.requires_grad_(True)
    return p


def adamw(p, cfg, **kw):
    """torch.optim.AdamW over p, lr 3e-4, weight decay 0.01 on matrices and 0 on biases and norms
    (gantry's default); kw goes to AdamW (e.g. fused=True)."""
    table = torch_ref.tensor_table(cfg)
    return torch.optim.AdamW([{"params": [p[n] for n, _, d in table if d], "weight_decay": 0.01},
                              {"params": [p[n] for n, _, d in table if not d],
                               "weight_decay": 0.0}], lr=3e-4, **kw)


def forward(p, cfg, tokens, key_ok, lens, labels):
    """Mean cross-entropy of the classifier on tokens (B, T), key_ok (B, T) bool, lens (B),
    labels (B): mean pooling over the real tokens."""
    B, T = tokens.shape
    C, NH, L = cfg["C"], cfg["NH"], cfg["L"]
    hs = C // NH
    mask = key_ok[:, None, None, :]
    x = p["wte"][tokens] + p["wpe"][:T][None]
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = F.linear(h, p["qkvw"][l], p["qkvb"][l])
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + F.linear(y.transpose(1, 2).reshape(B, T, C), p["attprojw"][l], p["attprojb"][l])
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        x = x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    w = key_ok.to(x.dtype)[:, :, None]
    logits = F.linear((x * w).sum(1) / lens[:, None].to(x.dtype), p["clsw"], p["clsb"])
    return F.cross_entropy(logits, labels)
