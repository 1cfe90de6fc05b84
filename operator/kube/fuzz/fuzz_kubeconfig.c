/* libFuzzer target: kubeconfig YAML -> kube_config (kube_yaml_to_json + context resolution). */
#include <stddef.h>
#include <stdint.h>

#include "operator/kube/kube_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kube_config *c = NULL, *d;
    char err[512];

    if (size > KUBE_CONFIG_MAX_FILE)
        return 0;
    if (kube_config_from_yaml((const char *)data, size, "fuzz.yaml", "/nonexistent", NULL, &c, err,
                              sizeof(err)) == 0) {
        d = kube_config_dup(c); /* exercise copy/free of every field that was set */
        kube_config_free(d);
        kube_config_free(c);
    }
    return 0;
}
