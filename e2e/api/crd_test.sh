#!/usr/bin/env bash
# The TrainingJob CRD against a real kube-apiserver (CTest label `api`).
#
#   GANTRY_TEST_KUBECONFIG=/tmp/gantry-cluster/admin.kubeconfig e2e/api/crd_test.sh
#
# Applies manifests/crds/ with plain `kubectl apply` (client-side, so the last-applied annotation
# must fit), applies every sample, checks defaults, short name and printer columns, then checks
# that each e2e/api/testdata/invalid-*.yaml is refused with a message naming the field on its
# "# expect:" line, that replicas cannot change while the job runs (but can once suspended, or
# with spec.elasticPolicy, also through the scale subresource), and that status is a subresource. Works in its own namespace, deleted on exit; the CRD stays.
# Exits 77 (skipped) when GANTRY_TEST_KUBECONFIG is unset. kubectl: $GANTRY_KUBECTL, else the one
# hack/cluster.sh builds ($GANTRY_CACHE/k8s-<version>/bin/kubectl), else PATH.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e/api/lib.sh
. "$here/lib.sh"
api_require_cluster
export KUBECONFIG=$GANTRY_TEST_KUBECONFIG
api_find_kubectl

ns=ctl-crd-$$-$RANDOM
cleanup() { kc delete namespace "$ns" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

crd=$root/manifests/crds/gantry.dev_trainingjobs.yaml
size=$(wc -c <"$crd")
if [ "$size" -lt 262144 ]; then ok "CRD is $size bytes (< 256 KiB)"; else bad "CRD is $size bytes"; fi
kc apply -f "$crd" >/dev/null
kc wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
ok "plain kubectl apply of the CRD; Established"
kc create namespace "$ns" >/dev/null

# Every sample is accepted (retry briefly: a just-updated CRD can take a moment to be served).
for f in "$root"/manifests/samples/*.yaml; do
    for _ in 1 2 3 4 5; do
        if out=$(k apply -f "$f" 2>&1); then break; fi
        sleep 1
    done
    if [ -n "${out##*created*}" ] && [ -n "${out##*configured*}" ] && [ -n "${out##*unchanged*}" ]; then
        bad "sample $(basename "$f") refused: $out"
    else
        ok "sample $(basename "$f") accepted"
    fi
done

# Defaults from the schema (same as operator/tj.c).
got=$(k get tj minimal -o jsonpath='{.spec.replicas} {.spec.port} {.spec.image} {.spec.runPolicy.backoffLimit} {.spec.runPolicy.cleanPodPolicy} {.spec.training.model.hidden} {.spec.training.model.heads} {.spec.checkpoint.path}')
want="1 29500 gantry-worker:0.1.0 3 Running 128 4 /checkpoints"
if [ "$got" = "$want" ]; then ok "defaults: $got"; else bad "defaults: got '$got', want '$want'"; fi

# Short name and printer columns.
header=$(k get tj 2>&1) || true # no `| head`: with pipefail a SIGPIPE would end the test
header=${header%%$'\n'*}
if [[ $header =~ NAME[[:space:]]+PHASE[[:space:]]+READY[[:space:]]+RESTARTS[[:space:]]+PROGRESS[[:space:]]+ETA[[:space:]]+ACCURACY[[:space:]]+AGE ]]; then
    ok "kubectl get tj columns: $header"
else
    bad "kubectl get tj columns: '$header'"
fi

# Invalid manifests are refused, naming the field.
for f in "$here"/testdata/invalid-*.yaml; do
    field=$(sed -n 's/^# expect: //p' "$f")
    if out=$(k apply -f "$f" 2>&1); then
        bad "$(basename "$f") was accepted: $out"
    elif [[ $out == *"$field"* ]]; then
        ok "$(basename "$f") refused naming $field"
    else
        bad "$(basename "$f") refused without naming $field: $out"
    fi
done
if out=$(k apply -f "$here/testdata/valid-name-max.yaml" 2>&1); then
    ok "the longest name allowed for 100 replicas (53 characters) is accepted"
else
    bad "valid-name-max.yaml refused: $out"
fi
if out=$(k apply -f "$here/testdata/valid-nproc.yaml" 2>&1); then
    ok "nprocPerNode 4 on CPU pods, and 2 with 2 GPUs, are accepted"
else
    bad "valid-nproc.yaml refused: $out"
fi
if out=$(k apply -f "$here/testdata/valid-eval.yaml" 2>&1); then
    ok "evalInterval on data.evalFraction with early stopping on macro_f1, and classWeights, are accepted"
else
    bad "valid-eval.yaml refused: $out"
fi

if out=$(k apply -f "$here/testdata/valid-text-pair.yaml" 2>&1); then
    ok "a text pair job (data.textField, textPairField, labelField) is accepted"
else
    bad "valid-text-pair.yaml refused: $out"
fi
if out=$(k apply -f "$here/testdata/valid-init-from.yaml" 2>&1); then
    ok "initFrom (fine-tuning from another job's checkpoints) is accepted"
else
    bad "valid-init-from.yaml refused: $out"
fi

# replicas is immutable while the job runs, and can change once it is suspended.
k patch tj spam --subresource=status --type=merge -p '{"status":{"phase":"Running"}}' >/dev/null
if out=$(k patch tj spam --type=merge -p '{"spec":{"replicas":8}}' 2>&1); then
    bad "changing replicas while Running was accepted"
elif [[ $out == *spec.replicas* ]]; then
    ok "changing replicas while Running refused naming spec.replicas"
else
    bad "changing replicas refused without naming spec.replicas: $out"
fi
if k patch tj spam --type=merge -p '{"spec":{"training":{"epochs":9}}}' >/dev/null 2>&1; then
    ok "other spec fields can change while Running"
else
    bad "changing spec.training.epochs while Running was refused"
fi
k patch tj spam --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
if k patch tj spam --type=merge -p '{"spec":{"replicas":8}}' >/dev/null 2>&1; then
    ok "replicas can change once suspended"
else
    bad "changing replicas of a suspended job was refused"
fi

# With spec.elasticPolicy, replicas may change while the job runs, within the bounds; the scale
# subresource (kubectl scale, an autoscaler) reads and writes it.
cat <<'YAML' | k apply -f - >/dev/null
apiVersion: gantry.dev/v1alpha1
kind: TrainingJob
metadata: {name: elastic}
spec: {replicas: 2, elasticPolicy: {minReplicas: 1, maxReplicas: 4}}
YAML
k patch tj elastic --subresource=status --type=merge \
    -p '{"status":{"phase":"Running","currentReplicas":2,"selector":"gantry.dev/job-name=elastic"}}' >/dev/null
if out=$(k scale tj elastic --replicas=3 2>&1) &&
    [ "$(k get tj elastic -o jsonpath='{.spec.replicas}')" = 3 ]; then
    ok "kubectl scale of an elastic job while Running: spec.replicas 3"
else
    bad "kubectl scale of an elastic job while Running: $out"
fi
got=$(k get --raw "/apis/gantry.dev/v1alpha1/namespaces/$ns/trainingjobs/elastic/scale")
if [[ $got == *'"replicas":3'* ]] && [[ $got == *'"replicas":2'* ]] &&
    [[ $got == *'"selector":"gantry.dev/job-name=elastic"'* ]]; then
    ok "the scale subresource: spec 3, status 2 (status.currentReplicas), the pods' selector"
else
    bad "the scale subresource: $got"
fi
if out=$(k scale tj elastic --replicas=5 2>&1); then
    bad "scaling past elasticPolicy.maxReplicas was accepted"
elif [[ $out == *spec.replicas* ]]; then
    ok "scaling past elasticPolicy.maxReplicas refused naming spec.replicas"
else
    bad "scaling past maxReplicas refused without naming spec.replicas: $out"
fi
if out=$(k scale tj spam --replicas=2 2>&1); then # suspended (above): allowed
    k patch tj spam --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null
    if out=$(k scale tj spam --replicas=3 2>&1); then
        bad "kubectl scale of a job without elasticPolicy while Running was accepted"
    else
        ok "kubectl scale of a job without elasticPolicy while Running refused"
    fi
else
    bad "kubectl scale of a suspended job refused: $out"
fi

# status is a subresource: writes to the main resource do not touch it; bad phases are refused.
k patch tj minimal --type=merge -p '{"status":{"phase":"Failed"}}' >/dev/null 2>&1 || true
got=$(k get tj minimal -o jsonpath='{.status.phase}')
if [ -z "$got" ]; then ok "status ignored on the main resource"; else bad "status.phase became '$got'"; fi
if out=$(k patch tj minimal --subresource=status --type=merge -p '{"status":{"phase":"Exploded"}}' 2>&1); then
    bad "status.phase Exploded accepted"
elif [[ $out == *status.phase* ]]; then
    ok "status.phase is an enum"
else
    bad "bad status.phase refused without naming it: $out"
fi

# the restart counts the operator writes survive the API server's pruning (they decide backoffLimit)
k patch tj minimal --subresource=status --type=merge \
    -p '{"status":{"restarts":3,"disruptions":1,"ignoredRestarts":1}}' >/dev/null
got=$(k get tj minimal -o jsonpath='{.status.restarts}/{.status.disruptions}/{.status.ignoredRestarts}')
if [ "$got" = 3/1/1 ]; then
    ok "status.restarts, disruptions and ignoredRestarts are kept"
else
    bad "status restart counts read back as '$got', want 3/1/1"
fi
# and each task's evaluation metric in status.progress
k patch tj minimal --subresource=status --type=merge \
    -p '{"status":{"progress":{"evalStep":40,"evalMicroF1":0.5,"evalPearson":0.75}}}' >/dev/null
got=$(k get tj minimal -o jsonpath='{.status.progress.evalMicroF1}/{.status.progress.evalPearson}')
if [ "$got" = 0.5/0.75 ]; then
    ok "status.progress.evalMicroF1 and evalPearson are kept"
else
    bad "status.progress eval metrics read back as '$got', want 0.5/0.75"
fi

api_summary
