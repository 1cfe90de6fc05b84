#!/usr/bin/env bash
# hack/docker-build.sh: build the CPU images from their Dockerfiles (images/*.Dockerfile) with
# Docker on this machine, where no registry serves base images, and check what was built.
#
#   hack/docker-build.sh [--daemon] [--check] [operator] [worker]     (default: both)
#
# --daemon  start a private dockerd for this run and stop it at the end (docker.io and
#           mmdebstrap are installed from Debian when missing and run as root). Its data root,
#           with the layer cache, is $GANTRY_CACHE/docker (reruns take seconds); socket and state
#           in a temp dir; no iptables rules, no bridge (RUN steps use the host network).
#           Without --daemon: the daemon of DOCKER_HOST (or the default socket).
# --check   run each image: --help exits 0, the process runs as uid 65532, no shell in the image;
#           the worker trains on worker/testdata/tiny.jsonl (read-only root, no network) and
#           writes its report as uid 65532. Prints "ok ..."/"FAIL ..." lines, then
#           "N passed, N failed".
#
# Base image: the Dockerfiles build FROM debian:12.12-slim (ARG DEBIAN) and ship FROM scratch.
# When the daemon lacks that tag (nothing to pull it from here), a stand-in is imported under it:
# a bookworm minbase root filesystem made by mmdebstrap from the Debian mirror (same archive as
# the real image, today's point release), cached in $GANTRY_CACHE/images/standin/.
# Builder: the classic one (DOCKER_BUILDKIT=0). BuildKit would first pull the
# `# syntax=docker/dockerfile:1.7` frontend image from Docker Hub; the classic builder reads that
# line as a comment. It does not read images/<name>.Dockerfile.dockerignore, so the context is
# made here: the checkout's files (git ls-files, tracked and untracked-not-ignored) less those
# patterns, sent as a tar. Tags: gantry-operator:<appVersion>, gantry-worker:<appVersion>, in
# that daemon only (the local cluster imports hack/images.sh's tars instead).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
CACHE=${GANTRY_CACHE:-$HOME/.cache/gantry}

die() { printf 'docker-build: %s\n' "$*" >&2; exit "${2:-1}"; }
log() { printf '>> %s\n' "$*" >&2; }

daemon=0 check=0 images=()
while [ $# -gt 0 ]; do
    case "$1" in
    --daemon) daemon=1 ;;
    --check) check=1 ;;
    operator | worker) images+=("$1") ;;
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (try --help)" 64 ;;
    esac
    shift
