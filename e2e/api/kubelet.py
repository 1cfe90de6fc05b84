#!/usr/bin/env python3
"""A loopback kubelet for the API tier: runs a real gantry-worker process for each pod.

    kubelet.py --kubectl K --namespace NS --worker BIN --dir DIR --metrics-port P

There is no kubelet on the API tier (hack/cluster.sh up --tier api), so this plays one for the
pods of one namespace (spec.nodeName is never set: the apiserver deletes such pods at once). For
each new pod with a container "worker" it starts BIN with that container's environment (values
and secretKeyRef values), its ConfigMap volume's config.json as --config, and stdout/stderr in
DIR/<pod>-<uid>.log; then it reports the pod Running and Ready with podIP 127.0.0.1. When the
process exits it reports the pod Succeeded or Failed with the exit code and, as a real kubelet
does, the termination message: the file the container's terminationMessagePath maps to (here
DIR/<pod>-<uid>.termination-log, passed as GANTRY_TERMINATION_LOG), or with
FallbackToLogsOnError and a failure, the tail of the log. A pod that is deleted loses its
process (SIGCONT, then SIGKILL: a forced delete; waited for before any new pod starts).

What a pod network gives every pod, loopback has once, so the ports are mapped:
MASTER_ADDR becomes 127.0.0.1 and MASTER_PORT a free port per gang (job + restart-count label);
GANTRY_METRICS_PORT becomes P (only rank 0 serves it; the test points the operator's
--progress-url-template at http://{ip}:P/progress). GANTRY_CHECKPOINT_DIR and data paths are
used as they are (the test makes spec.checkpoint.path a temp dir).

DIR/pods/<pod> holds "<uid> <pid>" while the pod's process runs (the test SIGSTOPs it by that).
Stops on SIGTERM, killing its workers.
"""
import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import queue

TERM_MAX = 4096  # the kubelet's limit for one container's message
TAIL_LINES = 80  # FallbackToLogsOnError: the last 80 lines, at most TERM_MAX bytes


