#!/usr/bin/env python3
"""Builds a container image without a registry or Docker: a root filesystem directory in, an OCI
image layout tar out, ready for `ctr -n k8s.io images import` (hack/cluster.sh image-import does
that). One uncompressed layer, reproducible: entries sorted, owner root, mtime 0.

  hack/cluster-image.py --rootfs DIR --name gantry-worker:0.1.0 --out worker.tar \
      [--entrypoint /usr/bin/gantry-worker] [--cmd '["--config", "/etc/gantry/config.json"]'] \
      [--env K=V ...] [--workdir /] [--user UID[:GID]]

--entrypoint and --cmd take either one word or a JSON array of words.

The name is normalised as kubelet does (gantry-worker:0.1.0 -> docker.io/library/gantry-worker:0.1.0),
so a pod that names the image the short way finds it. A tag is required and may not be `latest`:
pods here never pull, so they must name an exact image that is already imported.
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def normalise(name):
    if "@" in name:
        sys.exit(f"error: --name {name}: give a tag, not a digest")
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        sys.exit(f"error: --name {name} has no tag; add one (e.g. {name}:0.1.0), never :latest")
    if last.endswith(":latest"):
        sys.exit(f"error: --name {name}: ':latest' is not allowed here; pods never pull, pin a version")
    first = name.split("/", 1)[0]
    if "/" not in name:
        return "docker.io/library/" + name
    if "." not in first and ":" not in first and first != "localhost":
        return "docker.io/" + name
    return name


def argv(text):
    """One word, or a JSON array of words (so that words may start with '-')."""
    if text.lstrip().startswith("["):
        words = json.loads(text)
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise argparse.ArgumentTypeError(f"{text}: want a JSON array of strings")
        return words
    return [text]


def layer_tar(rootfs):
    """The rootfs as an uncompressed tar, reproducible: sorted entries, root-owned, mtime 0."""
    def clean(ti):
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        ti.mtime = 0
        return ti

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(os.listdir(rootfs)):
            tar.add(os.path.join(rootfs, entry), arcname=entry, filter=clean)
    return buf.getvalue()


def blob(tar, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    ti = tarfile.TarInfo("blobs/sha256/" + digest.split(":", 1)[1])
    ti.size, ti.mode, ti.mtime = len(data), 0o444, 0
    tar.addfile(ti, io.BytesIO(data))
    return {"digest": digest, "size": len(data)}


def add_file(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), 0o444, 0
    tar.addfile(ti, io.BytesIO(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rootfs", required=True, help="directory that becomes the image's /")
    ap.add_argument("--name", required=True, help="image reference with a tag, e.g. gantry.local/busybox:1.35.0")
    ap.add_argument("--out", required=True, help="OCI layout tar to write")
    ap.add_argument("--entrypoint", type=argv, default=None, help='a word or a JSON array: \'["/bin/sh", "-c", "..."]\'')
    ap.add_argument("--cmd", type=argv, default=None, help="a word or a JSON array, like --entrypoint")
    ap.add_argument("--env", action="append", default=[], help="K=V, repeatable")
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--user", default="")
    args = ap.parse_args()
    if not os.path.isdir(args.rootfs):
        sys.exit(f"error: --rootfs {args.rootfs} is not a directory")
    ref = normalise(args.name)

    layer = layer_tar(args.rootfs)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + args.env
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": env, "WorkingDir": args.workdir, "User": args.user},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]},
              "history": [{"created_by": "hack/cluster-image.py"}]}
    if args.entrypoint is not None:
        config["config"]["Entrypoint"] = args.entrypoint
    if args.cmd is not None:
        config["config"]["Cmd"] = args.cmd

    tmp = args.out + ".tmp"
    with tarfile.open(tmp, "w") as tar:
        add_file(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        ldesc = blob(tar, layer)
        cdesc = blob(tar, json.dumps(config, sort_keys=True).encode())
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": dict(mediaType="application/vnd.oci.image.config.v1+json", **cdesc),
                    "layers": [dict(mediaType="application/vnd.oci.image.layer.v1.tar", **ldesc)]}
        mdesc = blob(tar, json.dumps(manifest, sort_keys=True).encode())
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                 "manifests": [dict(mediaType="application/vnd.oci.image.manifest.v1+json",
                                    platform={"architecture": "amd64", "os": "linux"},
                                    annotations={"io.containerd.image.name": ref,
                                                 "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]},
                                    **mdesc)]}
        add_file(tar, "index.json", json.dumps(index, sort_keys=True).encode())
    os.replace(tmp, args.out)
    print(f"{ref} {mdesc['digest']} -> {args.out}")


if __name__ == "__main__":
    main()
