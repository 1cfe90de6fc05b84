#!/usr/bin/env python3
"""Writes ckpt_fuzz's seed corpus (worker/testdata/fuzz/ckpt/): real checkpoints of tiny models,
trained here by gantry-worker, packed as the fuzz target reads them (worker/ckpt_fuzz.c): the
step directory's files joined by the separator, manifest last when it is given verbatim.

    python3 hack/ckpt_fuzz_seeds.py build/worker/gantry-worker

Seeds: a Transformer (manifest computed by the target, and given verbatim), an n-gram model, the
Transformer's weights as the old single "params" tensor, and a resumed run's later checkpoint.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "..", "worker", "testdata", "fuzz", "ckpt")
SEP = b"\n--8<--\n"
FILES = ["state.json", "model.safetensors", "optimizer.safetensors", "config.json", "vocab.txt",
         "MANIFEST.sha256"]
WORDS = {"sports": "goal match team score league", "cooking": "oven flour sauce bake dough",
         "tech": "server kernel cache thread patch"}


def train(worker, tmp, name, model, steps):
    data = os.path.join(tmp, "train.jsonl")
    with open(data, "w") as f:
        for i in range(60):
            label = sorted(WORDS)[i % 3]
            words = WORDS[label].split()
            text = " ".join(words[(i + k) % 5] for k in range(3 + i % 4))
            f.write(json.dumps({"text": text, "label": label}) + "\n")
    cfg = {"training": {"model": model, "data": {"train": data, "minFreq": 1}, "maxSteps": steps,
                        "batchSize": 8, "threads": 1, "logInterval": 1000},
           "checkpoint": {"dir": os.path.join(tmp, name), "intervalSteps": 2, "keep": 2}}
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    subprocess.run([worker, "--config", path], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return os.path.join(tmp, name, "step-%d" % steps)


def read(step_dir, name):
    with open(os.path.join(step_dir, name), "rb") as f:
        return f.read()


def pack(files, manifest):
    sections = [files[n] for n in FILES[:5]] + ([files[FILES[5]]] if manifest else [])
    assert all(SEP not in s for s in sections), "a file holds the separator; change the model"
    return SEP.join(sections)


def flat_params(st):
    """The weights as one F32 "params" tensor, as checkpoints before 2026-12 held them."""
    hl = struct.unpack("<Q", st[:8])[0]
    data = st[8 + hl:]
    header = json.dumps({"params": {"dtype": "F32", "shape": [len(data) // 4],
                                    "data_offsets": [0, len(data)]}}).encode()
    return struct.pack("<Q", len(header)) + header + data


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    worker = sys.argv[1]
    tiny = {"hidden": 8, "heads": 2, "layers": 1, "ffn": 16, "maxSeqLen": 8}
    os.makedirs(SEEDS, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        seeds = {}
        tf = {n: read(train(worker, tmp, "tf", tiny, 4), n) for n in FILES}
        seeds["transformer"] = pack(tf, False)
        seeds["transformer-manifest"] = pack(tf, True)
        seeds["transformer-flat-params"] = pack(
            dict(tf, **{"model.safetensors": flat_params(tf["model.safetensors"])}), False)
        later = {n: read(train(worker, tmp, "tf", tiny, 6), n) for n in FILES}  # resumed
        seeds["transformer-resumed"] = pack(later, False)
        ng = {"type": "ngram", "hidden": 4, "buckets": 64, "maxSeqLen": 8}
        seeds["ngram"] = pack({n: read(train(worker, tmp, "ng", ng, 2), n) for n in FILES},
                              False)
    for name, blob in seeds.items():
        with open(os.path.join(SEEDS, name), "wb") as f:
            f.write(blob)
        print("%s: %d bytes" % (name, len(blob)))


if __name__ == "__main__":
    main()
