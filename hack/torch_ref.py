#!/usr/bin/env python3
"""PyTorch reference for gantry-worker's Transformer classifier (worker/model.c).

Builds the same tiny model from the same seed (splitmix64 + Box-Muller, as model.c draws it), runs
one forward/backward on a fixed batch and 10 AdamW steps (warmup + cosine decay, weight decay on
matrices only, gradient clipping by global norm), and writes worker/testdata/model_ref.txt:
the config, the batch, logits, loss, every parameter gradient (in model.c's buffer order) and the
10 losses. worker/model_test.c reads that file, so CI needs no torch.

Usage: py=$(hack/pyenv.sh torch)/bin/python3; $py hack/torch_ref.py [--out PATH]
Also importable: bench/torch_model.py takes the parameter layout (tensor_table) from here.
"""
import argparse
import math

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


class Rng:
    """splitmix64 -> uniform (0,1] -> normal (Box-Muller, cos branch): model.c's init PRNG."""

    def __init__(self, seed):
        self.s = seed & MASK64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self):
        return ((self.next() >> 11) + 1.0) * (1.0 / 9007199254740992.0)

    def normal(self):
        u1, u2 = self.uniform(), self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


def tensor_table(cfg):
    """(name, shape, decay) in model.c's order (= buffer layout = init order)."""
    V, K, T, C, L, F_ = cfg["V"], cfg["K"], cfg["maxT"], cfg["C"], cfg["L"], cfg["F"]
    return [
        ("wte", (V, C), True), ("wpe", (T, C), True),
        ("ln1w", (L, C), False), ("ln1b", (L, C), False),
        ("qkvw", (L, 3 * C, C), True), ("qkvb", (L, 3 * C), False),
        ("attprojw", (L, C, C), True), ("attprojb", (L, C), False),
        ("ln2w", (L, C), False), ("ln2b", (L, C), False),
        ("fcw", (L, F_, C), True), ("fcb", (L, F_), False),
        ("fcprojw", (L, C, F_), True), ("fcprojb", (L, C), False),
        ("lnfw", (C,), False), ("lnfb", (C,), False),
        ("clsw", (K, C), True), ("clsb", (K,), False),
    ]


def build_model(cfg, seed):
    """Returns an ordered dict name -> leaf tensor (float32, requires_grad), drawn like model.c."""
    rng = Rng(seed)
    proj_std = 0.02 / math.sqrt(2.0 * cfg["L"])
    params = {}
    for name, shape, decay in tensor_table(cfg):
        n = math.prod(shape)
        if not decay:
            val = 1.0 if name.startswith("ln") and name.endswith("w") else 0.0
            t = torch.full(shape, val, dtype=torch.float32)
        else:
            std = proj_std if name in ("attprojw", "fcprojw") else 0.02
            t = torch.tensor([rng.normal() * std for _ in range(n)], dtype=torch.float64)
            t = t.to(torch.float32).reshape(shape)
        params[name] = t.requires_grad_(True)
    return params


