#!/usr/bin/env python3
"""PyTorch side of bench/cpu_train.sh: the same Transformer classifier as gantry's CPU path
(bench/torch_model.py: the network hack/torch_ref.py checks against worker/model.c), on the same
batch (the same token ids and lengths as bench/cpu_train.c), timed per optimizer step (forward,
backward, clip_grad_norm_, AdamW). Prints one JSON line like bench/cpu_train.c.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


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
    cfg = torch_model.config(a)
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

    p = torch_model.init_params(cfg, g)
    opt = torch_model.adamw(p, cfg)
    params = list(p.values())
    t0 = 0.0
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = torch_model.forward(p, cfg, tokens, key_ok, lens, labels)
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
