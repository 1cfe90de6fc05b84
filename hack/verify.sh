#!/usr/bin/env bash
# hack/verify.sh: the install artefacts are consistent and render as intended. No cluster needed.
#
#   1. derived files are current (hack/sync-crds.sh --check): charts/gantry/crds/ equal
#      manifests/crds/, manifests/rbac/ and manifests/deploy/ equal the chart's render,
#      manifests/install.yaml equals `kubectl kustomize manifests/`;
#   2. `helm lint --strict` with the default values and with every optional part switched on;
#   3. `helm template` renders what the values promise (checked on the output): image tag from
#      appVersion, never latest; leader election on with replicas > 1 (refused off), Recreate
#      without it; ClusterRole vs Role in watchNamespace; rbac.create apart from
#      serviceAccount.create; hardened securityContext; probes, metrics Service, ServiceMonitor.
#   4. values.schema.json refuses misspelt keys and wrong types, enums and ranges, naming the path.
# Exits non-zero on any difference or failed check; 77 (skipped) when helm or kubectl is missing.
set -euo pipefail
case "${1:-}" in
-h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"") ;;
*) echo "verify: unknown argument '$1' (it takes none; see --help)" >&2; exit 64 ;;
esac

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
CHART=$ROOT/charts/gantry
CACHE=${GANTRY_CACHE:-$HOME/.cache/gantry}
fails=0 checks=0
ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL $*"; }

v=$(sed -n 's/^HELM_VERSION=\([^ ]*\).*/\1/p' "$HACK/cluster-full.sh" | head -1)
HELM=
for c in "${GANTRY_HELM:-}" "$CACHE/helm-$v/bin/helm" "$(command -v helm || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { HELM=$c; break; }
done
k8s=$(sed -n 's#^[[:space:]]*\(require[[:space:]]*\)\{0,1\}k8s.io/kubernetes \(v[0-9.]*\).*#\2#p' "$HACK/k8s/go.mod" | head -1)
KUBECTL=
for c in "${GANTRY_KUBECTL:-}" "$CACHE/k8s-$k8s/bin/kubectl" "$(command -v kubectl || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { KUBECTL=$c; break; }
done
# Without the pinned tools this check cannot run: skipped (77), with the way to get them.
[ -n "$HELM" ] || { echo "SKIP: helm not found: run 'hack/cluster.sh build --tier full' (pinned helm $v) or set GANTRY_HELM"; exit 77; }
[ -n "$KUBECTL" ] || { echo "SKIP: kubectl not found: run 'hack/cluster.sh build --tier api' or set GANTRY_KUBECTL"; exit 77; }
export GANTRY_HELM=$HELM GANTRY_KUBECTL=$KUBECTL

# 1. derived files
if "$HACK/sync-crds.sh" --check; then ok "derived files are current"; else
    bad "derived files are stale: run hack/sync-crds.sh"; fi

# 2. lint
all_on=(--set replicaCount=2 --set metrics.enabled=true --set metrics.serviceMonitor.enabled=true
        --set health.enabled=true --set watchNamespace=team-a)
"$HELM" lint --strict "$CHART" >/tmp/verify-lint.$$ 2>&1 && ok "helm lint --strict (defaults)" ||
    { bad "helm lint (defaults)"; cat /tmp/verify-lint.$$; }
"$HELM" lint --strict "$CHART" "${all_on[@]}" >/tmp/verify-lint.$$ 2>&1 &&
    ok "helm lint --strict (replicas 2, metrics, ServiceMonitor, probes, one namespace)" ||
    { bad "helm lint (all on)"; cat /tmp/verify-lint.$$; }
rm -f /tmp/verify-lint.$$

# The packaged chart: CRDs and README in, the tests out (.helmignore).
pkg=$(mktemp -d)
if "$HELM" package "$CHART" -d "$pkg" >/dev/null 2>&1; then
    listing=$(tar -tzf "$pkg"/gantry-*.tgz)
    if grep -qx 'gantry/crds/gantry.dev_trainingjobs.yaml' <<<"$listing" && grep -qx 'gantry/README.md' <<<"$listing" &&
       grep -qx 'gantry/values.schema.json' <<<"$listing" &&
       ! grep -q '^gantry/tests/' <<<"$listing"; then
        ok "helm package: crds/, values.schema.json and README.md in, tests/ out"
    else
        bad "helm package contents: $listing"
    fi
else
    bad "helm package failed"
fi
rm -rf "$pkg"

