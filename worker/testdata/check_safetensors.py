"""Checks Gantry's safetensors files with the reference reader (the `safetensors` package).

Usage: check_safetensors.py STEP_DIR OUT_FILE
  - loads STEP_DIR/model.safetensors and optimizer.safetensors (written by `ckpt_tool write`)
    and checks names, dtypes, shapes and values of the fixture;
  - writes OUT_FILE with the reference writer, for `ckpt_tool check` to read back.
Exit 0 when everything matches.
"""
import json
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file


def main() -> int:
    step_dir, out = sys.argv[1], sys.argv[2]
    w = load_file(f"{step_dir}/model.safetensors")
    o = load_file(f"{step_dir}/optimizer.safetensors")
    assert set(w) == {"embed.weight", "head.bias", "step_count"}, sorted(w)
    assert w["embed.weight"].dtype == torch.float32 and tuple(w["embed.weight"].shape) == (4, 3)
    assert torch.equal(w["embed.weight"].flatten(), torch.arange(12, dtype=torch.float32) * 0.25)
    assert w["head.bias"].dtype == torch.bfloat16
    assert w["head.bias"].float().tolist() == [1.0, -2.0, 0.5]
    assert w["step_count"].dtype == torch.int64 and w["step_count"].tolist() == [7]
    assert torch.equal(o["embed.weight.m"].flatten(), -torch.arange(12, dtype=torch.float32))
    with safe_open(f"{step_dir}/model.safetensors", framework="pt") as f:
        assert f.metadata().get("producer") == "gantry", f.metadata()
    state = json.load(open(f"{step_dir}/state.json"))
    assert state["step"] == 7 and state["sampler"]["consumed"] == 96, state
    save_file(
        {
            "x": torch.arange(6, dtype=torch.float32).reshape(2, 3),
            "y": torch.arange(10, 14, dtype=torch.int64),
            "z": torch.tensor([1.5, -3.0], dtype=torch.bfloat16),
        },
        out,
    )
    print(f"{step_dir}: the safetensors package reads it; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