def log(msg):
    print("kubelet: " + msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Kubelet:
    def __init__(self, a):
        self.a = a
        self.procs = {}  # uid -> dict(pod, proc, log, term)
        self.gang_ports = {}  # (job, restart) -> MASTER_PORT
        self.events = queue.Queue()
        self.stop = False
        os.makedirs(os.path.join(a.dir, "pods"), exist_ok=True)

    def k(self, *args, data=None):
        r = subprocess.run([self.a.kubectl, "--request-timeout=20s", "-n", self.a.namespace, *args],
                           input=data, capture_output=True, text=True)
        return r.returncode, r.stdout, r.stderr

    # ---- the watch: one kubectl process, events into a queue
    def watch(self):
        while not self.stop:
            p = subprocess.Popen([self.a.kubectl, "-n", self.a.namespace, "get", "pods", "-w",
                                  "--output-watch-events", "-o", "json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.watcher = p
            dec, buf = json.JSONDecoder(), ""
            for chunk in iter(lambda: p.stdout.readline(), ""):
                buf += chunk
                while True:
                    s = buf.lstrip()
                    if not s:
                        buf = ""
                        break
                    try:
                        obj, end = dec.raw_decode(s)
                    except ValueError:
                        break
                    buf = s[end:]
                    self.events.put(obj)
            p.wait()
            if not self.stop:
                time.sleep(0.5)

    # ---- pods
    def secret_value(self, name, key):
        rc, out, _ = self.k("get", "secret", name, "-o", "json")
        if rc != 0:
            return None
        v = json.loads(out).get("data", {}).get(key)
        return base64.b64decode(v).decode() if v is not None else None

    def config_file(self, pod, d):
        """The worker's /etc/gantry/config.json: its ConfigMap volume's key, written to d."""
        c = worker_container(pod)
        vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        for m in c.get("volumeMounts", []):
            cm = vols.get(m["name"], {}).get("configMap")
            if not cm:
                continue
            rc, out, _ = self.k("get", "configmap", cm["name"], "-o", "json")
            if rc != 0:
                return None
            data = json.loads(out).get("data", {})
            if "config.json" in data:
                path = os.path.join(d, "config.json")
                with open(path, "w") as f:
                    f.write(data["config.json"])
                return path
        return None

    def start(self, pod):
        meta, uid = pod["metadata"], pod["metadata"]["uid"]
        name = meta["name"]
        labels = meta.get("labels", {})
        c = worker_container(pod)
        if c is None:
            return
        gang = (labels.get("gantry.dev/job-name"), labels.get("gantry.dev/restart-count"))
        if gang not in self.gang_ports:
            self.gang_ports[gang] = free_port()
        env = {k: os.environ[k] for k in ("PATH", "HOME", "ASAN_OPTIONS", "UBSAN_OPTIONS",
                                          "LSAN_OPTIONS") if k in os.environ}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            elif "secretKeyRef" in e.get("valueFrom", {}):
                ref = e["valueFrom"]["secretKeyRef"]
                v = self.secret_value(ref["name"], ref["key"])
                if v is None:
                    log("%s: secret %s not found yet; retrying" % (name, ref["name"]))
                    return False
                env[e["name"]] = v
        env["MASTER_ADDR"] = "127.0.0.1"
        env["MASTER_PORT"] = str(self.gang_ports[gang])
        env["GANTRY_METRICS_PORT"] = str(self.a.metrics_port)
        d = os.path.join(self.a.dir, "%s-%s" % (name, uid[:8]))
        os.makedirs(d, exist_ok=True)
        cfg = self.config_file(pod, d)
        if cfg is None:
            log("%s: no config.json yet; retrying" % name)
            return False
        term = os.path.join(d, "termination-log")
        open(term, "w").close()  # the kubelet creates it; the worker only writes into it
        env["GANTRY_TERMINATION_LOG"] = term
        logf = open(os.path.join(d, "log"), "wb")
        proc = subprocess.Popen([self.a.worker, "--config", cfg], env=env, stdout=logf,
                                stderr=subprocess.STDOUT, cwd=d)
        logf.close()
        self.procs[uid] = {"pod": name, "proc": proc, "log": os.path.join(d, "log"),
                           "term": term, "policy": c.get("terminationMessagePolicy", "File")}
        with open(os.path.join(self.a.dir, "pods", name + ".tmp"), "w") as f:
            f.write("%s %d\n" % (uid, proc.pid))
        os.rename(os.path.join(self.a.dir, "pods", name + ".tmp"),
                  os.path.join(self.a.dir, "pods", name))
        log("%s: started pid %d (rank %s, gang %s, master port %s)" %
            (name, proc.pid, env.get("RANK"), gang[1], env["MASTER_PORT"]))
        self.status(name, uid, "Running")
        return True

    def status(self, name, uid, phase, code=None, message=""):
        ready = phase == "Running"
        if phase == "Running":
            state = {"running": {"startedAt": now()}}
        else:
            state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "startedAt": now(), "finishedAt": now()}}
            if message:
                state["terminated"]["message"] = message
        # metadata.uid is a precondition: a new pod of the same name (the next gang) must not
        # get the old process's exit.
        patch = {"metadata": {"uid": uid}, "status": {"phase": phase, "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                            "hostIP": "127.0.0.1", "startTime": now(),
                            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                            "containerStatuses": [{"name": "worker", "image": "gantry-worker:test",
                                                   "imageID": "", "ready": ready,
                                                   "restartCount": 0, "state": state}]}}
        rc, _, err = self.k("patch", "pod/" + name, "--subresource=status", "--type=merge",
                            "-p", json.dumps(patch))
        if rc != 0:
            log("%s: status %s not written: %s" % (name, phase, err.strip()))

    def message(self, p, code):
        with open(p["term"], "rb") as f:
            msg = f.read(TERM_MAX)
        if not msg.strip() and code != 0 and p["policy"] == "FallbackToLogsOnError":
            with open(p["log"], "rb") as f:
                lines = f.read().splitlines(keepends=True)[-TAIL_LINES:]
            msg = b"".join(lines)[-TERM_MAX:]
        return msg.decode("utf-8", "replace")

    def kill(self, uid, why):
        p = self.procs.pop(uid)
        if p["proc"].poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    p["proc"].send_signal(sig)
                except ProcessLookupError:
                    pass
            p["proc"].wait()
            log("%s: pid %d killed (%s)" % (p["pod"], p["proc"].pid, why))
        self.forget(p["pod"], uid)

    def forget(self, name, uid):
        path = os.path.join(self.a.dir, "pods", name)
        try:
            with open(path) as f:
                if f.read().split()[0] == uid:
                    os.remove(path)
        except (OSError, IndexError):
            pass

    def reap(self):
        for uid, p in list(self.procs.items()):
            code = p["proc"].poll()
            if code is None or p.get("done"):
                continue
            p["done"] = True
            code = code if code >= 0 else 128 - code
            log("%s: pid %d exited %d" % (p["pod"], p["proc"].pid, code))
            self.forget(p["pod"], uid)
            self.status(p["pod"], uid, "Succeeded" if code == 0 else "Failed", code,
                        self.message(p, code))

    def run(self):
        threading.Thread(target=self.watch, daemon=True).start()
        pending = {}  # uid -> pod, waiting for its Secret or ConfigMap
        while not self.stop:
            try:
                ev = self.events.get(timeout=0.2)
            except queue.Empty:
                ev = None
            evs = [ev] if ev else []
            while not self.events.empty():
                evs.append(self.events.get())
            # Deletions first: a new gang's rank 0 needs the old one's ports.
            for ev in evs:
                pod, uid = ev.get("object", {}), ev.get("object", {}).get("metadata", {}).get("uid")
                if not uid:
                    continue
                if ev.get("type") == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                    pending.pop(uid, None)
                    if uid in self.procs:
                        self.kill(uid, "pod deleted")
                elif uid not in self.procs and pod.get("status", {}).get("phase", "Pending") == "Pending":
                    pending[uid] = pod
            for uid, pod in list(pending.items()):
                if self.start(pod) is not False:
                    pending.pop(uid)
            self.reap()
        for uid in list(self.procs):
            self.kill(uid, "kubelet stopped")
        if getattr(self, "watcher", None):
            self.watcher.kill()


def worker_container(pod):
    for c in pod.get("spec", {}).get("containers", []):
        if c.get("name") == "worker":
            return c
    return None


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kubectl", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    kl = Kubelet(ap.parse_args())

    def on_term(signum, frame):
        kl.stop = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    kl.run()


if __name__ == "__main__":
    main()
