/* libFuzzer target: API error bodies (Status) and object helpers (key, RV, field projection). */
#include <stddef.h>
#include <stdint.h>

#include "operator/kube/informer.h"
#include "operator/kube/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const fields[] = {
        "status.phase", "metadata.labels", "spec", "status.conditions", "a.b.c.d", "", ".", NULL};
    static const long codes[] = {0, 200, 400, 401, 403, 404, 409, 410, 422, 429, 500, 503};
    struct kube_status st;
    json_t *doc, *p;
    char key[128];

    if (size == 0)
        return 0;
    (void)kube_status_parse((const char *)data + 1, size - 1, codes[data[0] % 12], &st);
    doc = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (doc) {
        (void)!kube_object_key(doc, key, sizeof(key));
        (void)kube_object_rv(doc);
        p = kube_project(doc, fields);
        json_decref(p);
        json_decref(doc);
    }
    return 0;
}
