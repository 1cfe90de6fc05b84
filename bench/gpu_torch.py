#!/usr/bin/env python3
"""PyTorch peer of bench/gpu_bench: the same Transformer classifier as bench/cpu_train_torch.py
(bench/torch_model.py, the network hack/torch_ref.py checks against gantry's CPU path) trained on
the same GPU, in eager mode and under torch.compile, fp32 and bf16 autocast, one optimizer step =
zero_grad, forward, backward, clip_grad_norm_(1.0), fused AdamW. compile-graphs-bf16 is
torch.compile(mode="reduce-overhead"): the compiled forward and backward replayed as CUDA graphs,
the peer of gpu_bench --graphs. Prints one JSON line per variant
with tokens/s and MFU computed exactly as gpu_bench computes them (3 x forward FLOPs, the full
T x T attention). The MFU's denominator is --peak-tflops, else $GANTRY_PEAK_TFLOPS: the device's
dense bf16 peak as `gpu_bench --peak` prints it (989.4 on an H100 SXM or H200, 756 on an H100
PCIe); hack/gpu-check.sh passes it, so both sides divide by the same number. Without either,
"mfu" is null.

  GANTRY_PEAK_TFLOPS=$(build/gpu_bench --peak | cut -d' ' -f1) python3 bench/gpu_torch.py \
      --preset gpt2 [--variants eager-fp32,eager-bf16,compile-bf16,compile-graphs-bf16]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402

PRESETS = {
    "gpt2": dict(batch=8, seq=1024, hidden=768, layers=12, heads=12, vocab=50257, classes=2,
                 steps=20, warmup=3),
    "example": dict(batch=32, seq=256, hidden=128, layers=2, heads=4, vocab=20000, classes=2,
                    steps=50, warmup=5),
}


def fwd_flops(B, T, C, L, K):
    N, F = B * T, 4 * C
    return L * (2 * N * C * 3 * C + 2 * N * C * C + 4 * N * C * F + 4 * B * T * T * C) + 2 * B * C * K


def run(a, variant):
    dev = torch.device("cuda")
    cfg = torch_model.config(a)
    g = torch.Generator().manual_seed(1)
    B, T = a.batch, a.seq
    lens = (torch.randint(T // 4, T + 1, (B,), generator=g) if a.varlen
            else torch.full((B,), T))
    tokens = torch.randint(5, a.vocab, (B, T), generator=g)
    key_ok = torch.arange(T)[None, :] < lens[:, None]
    tokens = tokens.masked_fill(~key_ok, 0)
    labels = torch.arange(B) % a.classes
    tokens, key_ok, lens, labels = (t.to(dev) for t in (tokens, key_ok, lens, labels))
    p = torch_model.init_params(cfg, g, dev)
    opt = torch_model.adamw(p, cfg, fused=True)
    params = list(p.values())
    # Gradients exist before the first backward, so autograd adds into them. Left None, it would
    # take the backward's output as .grad, and under CUDA graphs (reduce-overhead) the next replay
    # overwrites that memory ("accessing tensor output of CUDAGraphs that has been overwritten").
    for t in params:
        t.grad = torch.zeros_like(t)
    bf16 = variant.endswith("bf16")
    fwd = torch_model.forward
    graphs = variant.startswith("compile-graphs")
    if variant.startswith("compile"):
        fwd = torch.compile(fwd, mode="reduce-overhead" if graphs else "default")

    def step():
        if graphs:  # a new iteration: the last replay's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = fwd(p, cfg, tokens, key_ok, lens, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(a.steps):
        loss = step()
    e1.record()
    torch.cuda.synchronize()
    sec = e0.elapsed_time(e1) / 1e3 / a.steps
    flops = 3 * fwd_flops(B, T, a.hidden, a.layers, a.classes)
    return {"impl": "pytorch-" + variant, "preset": a.preset, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(), "batch": B, "seq": T, "hidden": a.hidden,
            "layers": a.layers, "heads": a.heads, "steps": a.steps,
            "ms_per_step": round(sec * 1e3, 3), "tokens_per_s": round(B * T / sec),
            "real_tokens_per_s": round(int(lens.sum()) / sec),
            "tflops": round(flops / sec / 1e12, 2), "peak_tflops": a.peak_tflops,
            "mfu": round(flops / sec / (a.peak_tflops * 1e12), 4) if a.peak_tflops else None,
            "final_loss": round(loss.item(), 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="example")
    for name in PRESETS["example"]:
        ap.add_argument("--" + name, type=int, default=None)
    ap.add_argument("--varlen", action="store_true")
    ap.add_argument("--variants", default="eager-fp32,eager-bf16,compile-bf16,compile-graphs-bf16")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="dense bf16 peak of the GPU, the MFU denominator "
                         "(default: $GANTRY_PEAK_TFLOPS; neither: no MFU)")
    a = ap.parse_args()
    if a.peak_tflops is None and os.environ.get("GANTRY_PEAK_TFLOPS"):
        try:
            a.peak_tflops = float(os.environ["GANTRY_PEAK_TFLOPS"])
        except ValueError:
            ap.error("GANTRY_PEAK_TFLOPS=%r is not a number" % os.environ["GANTRY_PEAK_TFLOPS"])
    if a.peak_tflops is not None and not a.peak_tflops > 0:
        ap.error("the peak must be a positive number of TFLOP/s, got %r" % a.peak_tflops)
    if a.peak_tflops is None:
        print("gpu_torch: no --peak-tflops or GANTRY_PEAK_TFLOPS: MFU left out "
              "(`gpu_bench --peak` prints the device's)", file=sys.stderr)
    for k, v in PRESETS[a.preset].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if not torch.cuda.is_available():
        print(json.dumps({"impl": "pytorch", "skipped": "no CUDA device"}))
        return 0
    rc = 0
    for v in a.variants.split(","):
        t0 = time.time()
        try:
            r = run(a, v)
        except Exception as e:  # one variant failing (e.g. the compiler) must not hide the rest
            r, rc = {"impl": "pytorch-" + v, "preset": a.preset, "error": repr(e)[:500]}, 1
        r["wall_s"] = round(time.time() - t0, 1)
        print(json.dumps(r), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
