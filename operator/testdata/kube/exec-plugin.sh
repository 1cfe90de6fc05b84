#!/bin/sh
# A fake exec credential plugin for kube_config_test: prints an ExecCredential whose token is
# argument 2, expiring at $PLUGIN_EXPIRY, after checking that KUBERNETES_EXEC_INFO was passed.
case "$KUBERNETES_EXEC_INFO" in *ExecCredential*) ;; *) echo "no exec info" >&2; exit 3 ;; esac
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}\n' "$2" "$PLUGIN_EXPIRY"
