#!/usr/bin/env python3
"""Checks the example Grafana dashboard (docs/grafana/gantry.json) against what Gantry exports.

    check_dashboard.py DASHBOARD METRICS_MD [--scrape FILE_OR_URL ...] [--worker BIN --data FILE]
                       [--source FILE ...] [--require-promtool]

1. The JSON parses as a dashboard: title, uid, schemaVersion; unique panel ids; panels inside the
   24-column grid and not overlapping; every non-row panel has queries with unique refIds; the
   data source of every panel and query is the ${datasource} variable; every $variable used is
   defined (or a Grafana built-in).
2. Every metric name a query uses (gantry_*, process_*; _bucket/_sum/_count of a histogram count
   as the histogram) is documented in METRICS_MD, and is exported: present in the scrapes given
   (Prometheus text from a file or an http:// URL) of its side (worker: gantry_train_*,
   operator: the rest), or for a side without a scrape, named in a --source file (the C that
   renders them). With --worker, a real gantry-worker (one rank, --data) is started with a
   metrics port and scraped. --late names (exported only at a worker's end, after the final
   evaluation) are checked in the sources.
3. PromQL: brackets and quotes balance, and every query (variables replaced by ".*") passes
   `promtool check rules` as a recording rule. promtool comes from PATH, else from Debian's
   prometheus package, unpacked once into ~/.cache/gantry/promtool-<version>/ (apt-get download:
   no root, nothing installed); without it (no apt) only the balance is checked.
Exit 0 when all hold; prints one line per failure.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BUILTINS = {"__interval", "__rate_interval", "__range", "__interval_ms", "__range_s",
            "__range_ms", "__from", "__to", "__dashboard", "__name"}
NAME = re.compile(r"\b((?:gantry|process)_[a-z0-9_]+)\b")
fails = []


def fail(msg):
    fails.append(msg)
    print("FAIL " + msg)


def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []):  # collapsed rows keep their panels inside
            yield q


def check_layout(dash):
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        if key not in dash:
            fail("dashboard has no %r" % key)
    ids, cells = set(), {}
    variables = {v.get("name") for v in dash.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        fail("no templating variable 'datasource'")
    exprs = []
    for p in panels_of(dash):
        pid, title = p.get("id"), p.get("title", "?")
        if pid in ids:
            fail("panel id %s used twice" % pid)
        ids.add(pid)
        g = p.get("gridPos", {})
        try:
            x, y, w, h = g["x"], g["y"], g["w"], g["h"]
        except KeyError:
            fail("panel %r: gridPos needs x, y, w, h" % title)
            continue
        if x < 0 or w < 1 or x + w > 24 or y < 0 or h < 1:
            fail("panel %r: gridPos %s outside the 24-column grid" % (title, g))
        for cx in range(x, x + w):
            for cy in range(y, y + h):
                if (cx, cy) in cells:
                    fail("panel %r overlaps %r at (%d, %d)" % (title, cells[(cx, cy)], cx, cy))
                    break
                cells[(cx, cy)] = title
            else:
                continue
            break
        if p.get("type") == "row":
            continue
        targets = p.get("targets") or []
        if not targets:
            fail("panel %r has no queries" % title)
        if p.get("datasource", {}).get("uid") != "${datasource}":
            fail("panel %r: datasource is not ${datasource}" % title)
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            fail("panel %r: refIds %s not unique" % (title, refs))
        for t in targets:
            e = t.get("expr", "")
            if not e.strip():
                fail("panel %r: empty query" % title)
                continue
            if t.get("datasource", {}).get("uid") != "${datasource}":
                fail("panel %r: query %s datasource is not ${datasource}" % (title, t.get("refId")))
            for v in re.findall(r"\$\{?(\w+)", e):
                if v not in variables and v not in BUILTINS:
                    fail("panel %r: query uses undefined variable $%s" % (title, v))
            exprs.append((title, e))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and q:
            exprs.append(("variable " + v["name"], q))
    return exprs


def balanced(e):
    stack, pairs, i = [], {")": "(", "]": "[", "}": "{"}, 0
    while i < len(e):
        c = e[i]
        if c in "\"'`":
            j = e.find(c, i + 1)
            while j > 0 and e[j - 1] == "\\":
                j = e.find(c, j + 1)
            if j < 0:
                return False
            i = j + 1
            continue
        if c in "([{":
            stack.append(c)
        elif c in ")]}":
            if not stack or stack.pop() != pairs[c]:
                return False
        i += 1
    return not stack


def documented(md):
    text = open(md).read()
    return set(re.findall(r"`((?:gantry|process)_[a-z0-9_]+)", text))


def parse_scrape(text):
    names, hist = set(), set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) == "histogram":
                hist.add(m.group(1))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names, hist


def read(src):
    if src.startswith("http://"):
        with urllib.request.urlopen(src, timeout=10) as r:
            return r.read().decode()
    with open(src) as f:
        return f.read()


def scrape_worker(binary, data):
    """Starts one rank of gantry-worker on data with a metrics port; returns its /metrics text."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tmp = tempfile.mkdtemp(prefix="gantry-dash.")
    cfg = os.path.join(tmp, "cfg.json")
    with open(cfg, "w") as f:
        json.dump({"training": {"model": {"hidden": 16, "heads": 2, "layers": 1, "maxSeqLen": 24},
                                "data": {"train": data, "eval": data, "minFreq": 1},
                                "epochs": 100000, "batchSize": 3, "threads": 1,
                                "logInterval": 50}}, f)
    env = dict(os.environ, WORLD_SIZE="1", RANK="0")
    p = subprocess.Popen([binary, "--config", cfg, "--metrics-port", str(port),
                          "--checkpoint-dir", os.path.join(tmp, "ckpt"),
                          "--checkpoint-interval-steps", "20"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    text, deadline = "", time.time() + 30
    try:
        while time.time() < deadline:
            try:
                text = read("http://127.0.0.1:%d/metrics" % port)
                if re.search(r"^gantry_train_last_checkpoint_step [1-9]", text, re.M):
                    break
            except OSError:
                pass
            if p.poll() is not None:
                fail("gantry-worker exited %d before it was scraped: %s" %
                     (p.returncode, p.stderr.read().decode()[-500:]))
                break
            time.sleep(0.2)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stderr.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if not text:
        fail("no /metrics from gantry-worker on port %d" % port)
    return text


def find_promtool():
    """promtool from PATH, else from the cache, else Debian's prometheus package unpacked into
    the cache ($GANTRY_CACHE or ~/.cache/gantry, promtool-<version>/; apt-get download needs
    no root and installs nothing). None when none can be had."""
    tool = shutil.which("promtool")
    if tool or not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        return tool
    try:
        pol = subprocess.run(["apt-cache", "policy", "prometheus"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Candidate:\s*(\S+)", pol)
    if not m or m.group(1) == "(none)":
        return None
    cache = os.environ.get("GANTRY_CACHE", os.path.expanduser("~/.cache/gantry"))
    dest = os.path.join(cache, "promtool-" + re.sub(r"[^A-Za-z0-9.+-]", "_", m.group(1)))
    tool = os.path.join(dest, "promtool")
    if os.access(tool, os.X_OK):
        return tool
    work = tempfile.mkdtemp(prefix="promtool.")
    try:
        subprocess.run(["apt-get", "download", "prometheus=" + m.group(1)], cwd=work,
                       capture_output=True, timeout=300, check=True)
        deb = [f for f in os.listdir(work) if f.endswith(".deb")][0]
        subprocess.run(["dpkg-deb", "-x", deb, "x"], cwd=work, capture_output=True,
                       timeout=300, check=True)
        os.makedirs(dest, exist_ok=True)
        shutil.copy(os.path.join(work, "x", "usr", "bin", "promtool"), tool + ".tmp")
        os.rename(tool + ".tmp", tool)
        print("note: promtool %s unpacked into %s" % (m.group(1), dest))
        return tool
    except (OSError, IndexError, subprocess.SubprocessError) as e:
        print("note: could not fetch promtool (%s)" % e)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def promtool_check(exprs, required):
    tool = find_promtool()
    if not tool:
        if required:
            fail("no promtool (Debian package prometheus)")
        else:
            print("note: no promtool: PromQL checked for balance only")
        return
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard:query_%d" % i,
         "expr": re.sub(r"\$\{?\w+\}?", ".*", e).replace("[.*]", "[5m]")}
        for i, (_, e) in enumerate(exprs) if not e.startswith("label_values(")]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        json.dump(rules, f)  # JSON is YAML
    r = subprocess.run([tool, "check", "rules", f.name], capture_output=True, text=True)
    os.unlink(f.name)
    if r.returncode != 0:
        fail("promtool check rules: " + (r.stdout + r.stderr).strip()[-2000:])
    else:
        print("ok   promtool: %d queries parse" % len(rules["groups"][0]["rules"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dashboard")
    ap.add_argument("metrics_md")
    ap.add_argument("--scrape", action="append", default=[])
    ap.add_argument("--source", action="append", default=[])
    ap.add_argument("--worker")
    ap.add_argument("--data")
    ap.add_argument("--late", action="append", default=[],
                    help="a gantry_train_* name that appears only at the end of a run (the "
                         "final evaluation): checked in the --source files instead")
    ap.add_argument("--require-promtool", action="store_true")
    a = ap.parse_args()

    try:
        dash = json.load(open(a.dashboard))
    except (OSError, ValueError) as e:
        print("FAIL %s: %s" % (a.dashboard, e))
        return 1
    exprs = check_layout(dash)
    print("ok   %d panels, %d queries" % (sum(1 for _ in panels_of(dash)), len(exprs)))
    for title, e in exprs:
        if not balanced(e):
            fail("panel %r: unbalanced brackets or quotes in %s" % (title, e))

    exported, hist = set(), set()
    for s in a.scrape:
        n, h = parse_scrape(read(s))
        exported |= n
        hist |= h
    if a.worker:
        n, h = parse_scrape(scrape_worker(a.worker, a.data))
        exported |= n
        hist |= h
        print("ok   scraped %d gantry_train_* names from a running gantry-worker" %
              sum(1 for x in n if x.startswith("gantry_train_")))
    sources = "".join(open(f).read() for f in a.source)
    docs = documented(a.metrics_md)

    used = set()
    for _, e in exprs:
        for name in NAME.findall(e):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            used.add(base if base != name and (base in hist or base in docs) else name)
    # A side (worker: gantry_train_*, operator: the rest) with a scrape must export every name
    # in it; a side without one is checked against the sources.
    def side(n):
        return "worker" if n.startswith("gantry_train_") else "operator"
    scraped = {side(n) for n in exported if n.startswith("gantry_")}
    for name in sorted(used):
        if name not in docs:
            fail("%s is used by the dashboard but not documented in %s" % (name, a.metrics_md))
        in_src = re.search(r"\b%s\b" % name, sources)
        if side(name) in scraped and name not in a.late:
            if name not in exported:
                fail("%s is not in the %s's /metrics" % (name, side(name)))
        elif not in_src:
            fail("%s is not named in the sources %s" % (name, " ".join(a.source)))
    print("ok   %d metric names checked: %s" % (len(used), " ".join(sorted(used))))
    promtool_check(exprs, a.require_promtool)
    print("%d failures" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
