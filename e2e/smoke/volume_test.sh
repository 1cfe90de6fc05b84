#!/usr/bin/env bash
# A pod writes to a volume (a PersistentVolumeClaim bound to a hostPath PersistentVolume, as a
# checkpoint volume is) and another pod reads what it wrote.
. "$(dirname "$0")/lib.sh"
: "${VOLUME_ROOT:?}"
pv=smoke-$NS
cleanup() { "$KUBECTL" delete pv "$pv" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: $pv}
spec:
  capacity: {storage: 16Mi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: $VOLUME_ROOT/$pv, type: DirectoryOrCreate}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ckpt}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: $pv
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  restartPolicy: Never
  volumes: [{name: v, persistentVolumeClaim: {claimName: ckpt}}]
  containers:
  - {name: c, image: $BUSYBOX_IMAGE, imagePullPolicy: Never, volumeMounts: [{name: v, mountPath: /data}],
     command: [sh, -c, 'echo "written by writer in $NS" > /data/file && sync']}
YAML
wait_phase writer Succeeded 120
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  restartPolicy: Never
  volumes: [{name: v, persistentVolumeClaim: {claimName: ckpt}}]
  containers:
  - {name: c, image: $BUSYBOX_IMAGE, imagePullPolicy: Never, volumeMounts: [{name: v, mountPath: /data}],
     command: [cat, /data/file]}
YAML
wait_phase reader Succeeded 120
got=$(k logs reader)
[ "$got" = "written by writer in $NS" ] || { echo "reader saw '$got'" >&2; exit 1; }
