#!/usr/bin/env python3
"""Reads what gantry-worker's observability code wrote, with the upstream Python readers.

    obs_check.py --events DIR [--serve] --metrics URL --progress URL

--events: reads the TensorBoard event files in DIR with TensorBoard's own EventAccumulator (and
re-checks every record's masked CRC32C with TensorBoard's pure-Python crc32c), and expects the
scenario written by worker/obs_py_test.c:
  run 1: train/loss = 1/step and train/lr = 0.001*step at steps 1..10, eval/accuracy at 5 and 10;
  run 2 (resumed at step 6): SessionLog START at 6, then train/loss = 100+step at steps 6..12.
  TensorBoard must drop run 1's points at steps >= 6, so train/loss is 1..5 from run 1 and 6..12
  from run 2, train/lr is 1..5, eval/accuracy is [5].
--serve: also starts `tensorboard --logdir DIR` (its default fast loader, the Rust data server)
on a free loopback port and reads the same train/loss series back over its HTTP API.
--metrics: parses the Prometheus text with prometheus_client's parser and checks the values
obs_py_test.c recorded. --progress: parses the JSON and checks the same values.
Run through hack/pyenv.sh's venv (pins in hack/requirements.txt). Exit 0 when every check holds.
"""
import argparse
import glob
import json
import math
import os
import re
import selectors
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL", what, file=sys.stderr)