# 3. renders
appv=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$CHART/Chart.yaml")
render() { "$HELM" template t "$CHART" --namespace ops "$@" 2>&1; }
# A string matches anywhere in a line; "=STRING" must be a whole line.
found() { # STRING OUTPUT
    case "$1" in
    =*) grep -qxF -- "${1#=}" <<<"$2" ;;
    *) grep -qF -- "$1" <<<"$2" ;;
    esac
}
has() { # DESCRIPTION OUTPUT STRING...
    local d=$1 out=$2 s
    shift 2
    for s in "$@"; do
        found "$s" "$out" || { bad "$d: no '$s' in the render"; return; }
    done
    ok "$d"
}
hasnt() { # DESCRIPTION OUTPUT STRING...
    local d=$1 out=$2 s
    shift 2
    for s in "$@"; do
        ! found "$s" "$out" || { bad "$d: '$s' is in the render"; return; }
    done
    ok "$d"
}
refused() { # DESCRIPTION MESSAGE-PART ARGS...
    local d=$1 m=$2 out
    shift 2
    if out=$(render "$@"); then bad "$d: rendered, should be refused"
    elif grep -qF -- "$m" <<<"$out"; then ok "$d"
    else bad "$d: refused without '$m': $out"; fi
}

out=$(render) || { bad "helm template (defaults) failed: $out"; out=; }
has "default image is gantry-operator:<appVersion>" "$out" "image: \"gantry-operator:$appv\""
has "hardened container" "$out" "allowPrivilegeEscalation: false" "readOnlyRootFilesystem: true" \
    "runAsNonRoot: true" "- ALL" "type: RuntimeDefault" "runAsUser: 65532"
has "leader election on by default, Lease Role in the release namespace" "$out" \
    "name: GANTRY_LEADER_ELECT" 'value: "true"' "name: t-gantry-operator-leader-election" \
    "resources: [leases]" "type: RollingUpdate"
has "all namespaces: ClusterRole + ClusterRoleBinding" "$out" "=kind: ClusterRole" \
    "=kind: ClusterRoleBinding" "resources: [trainingjobs/status]"
has "standard labels" "$out" "app.kubernetes.io/name: gantry" "app.kubernetes.io/instance: t" \
    "app.kubernetes.io/version: \"$appv\"" "app.kubernetes.io/managed-by: Helm" "helm.sh/chart: gantry-"
sel=$("$HELM" template t "$CHART" --namespace ops --show-only templates/deployment.yaml |
      sed -n '/^  selector:/,/^  template:/p' | grep -c 'app.kubernetes.io/' || true)
[ "$sel" = 2 ] && ok "Deployment selector is name + instance only" || bad "Deployment selector has $sel labels, want 2"
has "by default: probes on /healthz /readyz at :8081, metrics Service at :8080" "$out" \
    "path: /healthz" "path: /readyz" 'value: ":8081"' 'value: ":8080"' "=kind: Service" \
    "name: t-gantry-operator-metrics" "targetPort: metrics"
hasnt "no ServiceMonitor by default (needs the Prometheus Operator's CRD)" "$out" "kind: ServiceMonitor"
out=$(render --set health.enabled=false --set metrics.enabled=false)
hasnt "health/metrics off: no probes, ports, Service or addresses" "$out" "livenessProbe" \
    "readinessProbe" "=kind: Service" "GANTRY_METRICS_ADDR" "GANTRY_HEALTH_ADDR" "containerPort"

out=$(render --set image.tag=0.2.0-rc.1)
has "image.tag overrides appVersion" "$out" 'image: "gantry-operator:0.2.0-rc.1"'
dg=sha256:$(printf '0123456789abcdef%.0s' 1 2 3 4)
out=$(render --set image.repository=reg.example/g/op --set image.digest=$dg)
has "image.digest pins by digest" "$out" "image: \"reg.example/g/op@$dg\""
refused "image.tag=latest is refused" "'latest' is not allowed" --set image.tag=latest
refused "replicas > 1 without leader election is refused" "needs leaderElection.enabled=true" \
    --set replicaCount=2 --set leaderElection.enabled=false
# values.schema.json: a misspelt key or a wrong type, enum or range is refused at install time with
# its path named, instead of rendering a pod that exits 64 or a setting that is silently ignored
refused "a misspelt key is refused (schema)" "additional properties 'replicas' not allowed" \
    --set replicas=2
refused "a misspelt nested key is refused (schema)" "additional properties 'worker' not allowed" \
    --set operator.worker=8
refused "operator.workers must be an integer (schema)" "at '/operator/workers'" \
    --set operator.workers=many
refused "operator.workers is at most 256, as the operator (schema)" "at '/operator/workers'" \
    --set operator.workers=300
