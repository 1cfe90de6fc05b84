# shellcheck shell=bash
# shellcheck disable=SC2034  # E2E_SCENARIO_FAILED, INSTALLED, CRD_EXISTED: read by the sourcing script
# Scenario 6: helm uninstall leaves no operator objects (Deployment, pods, ServiceAccount,
# Services, Roles, ClusterRoles and their bindings). The CRD stays, as Helm does with crds/
# (deleting it would delete every user's TrainingJobs); the suite removes it at the end when it
# was the one that installed it.

scenario_6() {
    local left
    check "helm uninstall $RELEASE --wait" "$HELM" uninstall "$RELEASE" -n "$RELEASE_NS" --wait --timeout 120s
    INSTALLED=0
    check "the operator pods are gone" wait_until 120 bash -c \
        "[ -z \"\$('$KUBECTL' -n '$RELEASE_NS' get pods -l app.kubernetes.io/instance=$RELEASE -o name)\" ]"
    left=$(kc get deployments,replicasets,pods,serviceaccounts,services,configmaps,secrets,roles,rolebindings -A \
            -l "app.kubernetes.io/instance=$RELEASE" -o name 2>/dev/null
        kc get clusterroles,clusterrolebindings -l "app.kubernetes.io/instance=$RELEASE" -o name 2>/dev/null
        kc get clusterroles,clusterrolebindings -o name 2>/dev/null | grep -i "gantry" | grep -v 'gantry:coredns')
    check "no object of the release is left${left:+: $(tr '\n' ' ' <<<"$left")}" test -z "$left"
    check "the CRD stays (Helm never deletes crds/)" kc get crd trainingjobs.gantry.dev
}