def check_records(path):
    """Walks the TFRecord framing and verifies both CRCs of every record; returns the count."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    data = open(path, "rb").read()
    off, n = 0, 0
    while off < len(data):
        header = data[off:off + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[off + 8:off + 12])
        body = data[off + 12:off + 12 + length]
        (bcrc,) = struct.unpack("<I", data[off + 12 + length:off + 16 + length])
        check(hcrc == masked_crc32c(header), f"{path}: record {n} header crc")
        check(bcrc == masked_crc32c(body), f"{path}: record {n} data crc")
        off += 16 + length
        n += 1
    check(off == len(data), f"{path}: trailing bytes")
    return n


def check_events(logdir):
    from tensorboard.backend.event_processing import event_accumulator

    files = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
    check(len(files) == 2, f"two event files in {logdir}, found {files}")
    records = [check_records(f) for f in files]
    # run 1: version + 10 loss + 10 lr + 2 accuracy; run 2: version + START + 7 loss
    check(records == [23, 9], f"records per file {records} == [23, 9]")

    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    check(tags == {"train/loss", "train/lr", "eval/accuracy"}, f"scalar tags {sorted(tags)}")

    def series(tag):
        return [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] if tag in tags else []

    loss = series("train/loss")
    check([s for s, _, _ in loss] == expected_loss_steps(), f"train/loss steps {[s for s, _, _ in loss]}")
    for step, value, wall in loss:
        want = 1.0 / step if step < 6 else 100.0 + step
        check(math.isclose(value, want, rel_tol=1e-6), f"train/loss at {step}: {value} != {want}")
        check(wall > 1.7e9, f"train/loss at {step}: wall_time {wall} is a Unix time")
    lr = series("train/lr")
    check([s for s, _, _ in lr] == [1, 2, 3, 4, 5], f"train/lr steps {[s for s, _, _ in lr]}")
    check(all(math.isclose(v, 0.001 * s, rel_tol=1e-6) for s, v, _ in lr), "train/lr values")
    accuracy = series("eval/accuracy")
    check([(s, round(v, 6)) for s, v, _ in accuracy] == [(5, 0.5)], f"eval/accuracy {accuracy}")
    print(f"events: {len(files)} files, {sum(records)} records, tags {sorted(tags)}, "
          f"train/loss steps 1..{loss[-1][0] if loss else '?'}")


def expected_loss_steps():
    return list(range(1, 13))


def check_served(logdir):
    """`tensorboard --logdir` as a user runs it: the scalars plugin must serve our curve."""
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--host", "127.0.0.1",
           "--port", "0", "--load_fast", "true"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    url, log = None, []
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            if sel.select(timeout=1):
                line = proc.stdout.readline()
                log.append(line)
                m = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
                if m:
                    url = m.group(1)
        check(url is not None, "tensorboard started and printed its URL: " + "".join(log)[-500:])
        if url is None:
            return
        q = urllib.parse.urlencode({"run": ".", "tag": "train/loss"})
        points = []
        while time.monotonic() < deadline:  # the data server loads in the background
            try:
                _, body = fetch(url + "data/plugin/scalars/scalars?" + q)
                points = json.loads(body)
            except Exception:  # 400 until the run is loaded
                points = []
            if len(points) >= 12:
                break
            time.sleep(0.5)
        steps = [p[1] for p in points]
        check(steps == expected_loss_steps(), f"tensorboard serves train/loss steps {steps}")
        check(all(math.isclose(v, 1.0 / s if s < 6 else 100.0 + s, rel_tol=1e-6)
                  for _, s, v in points), "tensorboard serves the train/loss values")
        print(f"tensorboard: {url} served train/loss at {len(points)} steps")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fetch(url):
    # Loopback only: never through an http_proxy from the environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=20) as r:
        return r.headers.get("Content-Type"), r.read().decode("utf-8")


def check_metrics(url):
    from prometheus_client.parser import text_string_to_metric_families

    ctype, text = fetch(url)
    check(ctype.startswith("text/plain; version=0.0.4"), f"/metrics content type {ctype}")
    fams = {f.name: f for f in text_string_to_metric_families(text)}

    def value(name, labels=None, sample=None):
        fam = fams.get(name)
        if fam is None:
            check(False, f"family {name} present")
            return None
        for s in fam.samples:
            if s.name == (sample or name) and (labels is None or s.labels == labels):
                return s.value
        check(False, f"sample {sample or name}{labels or ''}")
        return None

    def types(name, want):
        check(name in fams and fams[name].type == want,
              f"{name} is a {want}, got {fams[name].type if name in fams else 'nothing'}")

    # The parser names a counter family without its _total suffix.
    for name, t in [("gantry_train_step", "gauge"), ("gantry_train_loss", "gauge"),
                    ("gantry_train_samples", "counter"), ("gantry_train_tokens", "counter"),
                    ("gantry_train_allreduce_duration_seconds", "histogram"),
                    ("gantry_train_state", "gauge"), ("gantry_train_eval", "gauge")]:
        types(name, t)
    check(value("gantry_train_step") == 42, "gantry_train_step == 42")
    check(value("gantry_train_total_steps") == 420, "gantry_train_total_steps == 420")
    check(math.isclose(value("gantry_train_progress_ratio") or 0, 0.1), "progress ratio 0.1")
    check(math.isclose(value("gantry_train_loss") or 0, 0.25), "loss 0.25")
    check(math.isclose(value("gantry_train_samples_per_second") or 0, 128.0), "samples/s 128")
    check(math.isclose(value("gantry_train_tokens_per_second") or 0, 12800.0), "tokens/s 12800")
    check(math.isclose(value("gantry_train_eta_seconds") or 0, 189.0), "eta 189 s")
    check(value("gantry_train_samples", sample="gantry_train_samples_total") == 42 * 64,
          "samples_total")
    check(value("gantry_train_last_checkpoint_step") == 40, "last checkpoint step 40")
    check(value("gantry_train_state", {"state": "running"}) == 1, "state running")
    check(value("gantry_train_state", {"state": "failed"}) == 0, "state not failed")
    check(math.isclose(value("gantry_train_eval", {"metric": "accuracy"}) or 0, 0.5), "eval")
    check(value("gantry_train_checkpoint_duration_seconds") == 0.75, "checkpoint took 0.75 s")
    h = "gantry_train_allreduce_duration_seconds"
    check(value(h, {"le": "0.01"}, h + "_bucket") == 2, "allreduce le=0.01 bucket == 2")
    check(value(h, {"le": "+Inf"}, h + "_bucket") == 3, "allreduce +Inf bucket == 3")
    check(value(h, sample=h + "_count") == 3, "allreduce count 3")
    check(math.isclose(value(h, sample=h + "_sum") or 0, 2.008), "allreduce sum 2.008")
    print(f"metrics: {len(fams)} families parsed by prometheus_client")


def check_progress(url):
    ctype, text = fetch(url)
    check(ctype == "application/json", f"/progress content type {ctype}")
    p = json.loads(text)
    for key, want in [("state", "running"), ("step", 42), ("total_steps", 420), ("epoch", 1),
                      ("last_checkpoint_step", 40), ("world_size", 2)]:
        check(p.get(key) == want, f"progress {key} = {p.get(key)!r}, want {want!r}")
    check(math.isclose(p["percent"], 10.0), "progress percent 10")
    check(math.isclose(p["eta_seconds"], 189.0), "progress eta 189")
    check(0 <= p["seconds_since_last_step"] < 60, "progress seconds_since_last_step fresh")
    check(p["eval"] == {"accuracy": 0.5}, f"progress eval {p['eval']}")
    print(f"progress: {text.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events")
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--metrics")
    ap.add_argument("--progress")
    args = ap.parse_args()
    if args.events:
        check_events(args.events)
    if args.events and args.serve:
        check_served(args.events)
    if args.metrics:
        check_metrics(args.metrics)
    if args.progress:
        check_progress(args.progress)
    print("OK" if not failures else f"FAILED: {len(failures)} checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
