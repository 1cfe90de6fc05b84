#!/usr/bin/env bash
# Two pods behind a headless Service with publishNotReadyAddresses resolve each other's
# <hostname>.<subdomain>.<ns>.svc.cluster.local names through CoreDNS (busybox's nslookup applies
# no search path, hence the full names) before either is Ready (a's readiness probe never
# passes), and exchange bytes over TCP: what gantry-worker's rendezvous relies on.
. "$(dirname "$0")/lib.sh"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: rdzv}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: rdzv-smoke}
  ports: [{name: rdzv, port: 7000}]
---
apiVersion: v1
kind: Pod
metadata: {name: a, labels: {app: rdzv-smoke}}
spec:
  hostname: a
  subdomain: rdzv
  restartPolicy: Never
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    readinessProbe: {exec: {command: ["false"]}, periodSeconds: 2}
    command:
    - sh
    - -c
    - |
      name=b.rdzv.$NS.svc.cluster.local
      for i in \$(seq 60); do nslookup \$name >/dev/null 2>&1 && break; sleep 1; done
      nslookup \$name >/dev/null 2>&1 || { echo "a could not resolve \$name"; exit 1; }
      echo "a resolved \$name"
      # stdin stays open: busybox nc quits at its stdin's end, and b's bytes may come after
      got=\$( (echo hello-from-a; sleep 10) | nc -l -p 7000)
      echo "a got: \$got"
---
apiVersion: v1
kind: Pod
metadata: {name: b, labels: {app: rdzv-smoke}}
spec:
  hostname: b
  subdomain: rdzv
  restartPolicy: Never
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command:
    - sh
    - -c
    - |
      name=a.rdzv.$NS.svc.cluster.local
      for i in \$(seq 60); do nslookup \$name >/dev/null 2>&1 && break; sleep 1; done
      nslookup \$name >/dev/null 2>&1 || { echo "b could not resolve \$name"; exit 1; }
      echo "b resolved \$name"
      for i in \$(seq 60); do
        got=\$(echo hello-from-b | nc -w 3 \$name 7000) && [ -n "\$got" ] && break
        sleep 1
      done
      echo "b got: \$got"
YAML
wait_phase b Succeeded 120 || true
wait_phase a Succeeded 30 || true
la=$(k logs a)
lb=$(k logs b)
fail=0
grep -qx "a resolved b.rdzv.$NS.svc.cluster.local" <<<"$la" || { echo "a did not resolve b.rdzv.$NS.svc.cluster.local" >&2; fail=1; }
grep -qx "b resolved a.rdzv.$NS.svc.cluster.local" <<<"$lb" || { echo "b did not resolve a.rdzv.$NS.svc.cluster.local" >&2; fail=1; }
grep -qx "a got: hello-from-b" <<<"$la" || { echo "a did not receive b's bytes; a's log: $la" >&2; fail=1; }
grep -qx "b got: hello-from-a" <<<"$lb" || { echo "b did not receive a's bytes; b's log: $lb" >&2; fail=1; }
exit $fail
