# shellcheck shell=bash
# shellcheck disable=SC2034  # E2E_SCENARIO_FAILED, INSTALLED, CRD_EXISTED: read by the sourcing script
# helm install of charts/gantry, as the README tells a user; sourced by e2e/run.sh and
# hack/demo.sh. Sets INSTALLED=1 and CRD_EXISTED (0 when this install brought the CRD).

helm_install() {
    if kc get crd trainingjobs.gantry.dev >/dev/null 2>&1; then CRD_EXISTED=1; else CRD_EXISTED=0; fi
    if "$HELM" status "$RELEASE" -n "$RELEASE_NS" >/dev/null 2>&1; then
        note "release $RELEASE already in $RELEASE_NS (a previous run?): uninstalling it first"
        "$HELM" uninstall "$RELEASE" -n "$RELEASE_NS" --wait --timeout 120s >/dev/null 2>&1 || true
    fi
    local out
    # The e2e jobs train for only 15-45 s, so rank 0's /progress is read every 2 s instead of the
    # default 15 s: otherwise a job can succeed before status.progress/lastCheckpoint are ever read.
    out=$("$HELM" install "$RELEASE" "$ROOT/charts/gantry" -n "$RELEASE_NS" --create-namespace \
        --set 'operator.extraArgs={--progress-interval=2}' --wait --timeout 180s 2>&1)
    local rc=$?
    printf '%s\n' "$out" >"$ARTIFACTS/helm-install.txt"
    if [ $rc = 0 ]; then
        INSTALLED=1
        ok "helm install $RELEASE charts/gantry --wait"
    else
        INSTALLED=1 # maybe partly: the teardown uninstalls
        bad "helm install failed: $(tail -3 <<<"$out" | tr '\n' ' ')"
        save_artifacts "$ARTIFACTS/install" "$RELEASE_NS"
        return 1
    fi
    check "the TrainingJob CRD is Established" \
        kc wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=30s
    check "the operator Deployment is Available" \
        kc -n "$RELEASE_NS" wait --for=condition=Available deployment -l app.kubernetes.io/instance="$RELEASE" --timeout=120s
    check "kubectl get tj works (short name)" kc -n "$NS" get tj
    OPERATOR_POD=$(kc -n "$RELEASE_NS" get pods -l app.kubernetes.io/instance="$RELEASE" -o 'jsonpath={.items[0].metadata.name}')
    note "operator pod $OPERATOR_POD"
}

operator_pods() { # names of the operator's pods that are not being deleted
    kc -n "$RELEASE_NS" get pods -l app.kubernetes.io/instance="$RELEASE" \
        -o 'jsonpath={range .items[*]}{.metadata.name}{" "}{.metadata.deletionTimestamp}{"\n"}{end}' 2>/dev/null |
        awk 'NF == 1 {print $1}'
}
