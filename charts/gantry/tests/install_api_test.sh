#!/usr/bin/env bash
# The install paths users take, against a real kube-apiserver (CTest label `api`):
#   - `kubectl apply -f manifests/install.yaml` (plain client-side apply, no --server-side): accepted,
#     a second apply changes nothing, no PodSecurity warning in the restricted namespace;
#   - `helm template --include-crds | kubectl apply --dry-run=server` accepted, with default values
#     and with watchNamespace + replicas 2 + metrics;
#   - every manifests/examples/ file accepted by --dry-run=server (the CRD's schema and CEL);
#   - `helm install` creates the ServiceAccount, (Cluster)Role(Binding)s and Deployment;
#     `helm uninstall` leaves nothing labelled with the release except the CRD.
#
#   GANTRY_TEST_KUBECONFIG=/tmp/gantry-cluster/admin.kubeconfig charts/gantry/tests/install_api_test.sh
# Exits 77 when GANTRY_TEST_KUBECONFIG is unset. Leaves the CRD (shared with other tests); removes
# gantry-system only when this test created it.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
chart=$root/charts/gantry
rel=$id relns=$id-rel exns=$id-ex created_system=0
cleanup() {
    "$helm" uninstall "$rel" -n "$relns" >/dev/null 2>&1 || true
    kc delete namespace "$relns" "$exns" --wait=false >/dev/null 2>&1 || true
    if [ "$created_system" = 1 ]; then
        kc delete namespace gantry-system --wait=false >/dev/null 2>&1 || true
        kc delete clusterrole,clusterrolebinding -l app.kubernetes.io/instance=gantry >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

# ---- plain manifests
kc get namespace gantry-system >/dev/null 2>&1 || created_system=1
if out=$(kc apply -f "$root/manifests/install.yaml" 2>&1); then
    ok "kubectl apply -f manifests/install.yaml ($(grep -c ' created\| configured\| unchanged' <<<"$out") objects)"
else
    bad "kubectl apply -f manifests/install.yaml: $out"
fi
grep -q "would violate PodSecurity" <<<"$out" && bad "PodSecurity warning: $out" ||
    ok "no PodSecurity warning in the restricted namespace"
kc wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
out=$(kc apply -f "$root/manifests/install.yaml" 2>&1) || true
n_changed=$(grep -cv ' unchanged$' <<<"$out" || true)
[ "$n_changed" = 0 ] && ok "second apply: everything unchanged" || bad "second apply changed: $out"
got=$(kc -n gantry-system get deploy gantry-operator -o jsonpath='{.spec.template.spec.serviceAccountName} {.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem}')
[ "$got" = "gantry-operator gantry-operator:0.1.0 true" ] && ok "Deployment as stored: $got" || bad "Deployment: $got"
for v in "list trainingjobs.gantry.dev" "update trainingjobs.gantry.dev --subresource=status" "create pods" \
         "delete pods" "watch secrets" "patch events.events.k8s.io"; do
    # shellcheck disable=SC2086
    a=$(kc auth can-i $v --as system:serviceaccount:gantry-system:gantry-operator -n default 2>/dev/null || true)
    [ "$a" = yes ] || { bad "install.yaml's ServiceAccount cannot $v"; continue; }
done
a=$(kc auth can-i get nodes --as system:serviceaccount:gantry-system:gantry-operator 2>/dev/null || true)
[ "$a" = no ] && ok "install.yaml's ServiceAccount has the operator's verbs and not others (get nodes: no)" ||
    bad "install.yaml's ServiceAccount may get nodes"

# ---- helm template | kubectl apply --dry-run=server
kc create namespace "$relns" >/dev/null
kc create namespace "$exns" >/dev/null
for vals in "" "--set watchNamespace=$exns --set replicaCount=2 --set metrics.enabled=true --set health.enabled=true"; do
    # shellcheck disable=SC2086
    if out=$("$helm" template "$rel" "$chart" -n "$relns" --include-crds $vals |
             kc apply --dry-run=server -f - 2>&1); then
        ok "helm template ${vals:-(defaults)} | kubectl apply --dry-run=server"
    else
        bad "helm template $vals | kubectl apply --dry-run=server: $out"
    fi
done
for f in "$root"/manifests/examples/*.yaml; do
    if out=$(kc apply --dry-run=server -n "$exns" -f "$f" 2>&1); then
        ok "example $(basename "$f") accepted (dry-run=server)"
    else
        bad "example $(basename "$f"): $out"
    fi
done

# ---- helm install / uninstall
if out=$("$helm" install "$rel" "$chart" -n "$relns" 2>&1); then
    ok "helm install $rel"
else
    bad "helm install: $out"
fi
grep -q "kubectl -n $relns rollout status deployment/$rel-gantry-operator" <<<"$out" &&
    ok "NOTES say how to check the install" || bad "NOTES: $out"
sel=app.kubernetes.io/instance=$rel
got=$(kc get sa,deploy,role,rolebinding,lease -n "$relns" -l "$sel" -o name | sort | tr '\n' ' ')
want="deployment.apps/$rel-gantry-operator lease.coordination.k8s.io/gantry-operator role.rbac.authorization.k8s.io/$rel-gantry-operator-leader-election rolebinding.rbac.authorization.k8s.io/$rel-gantry-operator-leader-election serviceaccount/$rel-gantry-operator "
[ "$got" = "$want" ] && ok "helm install: namespaced objects $got" || bad "helm install namespaced objects: $got"
got=$(kc get clusterrole,clusterrolebinding -l "$sel" -o name | sort | tr '\n' ' ')
want="clusterrole.rbac.authorization.k8s.io/$rel-gantry-operator clusterrole.rbac.authorization.k8s.io/$rel-gantry-trainingjobs-edit clusterrole.rbac.authorization.k8s.io/$rel-gantry-trainingjobs-view clusterrolebinding.rbac.authorization.k8s.io/$rel-gantry-operator "
[ "$got" = "$want" ] && ok "helm install: cluster objects $got" || bad "helm install cluster objects: $got"
kc create rolebinding "$id-edit" -n "$exns" --clusterrole edit --user "$id-user" >/dev/null
wait_for "aggregation: the built-in edit role may create TrainingJobs" 10 bash -c \
    "[ \"\$('$kubectl' auth can-i create trainingjobs.gantry.dev --as $id-user -n $exns)\" = yes ]"
if out=$("$helm" upgrade "$rel" "$chart" -n "$relns" --set operator.logLevel=debug 2>&1); then
    ok "helm upgrade (values change)"
else
    bad "helm upgrade: $out"
fi
if out=$("$helm" uninstall "$rel" -n "$relns" --wait --timeout 60s 2>&1); then ok "helm uninstall"; else bad "helm uninstall: $out"; fi
left=$(kc get all,sa,role,rolebinding,configmap,secret,lease -n "$relns" -l "$sel" -o name 2>/dev/null
       kc get clusterrole,clusterrolebinding -l "$sel" -o name 2>/dev/null)
[ -z "$left" ] && ok "nothing of the release left after uninstall" || bad "left after uninstall: $left"
kc get crd trainingjobs.gantry.dev >/dev/null 2>&1 && ok "the CRD stays after uninstall (documented)" ||
    bad "the CRD was removed by uninstall"
summary