refused "operator.qps must be > 0 (schema)" "at '/operator/qps'" --set operator.qps=0
refused "operator.logLevel is one of four (schema)" "at '/operator/logLevel'" \
    --set operator.logLevel=verbose
refused "image.pullPolicy is one of three (schema)" "at '/image/pullPolicy'" \
    --set image.pullPolicy=Sometimes
refused "image.digest must be sha256:<64 hex> (schema)" "at '/image/digest'" \
    --set image.digest=sha256:0123
refused "a float image.tag is refused, not printed as another number (schema)" "at '/image/tag'" \
    --set-json image.tag=1.10
refused "ports are 1-65535 (schema)" "at '/metrics/port'" --set metrics.port=70000
refused "metrics.service.type is a Service type (schema)" "at '/metrics/service/type'" \
    --set metrics.service.type=Internal
refused "serviceMonitor.interval is a duration (schema)" "at '/metrics/serviceMonitor/interval'" \
    --set metrics.serviceMonitor.interval=30
refused "extraEnv entries need a name (schema)" "missing property 'name'" \
    --set-json 'operator.extraEnv=[{"value":"x"}]'
refused "watchNamespace is a namespace name (schema)" "at '/watchNamespace'" \
    --set watchNamespace=Team_A
refused "lease timings the operator refuses are refused" "need retryPeriod (2) < renewDeadline (20)" \
    --set leaderElection.renewDeadline=20
out=$(render --set leaderElection.renewDeadline=20 --set leaderElection.enabled=false) &&
    ok "lease timings unchecked without leader election (not passed to the operator)" ||
    bad "lease timings refused without leader election: $out"
out=$(render --set image.tag=12) && has "an integer image.tag is taken as its digits" "$out" \
    'image: "gantry-operator:12"' || bad "--set image.tag=12 refused: $out"

out=$(render --set leaderElection.enabled=false)
has "no leader election: Recreate, GANTRY_LEADER_ELECT false" "$out" "type: Recreate" 'value: "false"'
hasnt "no leader election: no Lease RBAC" "$out" "leader-election" "leases"

out=$(render --set replicaCount=3)
has "replicas 3: leader election, 3 replicas" "$out" "replicas: 3" "name: GANTRY_LEASE_NAMESPACE"

out=$(render --set watchNamespace=team-a --set rbac.aggregateToDefaultRoles=false \
    --set rbac.kueueClusterRead=false)
has "watchNamespace: Role + RoleBinding there, GANTRY_NAMESPACE set" "$out" \
    "=kind: Role" "=kind: RoleBinding" "namespace: team-a" 'value: "team-a"'
hasnt "watchNamespace: no ClusterRole(Binding)" "$out" "=kind: ClusterRoleBinding" "=kind: ClusterRole"
out=$(render --set watchNamespace=team-a --set rbac.aggregateToDefaultRoles=false)
has "watchNamespace: a ClusterRole(Binding) to get Kueue's cluster-scoped objects" "$out" \
    "=kind: ClusterRole" "=kind: ClusterRoleBinding" "gantry-operator-kueue-read" \
    "resources: [resourceflavors, workloadpriorityclasses]" "resources: [priorityclasses]"

out=$(render --set rbac.create=false --set rbac.aggregateToDefaultRoles=false)
hasnt "rbac.create=false: no roles or bindings" "$out" "kind: Role" "kind: ClusterRole" "Binding"
has "rbac.create=false: ServiceAccount still created" "$out" "=kind: ServiceAccount"
out=$(render --set serviceAccount.create=false --set serviceAccount.name=ops-sa)
hasnt "serviceAccount.create=false: no ServiceAccount" "$out" "=kind: ServiceAccount"
has "serviceAccount.create=false: binds and runs as the named one" "$out" \
    "serviceAccountName: ops-sa" "    name: ops-sa"

out=$(render --set health.enabled=true --set health.port=9440)
has "health.enabled: probes on /healthz and /readyz, GANTRY_HEALTH_ADDR" "$out" \
    "path: /healthz" "path: /readyz" "containerPort: 9440" 'value: ":9440"'
out=$(render --set metrics.enabled=true --set metrics.serviceMonitor.enabled=true \
      --set metrics.serviceMonitor.labels.release=prom)
has "metrics: Service + ServiceMonitor on port metrics" "$out" "=kind: Service" \
    "name: t-gantry-operator-metrics" "kind: ServiceMonitor" "port: metrics" "release: prom" \
    'value: ":8080"'
refused "ServiceMonitor without metrics is refused" "needs metrics.enabled=true" \
    --set metrics.serviceMonitor.enabled=true --set metrics.enabled=false


echo "$((checks - fails))/$checks checks passed"
[ "$fails" = 0 ]
