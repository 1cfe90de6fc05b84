// The local cluster's sandbox image program (see hack/cluster-full.sh). No dependencies.
module gantry.dev/hack/k8s-pause

go 1.22
