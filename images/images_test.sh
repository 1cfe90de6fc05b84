#!/usr/bin/env bash
# images/images_test.sh BUILD-DIR: hack/images.sh makes images that run, as a non-root user,
# without a shell, and the same bytes twice.
#
# Checks: each OCI tar names <image>:<chart appVersion> (docker.io/library/...), its config runs
# as 65532:65532 with the right entrypoint; the layer has no /bin/sh; unpacked, every binary
# runs inside it (chroot as uid 65532: its libraries are all there); a second build gives the
# same manifest digests; the worker image trains on worker/testdata/tiny.jsonl with a read-only
# root, as uid 65532, the config and data mounted where a pod has them, and gantry-predict
# classifies with the checkpoint it wrote. Needs root (chroot,
# unshare -m): exits 77 (skipped) otherwise.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:?usage: images_test.sh BUILD-DIR}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root for chroot"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gantry-images-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL $*"; }

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$root/charts/gantry/Chart.yaml")
"$root/hack/images.sh" --build-dir "$build" --out "$tmp/a" >"$tmp/a.txt"
"$root/hack/images.sh" --build-dir "$build" --out "$tmp/b" >"$tmp/b.txt"
if [ "$(cut -d' ' -f1,2 "$tmp/a.txt")" = "$(cut -d' ' -f1,2 "$tmp/b.txt")" ]; then
    ok "two builds give the same digests"
else
    bad "digests differ between two builds: $(cat "$tmp/a.txt" "$tmp/b.txt")"
fi

# inspect TAR -> "ref|user|entrypoint|layer-blob"
inspect() {
    python3 - "$1" <<'PY'
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":", 1)[1]).read()
idx = json.loads(t.extractfile("index.json").read())
m = idx["manifests"][0]
man = json.loads(blob(m["digest"]))
cfg = json.loads(blob(man["config"]["digest"]))["config"]
print("|".join([m["annotations"]["io.containerd.image.name"], cfg.get("User", ""),
                " ".join(cfg.get("Entrypoint") or []), man["layers"][0]["digest"].split(":", 1)[1]]))
PY
}

check_image() { # NAME ENTRYPOINT CMD-TO-RUN...
    local name=$1 entry=$2 tar=$tmp/a/$1-$version.tar info ref user ep layer rfs
    shift 2
    info=$(inspect "$tar")
    IFS='|' read -r ref user ep layer <<<"$info"
    [ "$ref" = "docker.io/library/$name:$version" ] && ok "$name: reference $ref" || bad "$name: reference $ref"
    [ "$user" = "65532:65532" ] && ok "$name: runs as 65532:65532" || bad "$name: user '$user'"
    [ "$ep" = "$entry" ] && ok "$name: entrypoint $ep" || bad "$name: entrypoint '$ep', want $entry"
    rfs=$tmp/rootfs-$name
    mkdir -p "$rfs"
    tar -xf "$tar" -C "$tmp" "blobs/sha256/$layer"
    tar -xf "$tmp/blobs/sha256/$layer" -C "$rfs"
    if [ -e "$rfs/bin/sh" ] || [ -e "$rfs/usr/bin/sh" ] || [ -e "$rfs/usr/bin/bash" ]; then
        bad "$name: has a shell"
    else
        ok "$name: no shell in the image"
    fi
    while [ $# -gt 0 ]; do
        if out=$(chroot --userspec=65532:65532 "$rfs" $1 2>&1); then
            ok "$name: '$1' runs inside the image as 65532"
        else
            bad "$name: '$1' failed inside the image: $(printf '%s' "$out" | tail -3)"
        fi
        shift
    done
}

check_image gantry-operator /usr/bin/gantry-operator "/usr/bin/gantry-operator --version"
check_image gantry-worker /usr/bin/gantry-worker "/usr/bin/gantry-worker --help" "/usr/bin/gantry-run --help" \
    "/usr/bin/gantry-predict --help"
# The operator names its version; the tag must agree (hack/images.sh refuses otherwise).
v=$(chroot --userspec=65532:65532 "$tmp/rootfs-gantry-operator" /usr/bin/gantry-operator --version)
[ "$v" = "gantry-operator $version" ] && ok "operator version $v matches the tag" || bad "operator says '$v', tag $version"


# The worker image trains, the way a pod runs it: uid 65532, read-only root (private mount
# namespace), tmpfs /tmp, /proc, the config where the operator mounts it, data on a volume.
w=$tmp/rootfs-gantry-worker
mkdir -p "$tmp/vol/config" "$tmp/vol/data"
cp "$root/worker/testdata/tiny.jsonl" "$tmp/vol/data/"
cat >"$tmp/vol/config/config.json" <<'JSON'
{"training": {"model": {"hidden": 16, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "/data/tiny.jsonl", "eval": "/data/tiny.jsonl", "minFreq": 1},
  "epochs": 4, "batchSize": 3, "learningRate": "3e-3", "logInterval": 4,
  "report": "/tmp/report.json"},
 "checkpoint": {"dir": "/tmp/ck/tiny", "intervalSteps": 4}}
JSON
mkdir -p "$w/etc/gantry" "$w/data"
if out=$(env -i OMP_WAIT_POLICY=passive unshare -m bash -c '
        r=$1 v=$2
        mount --bind "$r" "$r" && mount -o remount,bind,ro "$r" &&
        mount -t tmpfs -o size=16m,mode=1777 tmpfs "$r/tmp" && mount -t proc proc "$r/proc" &&
        mount --bind "$v/config" "$r/etc/gantry" && mount --bind "$v/data" "$r/data" &&
        chroot --userspec=65532:65532 "$r" /usr/bin/gantry-worker --config /etc/gantry/config.json &&
        cat "$r/tmp/report.json" && echo &&
        chroot --userspec=65532:65532 "$r" /usr/bin/gantry-predict -q -m /tmp/ck/tiny \
            --format jsonl /data/tiny.jsonl' _ "$w" "$tmp/vol" 2>&1); then
    if grep -q '"accuracy"' <<<"$out"; then
        ok "gantry-worker image trains on the tiny fixture (read-only root, uid 65532) and reports"
    else
        bad "gantry-worker image: no report: $(tail -3 <<<"$out")"
    fi
    if [ "$(grep -c '^{"line":[0-9]*,"label":"\(ham\|spam\)","score":' <<<"$out")" = 6 ]; then
        ok "gantry-predict in the image classifies the 6 documents with the checkpoint it wrote"
    else
        bad "gantry-predict in the image: $(tail -3 <<<"$out")"
    fi
else
    bad "gantry-worker image could not train: $(tail -5 <<<"$out")"
fi

echo "$((checks - fails))/$checks checks passed"
[ "$fails" = 0 ]
