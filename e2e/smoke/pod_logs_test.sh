#!/usr/bin/env bash
# A pod from a locally built image (no registry, never pulled) runs, and kubectl reads its logs.
. "$(dirname "$0")/lib.sh"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: hello}
spec:
  restartPolicy: Never
  containers:
  - {name: c, image: $BUSYBOX_IMAGE, imagePullPolicy: Never, command: [sh, -c, 'echo "hello from \$(hostname)"']}
YAML
wait_phase hello Succeeded 120
got=$(k logs hello)
[ "$got" = "hello from hello" ] || { echo "logs: got '$got', want 'hello from hello'" >&2; exit 1; }