def forward(p, cfg, tokens, lens, labels=None, smoothing=0.0, class_weight=None):
    """Logits (B,K) and the mean cross-entropy (when labels is given)."""
    B, T = tokens.shape
    C, NH, L = cfg["C"], cfg["NH"], cfg["L"]
    hs = C // NH
    key_ok = torch.arange(T)[None, :] < lens[:, None]  # (B,T): real tokens
    x = p["wte"][tokens] + p["wpe"][:T][None]
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~key_ok[:, None, None, :], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(h @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    if cfg.get("pool", "mean") == "cls":
        pooled = x[:, 0]
    else:
        w = key_ok.to(x.dtype)[:, :, None]
        pooled = (x * w).sum(1) / lens[:, None].to(x.dtype)
    logits = pooled @ p["clsw"].T + p["clsb"]
    if labels is None:
        return logits, None
    if class_weight is None:
        return logits, F.cross_entropy(logits, labels, label_smoothing=smoothing)
    # class weights as Keras' class_weight (model.c): each example's loss times its label's
    # weight, the mean over examples
    per = F.cross_entropy(logits, labels, label_smoothing=smoothing, reduction="none")
    loss = (per * class_weight[labels]).mean()
    return logits, loss


def lr_at(step, base, warmup, total, min_ratio, decay="cosine"):
    """model.c/optim.c's schedule: linear warmup over `warmup` steps, then cosine (or linear)
    decay from base to base*min_ratio at step `total`."""
    if step < warmup:
        return base * (step + 1) / warmup
    prog = min(1.0, (step - warmup) / max(1, total - warmup))
    lo = base * min_ratio
    if decay == "linear":
        return base + (lo - base) * prog
    return lo + (base - lo) * 0.5 * (1.0 + math.cos(math.pi * prog))


def fmt(vals):
    return " ".join("%.9g" % v for v in vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="worker/testdata/model_ref.txt")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    cfg = dict(V=20, K=3, maxT=6, C=8, L=2, NH=2, F=32, pool="mean")
    seed = 1234
    tokens = torch.tensor([[1, 5, 7, 2, 9, 3], [4, 4, 8, 0, 0, 0], [19, 0, 0, 0, 0, 0]])
    lens = torch.tensor([6, 3, 1])
    labels = torch.tensor([2, 0, 1])
    opt = dict(lr=1e-2, wd=0.1, beta1=0.9, beta2=0.999, eps=1e-8, clip=1.0, warmup=3, steps=10,
               min_ratio=0.1)

    p = build_model(cfg, seed)
    logits, loss = forward(p, cfg, tokens, lens, labels)
    loss.backward()
    grads = torch.cat([p[n].grad.reshape(-1) for n, _, _ in tensor_table(cfg)])

    # The same batch with label smoothing 0.1 (training.labelSmoothing).
    ps = build_model(cfg, seed)
    _, sloss = forward(ps, cfg, tokens, lens, labels, smoothing=0.1)
    sloss.backward()
    sgrads = torch.cat([ps[n].grad.reshape(-1) for n, _, _ in tensor_table(cfg)])

    # With class weights too (training.classWeight).
    cw = torch.tensor([0.5, 2.0, 1.25])
    pw = build_model(cfg, seed)
    _, wloss = forward(pw, cfg, tokens, lens, labels, smoothing=0.1, class_weight=cw)
    wloss.backward()
    wgrads = torch.cat([pw[n].grad.reshape(-1) for n, _, _ in tensor_table(cfg)])

    # 10 AdamW steps on the same batch (decay on matrices/embeddings only, like model.c).
    q = build_model(cfg, seed)
    decay = [q[n] for n, _, d in tensor_table(cfg) if d]
    nodecay = [q[n] for n, _, d in tensor_table(cfg) if not d]
    adam = torch.optim.AdamW([{"params": decay, "weight_decay": opt["wd"]},
                              {"params": nodecay, "weight_decay": 0.0}],
                             lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    losses = []
    for step in range(opt["steps"]):
        adam.zero_grad()
        _, l = forward(q, cfg, tokens, lens, labels)
        l.backward()
        torch.nn.utils.clip_grad_norm_(list(q.values()), opt["clip"])
        for g in adam.param_groups:
            g["lr"] = lr_at(step, opt["lr"], opt["warmup"], opt["steps"], opt["min_ratio"])
        adam.step()
        losses.append(l.item())

    with open(args.out, "w") as f:
        f.write("# Written by hack/torch_ref.py (torch %s); read by worker/model_test.c.\n"
                % torch.__version__)
        f.write("config %d %d %d %d %d %d %d %s %d\n" % (cfg["V"], cfg["K"], cfg["maxT"], cfg["C"],
                cfg["L"], cfg["NH"], cfg["F"], cfg["pool"], seed))
        f.write("batch %d %d\n" % tuple(tokens.shape))
        f.write("tokens %s\n" % fmt(tokens.reshape(-1).tolist()))
        f.write("len %s\n" % fmt(lens.tolist()))
        f.write("labels %s\n" % fmt(labels.tolist()))
        f.write("logits %d %s\n" % (logits.numel(), fmt(logits.reshape(-1).tolist())))
        f.write("loss %.9g\n" % loss.item())
        f.write("grads %d %s\n" % (grads.numel(), fmt(grads.tolist())))
        f.write("adamw %g %g %g %g %g %g %d %d %g\n" % (opt["lr"], opt["wd"], opt["beta1"],
                opt["beta2"], opt["eps"], opt["clip"], opt["warmup"], opt["steps"],
                opt["min_ratio"]))
        f.write("losses %d %s\n" % (len(losses), fmt(losses)))
        f.write("smoothing 0.1\n")
        f.write("smoothed_loss %.9g\n" % sloss.item())
        f.write("smoothed_grads %d %s\n" % (sgrads.numel(), fmt(sgrads.tolist())))
        f.write("class_weight %s\n" % fmt(cw.tolist()))
        f.write("weighted_loss %.9g\n" % wloss.item())
        f.write("weighted_grads %d %s\n" % (wgrads.numel(), fmt(wgrads.tolist())))
    print("wrote %s: loss %.6f, %d gradients, step-10 loss %.6f"
          % (args.out, loss.item(), grads.numel(), losses[-1]))


if __name__ == "__main__":
    main()
