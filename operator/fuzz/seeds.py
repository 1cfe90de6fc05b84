#!/usr/bin/env python3
"""Writes fuzz_rec's seed corpus (operator/testdata/fuzz/rec/) from the reconcile fixtures
(operator/testdata/rec/): the same worlds, with each compact pod written out as the Pod object
the informer would hold (labels, deletionTimestamp, Ready, the worker's terminated or waiting
state, PodScheduled=False), and without the fixture's description and expectations.

    python3 operator/fuzz/seeds.py      # after adding or changing a fixture
"""
import glob
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "testdata", "rec")
SEEDS = os.path.join(HERE, "..", "testdata", "fuzz", "rec")


# rank 0's /progress answer, as docs/metrics.md shows it: given to the worlds that have a
# progress reading, so the seeds reach progress_status()
WORKER = {"state": "running", "step": 42, "total_steps": 420, "percent": 10, "epoch": 1,
          "epochs": 2, "loss": 0.25, "samples_per_second": 128, "eta_seconds": 189,
          "last_checkpoint_step": 40, "eval_step": 40,
          "eval": {"accuracy": 0.5, "macro_f1": 0.25}}


def pod(p):
    if "metadata" in p:
        return p
    meta = {"name": p["name"], "labels": {
        "gantry.dev/job-name": p["name"].rsplit("-worker-", 1)[0],
        "gantry.dev/replica-index": str(p["index"]),
        "gantry.dev/restart-count": str(p["restart"])}}
    if "replicas" in p:
        meta["labels"]["gantry.dev/replicas"] = str(p["replicas"])
    if p.get("standby"):
        meta["labels"]["gantry.dev/standby"] = "true"
    if "uid" in p:
        meta["uid"] = p["uid"]
    if p.get("terminating"):
        meta["deletionTimestamp"] = "2026-11-30T07:59:00Z"
    st = {"phase": p["phase"]}
    if p.get("ready"):
        st["conditions"] = [{"type": "Ready", "status": "True"}]
    if "disruption" in p:
        st.setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": p["disruption"]})
    if "reason" in p:
        st["reason"] = p["reason"]
    state = None
    if "exitCode" in p or p["phase"] == "Succeeded":
        code = p.get("exitCode", 0)
        # a worker that succeeded ends its termination message with its final progress line
        msg = (json.dumps(dict(WORKER, state="succeeded", step=420, eta_seconds=0)) if code == 0
               else "worker log tail\n")
        state = {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed",
                                "message": msg}}
    if p.get("problem") == "Unschedulable":
        st["conditions"] = [{"type": "PodScheduled", "status": "False",
                             "reason": "Unschedulable", "message": p.get("problemMsg", "")}]
    elif "problem" in p:
        state = {"waiting": {"reason": p["problem"], "message": p.get("problemMsg", "")}}
    if state:
        st["containerStatuses"] = [{"name": "worker", "state": state}]
    return {"metadata": meta, "status": st}


def main():
    os.makedirs(SEEDS, exist_ok=True)
    for f in sorted(glob.glob(os.path.join(FIXTURES, "*.json"))):
        with open(f) as fh:
            world = json.load(fh)
        for k in ("description", "expect", "invalid"):
            world.pop(k, None)
        world["pods"] = [pod(p) for p in world.get("pods", [])]
        if "progress" in world:
            world["worker"] = WORKER
        with open(os.path.join(SEEDS, os.path.basename(f)), "w") as fh:
            json.dump(world, fh, separators=(",", ":"), sort_keys=True)
    print(f"{len(glob.glob(os.path.join(SEEDS, '*.json')))} seeds in {os.path.relpath(SEEDS)}")


if __name__ == "__main__":
    main()
