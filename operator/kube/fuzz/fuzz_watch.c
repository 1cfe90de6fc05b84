/*
 * libFuzzer target: watch stream framing and event parsing. The first byte picks the chunk size,
 * so the same bytes are framed at many different split points; the line limit is small so the
 * over-limit path is reached.
 */
#include <stddef.h>
#include <stdint.h>

#include "operator/kube/watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_line(void *ud, const char *line, size_t len)
{
    enum kube_event t;
    json_t *obj = NULL;
    char key[256];

    if (watch_parse_event(line, len, &t, &obj) == 0) {
        (void)kube_event_name(t);
        (void)kube_object_rv(obj);
        (void)!kube_object_key(obj, key, sizeof(key));
        json_decref(obj);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct watch_framer f;
    size_t chunk;

    if (size == 0)
        return 0;
    chunk = (size_t)data[0] % 64 + 1;
    data++;
    size--;
    watch_framer_init(&f, 4096);
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        (void)!watch_framer_feed(&f, (const char *)data + off, n, on_line, NULL);
    }
    watch_framer_cleanup(&f);
    return 0;
}
