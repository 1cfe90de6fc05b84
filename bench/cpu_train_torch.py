#!/usr/bin/env python3
"""PyTorch side of bench/cpu_train.sh: the same Transformer classifier as gantry's CPU path
(built by hack/torch_ref.py's build_model, the network the golden test checks), on the same
batch (the same token ids and lengths as bench/cpu_train.c), timed per optimizer step (forward,
backward, clip_grad_norm_, AdamW).

Attention uses F.scaled_dot_product_attention with the key padding mask (PyTorch's fastest CPU
path) rather than the explicit softmax of the reference; both compute the same function.
Prints one JSON line like bench/cpu_train.c.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hack"))
import torch_ref  # noqa: E402


def forward(p, cfg, tokens, key_ok, lens, labels):
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, val in (("batch", 32), ("seq", 256), ("hidden", 128), ("layers", 2), ("heads", 4),
                      ("vocab", 20000), ("classes", 2), ("steps", 20), ("warmup", 3),
                      ("threads", 0)):
        ap.add_argument("--" + name, type=int, default=val)
    ap.add_argument("--varlen", action="store_true", help="lengths uniform in [T/4, T]")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    cfg = dict(V=a.vocab, K=a.classes, maxT=a.seq, C=a.hidden, L=a.layers, NH=a.heads,
               F=4 * a.hidden)
    g = torch.Generator().manual_seed(1)
    B, T = a.batch, a.seq
    # The batch bench/cpu_train.c builds, number for number (its 64-bit LCG): the same lengths,
    # so with --varlen both sides get the same padding.
    s, mask = 1, (1 << 64) - 1
    lens_l, tok_l = [], []
    for b in range(B):
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        n = T // 4 + (s >> 33) % (T - T // 4 + 1) if a.varlen else T
        lens_l.append(n)
        for t in range(T):
            s = (s * 6364136223846793005 + 1442695040888963407) & mask
            tok_l.append(5 + (s >> 33) % (a.vocab - 5) if t < n else 0)
    lens = torch.tensor(lens_l)
    tokens = torch.tensor(tok_l).view(B, T)
    key_ok = torch.arange(T)[None, :] < lens[:, None]
    labels = torch.arange(B) % a.classes

    # Small random init is enough for timing; build_model would draw 3M normals in Python.
    p = {}
    for name, shape, decay in torch_ref.tensor_table(cfg):
        t = torch.randn(shape, generator=g) * 0.02 if decay else torch.zeros(shape)
        if name.startswith("ln") and name.endswith("w"):
            t = torch.ones(shape)
        p[name] = t.requires_grad_(True)
    decay = [p[n] for n, _, d in torch_ref.tensor_table(cfg) if d]
    nodecay = [p[n] for n, _, d in torch_ref.tensor_table(cfg) if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": nodecay, "weight_decay": 0.0}], lr=3e-4)
    params = list(p.values())
    t0 = 0.0
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = forward(p, cfg, tokens, key_ok, lens, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    dt = time.perf_counter() - t0
    ntok = int(lens.sum())
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "batch": B, "seq": T,
                      "hidden": a.hidden, "layers": a.layers, "heads": a.heads,
                      "threads": torch.get_num_threads(), "steps": a.steps,
                      "samples_per_s": round(B * a.steps / dt, 2),
                      "tokens_per_s": round(ntok * a.steps / dt),
                      "ms_per_step": round(1e3 * dt / a.steps, 2),
                      "final_loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