done
[ ${#images[@]} -gt 0 ] || images=(operator worker)
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$ROOT/charts/gantry/Chart.yaml")
[ -n "$version" ] || die "no appVersion in charts/gantry/Chart.yaml"

need() { # COMMAND PACKAGE
    command -v "$1" >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "$1 is missing: apt-get install $2" 69
    log "installing $2 (Debian)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "$2" >/dev/null; } || die "could not install $2" 69
}

run_start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/gantry-docker.XXXXXX")
chmod 755 "$work"
dpid=
cleanup() {
    if [ -n "$dpid" ]; then
        kill "$dpid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$dpid" 2>/dev/null || true
        # dockerd leaves its default network namespace bind-mounted in the exec root.
        awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r |
            while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# The Debian package's client matches its daemon; another docker on PATH may want buildx.
DOCKER=${DOCKER:-}
if [ "$daemon" = 1 ]; then
    [ "$(id -u)" = 0 ] || die "--daemon needs root" 69
    need dockerd docker.io
    mkdir -p "$CACHE/docker"
    exec 9>"$CACHE/docker.lock"
    flock -w 1800 9 || die "another run holds $CACHE/docker.lock"
    export DOCKER_HOST=unix://$work/docker.sock
    dockerd --data-root "$CACHE/docker" --exec-root "$work/exec" -H "$DOCKER_HOST" \
        --pidfile "$work/dockerd.pid" --iptables=false --ip-forward=false --ip-masq=false \
        --bridge=none --containerd-namespace gantry-docker-build \
        --containerd-plugins-namespace gantry-docker-build-plugins >"$work/dockerd.log" 2>&1 &
    dpid=$!
fi
[ -n "$DOCKER" ] || { [ -x /usr/bin/docker ] && DOCKER=/usr/bin/docker; } || DOCKER=$(command -v docker) ||
    die "no docker client: apt-get install docker.io" 69
d() { "$DOCKER" "$@"; }
for _ in $(seq 1 150); do d version >/dev/null 2>&1 && break; sleep 0.2; done
d version >/dev/null 2>&1 || die "no Docker daemon at ${DOCKER_HOST:-the default socket}$([ -z "$dpid" ] || printf ': %s' "$(tail -3 "$work/dockerd.log")")" 69

# The base: the tag the Dockerfiles name, else a stand-in made from the Debian mirror.
base=$(sed -n 's/^ARG DEBIAN=//p' "$ROOT/images/gantry-operator.Dockerfile")
[ "$(sed -n 's/^ARG DEBIAN=//p' "$ROOT/images/gantry-worker.Dockerfile")" = "$base" ] ||
    die "the two Dockerfiles name different bases"
if ! d image inspect "$base" >/dev/null 2>&1; then
    tar=$CACHE/images/standin/$(tr ':/' '__' <<<"$base").tar
    if [ ! -s "$tar" ]; then
        need mmdebstrap mmdebstrap
        mkdir -p "$(dirname "$tar")"
        log "no $base here: making a stand-in (mmdebstrap bookworm minbase) -> $tar"
        mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
            bookworm "$tar.tmp" \
            "deb http://deb.debian.org/debian bookworm main" \
            "deb http://deb.debian.org/debian bookworm-updates main" \
            "deb http://deb.debian.org/debian-security bookworm-security main" ||
            die "mmdebstrap failed"
        mv "$tar.tmp" "$tar"
    fi
    d import --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$tar" "$base" >/dev/null
    log "stand-in $base: Debian $(d run --rm --network none "$base" cat /etc/debian_version)"
fi

context() { # DOCKERIGNORE: the checkout's files less its patterns, as a tar on stdout
    (cd "$ROOT" && git ls-files -z -co --exclude-standard) | python3 -c '
import fnmatch, os, sys
pats = [l.strip() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
def out(p):
    parts = p.split("/")
    for pat in pats:
        for i in range(1, len(parts) + 1):
            pre = "/".join(parts[:i])
            if fnmatch.fnmatchcase(pre, pat) or (pat.startswith("**/") and
                    fnmatch.fnmatchcase(parts[i - 1], pat[3:])):
                return True
    return False
keep = [p for p in sys.stdin.read().split("\0") if p and os.path.lexists(p) and not out(p)]
sys.stdout.write("\0".join(keep))
' "$1" | (cd "$ROOT" && tar --null -T - -c)
}

for img in "${images[@]}"; do
    df=images/gantry-$img.Dockerfile
    start=$SECONDS
    log "docker build -f $df -t gantry-$img:$version (log: $work/build-$img.log)"
    if ! context "$ROOT/$df.dockerignore" | DOCKER_BUILDKIT=0 nice -n 10 "$DOCKER" build \
        --network host -f "$df" -t "gantry-$img:$version" - >"$work/build-$img.log" 2>&1; then
        tail -20 "$work/build-$img.log" >&2
        die "docker build of $df failed"
    fi
    log "gantry-$img:$version built in $((SECONDS - start)) s, $(d image inspect -f '{{.Size}}' "gantry-$img:$version") bytes"
done
# Our own data root: drop what earlier runs left untagged (their build stages, replaced images);
# this run's build stages stay, and with them the layer cache (the apt layer).
[ -z "$dpid" ] || d image prune -f --filter "until=$run_start" >/dev/null || true
[ "$check" = 1 ] || exit 0

fails=0 checks=0
ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL $*"; }
common() { # IMAGE ENTRYPOINT
    local ref=$1:$version c files
    [ "$(d image inspect -f '{{.Config.User}} {{json .Config.Entrypoint}}' "$ref")" = "65532:65532 [\"$2\"]" ] &&
        ok "$ref: user 65532:65532, entrypoint $2" ||
        bad "$ref: config $(d image inspect -f '{{.Config.User}} {{json .Config.Entrypoint}}' "$ref")"
    d run --rm --network none "$ref" --help >"$work/help" 2>&1 &&
        ok "$ref: --help exits 0 ($(head -1 "$work/help"))" ||
        bad "$ref: --help: $(tail -2 "$work/help")"
    c=$(d create "$ref" 2>/dev/null)
    files=$(d export "$c" | tar -t)
    d rm "$c" >/dev/null
    if grep -Eq '(^|/)(sh|bash|dash|ash|busybox)$' <<<"$files" ||
        d run --rm --network none --entrypoint /bin/sh "$ref" -c true >/dev/null 2>&1; then
        bad "$ref: has a shell: $(grep -E '(^|/)(sh|bash|dash|ash|busybox)$' <<<"$files" | head -3)"
    else
        ok "$ref: no shell ($(grep -vc '/$' <<<"$files") files)"
    fi
}
for img in "${images[@]}"; do
    case $img in
    operator)
        common gantry-operator /usr/bin/gantry-operator
        # Running (it retries an API server that is not there): as which uid?
        printf '%s\n' 'apiVersion: v1' 'kind: Config' \
            'clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]' \
            'users: [{name: u, user: {token: "x"}}]' \
            'contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]' \
            'current-context: c' >"$work/kubeconfig"
        chmod 644 "$work/kubeconfig"
        c=$(d run -d --network none --read-only -v "$work/kubeconfig:/kubeconfig:ro" \
            "gantry-operator:$version" --kubeconfig /kubeconfig)
        sleep 2
        pid=$(d inspect -f '{{if .State.Running}}{{.State.Pid}}{{end}}' "$c")
        uid=$( [ -z "$pid" ] || ps -o uid=,gid= -p "$pid" | xargs)
        [ "$uid" = "65532 65532" ] && ok "gantry-operator:$version runs as uid/gid $uid (read-only root)" ||
            bad "gantry-operator:$version process uid/gid '$uid': $(d logs "$c" 2>&1 | tail -2)"
        d rm -f "$c" >/dev/null
        ;;
    worker)
        common gantry-worker /usr/bin/gantry-worker
        d run --rm --network none --entrypoint /usr/bin/gantry-run "gantry-worker:$version" --help \
            >"$work/help" 2>&1 && ok "gantry-worker:$version: gantry-run --help exits 0" ||
            bad "gantry-worker:$version: gantry-run --help: $(tail -2 "$work/help")"
        mkdir -p "$work/cfg" "$work/data" "$work/out"
        chmod 755 "$work/cfg" "$work/data"
        chmod 777 "$work/out"
        cp "$ROOT/worker/testdata/tiny.jsonl" "$work/data/"
        cat >"$work/cfg/config.json" <<'JSON'
{"training": {"model": {"hidden": 16, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "/data/tiny.jsonl", "eval": "/data/tiny.jsonl", "minFreq": 1},
  "epochs": 4, "batchSize": 3, "learningRate": "3e-3", "logInterval": 4,
  "report": "/out/report.json"}}
JSON
        chmod 644 "$work/cfg/config.json" "$work/data/tiny.jsonl"
        if d run --rm --network none --read-only --tmpfs /tmp -v "$work/cfg:/etc/gantry:ro" \
            -v "$work/data:/data:ro" -v "$work/out:/out" "gantry-worker:$version" \
            --config /etc/gantry/config.json >"$work/train.log" 2>&1 &&
            grep -q '"accuracy"' "$work/out/report.json" 2>/dev/null; then
            owner=$(stat -c '%u:%g' "$work/out/report.json")
            [ "$owner" = 65532:65532 ] &&
                ok "gantry-worker:$version trains on tiny.jsonl (read-only root, no network); report written by $owner" ||
                bad "gantry-worker:$version: report written by $owner, not 65532:65532"
        else
            bad "gantry-worker:$version could not train: $(tail -3 "$work/train.log")"
        fi
        ;;
    esac
done
echo "$((checks - fails)) passed, $fails failed"
[ "$fails" = 0 ]
