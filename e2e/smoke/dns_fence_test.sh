#!/usr/bin/env bash
# The cluster's DNS answers for the cluster and for nothing else (CoreDNS has no upstream), a pod
# reaches the API server through the `kubernetes` Service (what in-cluster config uses), and
# the host's fence is in place: traffic to the pod and service ranges, and from pods, cannot leave
# by any interface but the bridge. Nothing here sends a packet off the host.
. "$(dirname "$0")/lib.sh"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: dns}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command:
    - sh
    - -c
    - |
      nslookup kubernetes.default.svc.cluster.local >/dev/null 2>&1 && echo "cluster name: resolved"
      nslookup example.com >/dev/null 2>&1 && echo "outside name: resolved" || echo "outside name: no answer"
      nc -w 5 kubernetes.default.svc.cluster.local 443 </dev/null && echo "api service: reachable"
YAML
wait_phase dns Succeeded 60
got=$(k logs dns)
fail=0
grep -qx "cluster name: resolved" <<<"$got" || { echo "kubernetes.default did not resolve: $got" >&2; fail=1; }
grep -qx "outside name: no answer" <<<"$got" || { echo "example.com resolved: CoreDNS has an upstream: $got" >&2; fail=1; }
grep -qx "api service: reachable" <<<"$got" || { echo "a pod cannot reach the API server through the kubernetes Service: $got" >&2; fail=1; }
if [ "$(id -u)" = 0 ]; then
    for hook in "OUTPUT GANTRY-OUT" "FORWARD GANTRY-FWD" "INPUT GANTRY-IN"; do
        read -r chain target <<<"$hook"
        iptables -C "$chain" -j "$target" 2>/dev/null || { echo "fence: no '-A $chain -j $target' rule" >&2; fail=1; }
    done
    iptables -S GANTRY-OUT 2>/dev/null | grep -q -- "-d ${SERVICE_CIDR:?} -j REJECT" ||
        { echo "fence: GANTRY-OUT does not reject $SERVICE_CIDR" >&2; fail=1; }
fi
exit $fail
