/* watch framing and the list+watch state machine against a scripted testsrv. */
#include "operator/kube/watch.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/test.h"
#include "operator/kube/testsrv.h"

/* ---------------------------------------------------------------- framing */

static char lines[16][128];
static int nlines;

static int collect(void *ud, const char *line, size_t len)
{
    if (nlines < 16)
        snprintf(lines[nlines++], sizeof(lines[0]), "%.*s", (int)len, line);
    return 0;
}

static void test_framer_splits_across_chunks(void)
{
    struct watch_framer f;
    const char *stream = "{\"a\":1}\n{\"b\":\n2}\r\n\n{\"c\":3}\n{\"partial";

    watch_framer_init(&f, 64);
    nlines = 0;
    /* Feed one byte at a time: the worst chunking a server can produce. */
    for (size_t i = 0; i < strlen(stream); i++)
        TEST_EQ_INT(watch_framer_feed(&f, stream + i, 1, collect, NULL), 0);
    TEST_EQ_INT(nlines, 4);
    TEST_EQ_STR(lines[0], "{\"a\":1}");
    TEST_EQ_STR(lines[1], "{\"b\":");
    TEST_EQ_STR(lines[2], "2}\r");
    TEST_EQ_STR(lines[3], "{\"c\":3}");
    TEST_EQ_STR(buf_ptr(&f.line), "{\"partial"); /* kept for the next chunk */
    watch_framer_cleanup(&f);
}

static void test_framer_bounded(void)
{
    struct watch_framer f;
    char big[200];

    memset(big, 'x', sizeof(big));
    watch_framer_init(&f, 64);
    nlines = 0;
    TEST_EQ_INT(watch_framer_feed(&f, big, 60, collect, NULL), 0);
    TEST_EQ_INT(watch_framer_feed(&f, big, 60, collect, NULL), OP_ETOOBIG);
    TEST_EQ_INT(watch_framer_feed(&f, "ok\n", 3, collect, NULL), 0); /* usable after a reset */
    TEST_EQ_STR(lines[0], "ok");
    watch_framer_cleanup(&f);
}

static void test_parse_event(void)
{
    enum kube_event t;
    json_t *o = NULL;
    const char *ok =
        "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9\"}}}";
    TEST_EQ_INT(watch_parse_event(ok, strlen(ok), &t, &o), 0);
    TEST_EQ_INT(t, KUBE_EVENT_BOOKMARK);
    TEST_EQ_STR(kube_object_rv(o), "9");
    json_decref(o);
    TEST_EQ_INT(watch_parse_event("{\"type\":\"NOPE\",\"object\":{}}", 27, &t, &o), OP_EPARSE);
    TEST_EQ_INT(watch_parse_event("{\"type\":\"ADDED\"}", 16, &t, &o), OP_EPARSE);
    TEST_EQ_INT(watch_parse_event("[1,2", 4, &t, &o), OP_EPARSE);
}

/* ---------------------------------------------------------------- list + watch */

static atomic_int nwatch, nlist;
static char watch_rvs[8][32];

static void ev(char *out, size_t n, const char *type, const char *name, const char *rv)
{
    snprintf(out, n,
             "{\"type\":\"%s\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\","
             "\"namespace\":\"ml\",\"resourceVersion\":\"%s\"}}}\n",
             type, name, rv);
}

static struct testsrv *srv_g;
static long open_at_watch = -1;

/* Open connections once they drop to want (client hang-ups are seen asynchronously), else
 * after ms, whatever they are then. */
static long wait_open(long want, int ms)
{
    long n = testsrv_open_connections(srv_g);
    for (; n > want && ms > 0; ms -= 10) {
        usleep(10000);
        n = testsrv_open_connections(srv_g);
    }
    return n;
}

static int handler(void *ud, struct testsrv_conn *c, const struct testsrv_req *r)
{
    char e[512], *p;

    if (!strstr(r->path, "watch=1")) {
        int l = atomic_fetch_add(&nlist, 1);
        if (l == 0)
            testsrv_respond(
                c, 200, NULL,
                "{\"metadata\":{\"resourceVersion\":\"10\"},\"items\":["
                "{\"metadata\":{\"name\":\"a\",\"namespace\":\"ml\",\"resourceVersion\":\"5\"}},"
                "{\"metadata\":{\"name\":\"b\",\"namespace\":\"ml\",\"resourceVersion\":\"6\"}}]}");
        else
            testsrv_respond(
                c, 200, NULL,
                "{\"metadata\":{\"resourceVersion\":\"20\"},\"items\":["
                "{\"metadata\":{\"name\":\"a\",\"namespace\":\"ml\",\"resourceVersion\":\"12\"}},"
                "{\"metadata\":{\"name\":\"c\",\"namespace\":\"ml\",\"resourceVersion\":\"18\"}},"
                "{\"metadata\":{\"name\":\"d\",\"namespace\":\"ml\",\"resourceVersion\":\"19\"}}]"
                "}");
        return 0;
    }
    int n = atomic_fetch_add(&nwatch, 1);
    if (n == 0) /* the list's connection is closed before the watch: only the watch's is open */
        open_at_watch = wait_open(1, 800); /* well under dead_after_s */
    p = strstr(r->path, "resourceVersion=");
    if (n < 8 && p)
        snprintf(watch_rvs[n], sizeof(watch_rvs[n]), "%.*s", (int)strcspn(p + 16, "&"), p + 16);
    switch (n) {
    case 0: /* events then a bookmark, then a normal close (timeoutSeconds) */
        testsrv_chunked_start(c, 200);
        ev(e, sizeof(e), "ADDED", "c", "11");
        testsrv_chunk(c, e);
        ev(e, sizeof(e), "MODIFIED", "a", "12");
        /* Split one event over two chunks. */
        char half[256];
        snprintf(half, sizeof(half), "%.*s", 30, e);
        testsrv_chunk(c, half);
        usleep(20000);
        testsrv_chunk(c, e + 30);
        testsrv_chunk(c, "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":"
                         "{\"resourceVersion\":\"15\"}}}\n");
        testsrv_chunked_end(c);
        return 0;
    case 1: /* the resourceVersion is too old: an ERROR event with a 410 Status */
        testsrv_chunked_start(c, 200);
        testsrv_chunk(c, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                         "\"reason\":\"Expired\",\"message\":\"too old resource version\"}}\n");
        testsrv_chunked_end(c);
        return 0;
    case 2: /* and this time as an HTTP 410 */
        testsrv_respond(c, 410, NULL, "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Gone\"}");
        return 0;
    case 3: /* one event, then silence on an open connection: a dead watch */
        testsrv_chunked_start(c, 200);
        ev(e, sizeof(e), "DELETED", "d", "21");
        testsrv_chunk(c, e);
        TEST_EQ_INT(testsrv_wait_closed(c, 8000), 0); /* the client gave up on it */
        return -1;
    default:
        testsrv_chunked_start(c, 200);
        testsrv_chunk(c, "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":"
                         "{\"resourceVersion\":\"22\"}}}\n");
        usleep(200000);
        testsrv_chunked_end(c);
        return 0;
    }
}

static char seen[32][64];
static int nseen;

static int on_event(void *ud, enum kube_event t, json_t *obj)
{
    const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    json_t *ann = json_object_get(json_object_get(obj, "metadata"), "annotations");
    if (nseen < 32)
        snprintf(seen[nseen++], sizeof(seen[0]), "%s %s %s%s", kube_event_name(t),
                 name ? name : "-", kube_object_rv(obj),
                 json_object_get(ann, "gantry.dev/synthesized-delete") ? " synth" : "");
    if (t == KUBE_EVENT_BOOKMARK && strcmp(kube_object_rv(obj), "22") == 0)
        return 7; /* done: end watch_run with 7 */
    return 0;
}

static void test_list_watch_relist_dead(void)
{
    struct testsrv *srv = srv_g = testsrv_start(handler, NULL);
    struct kube_config cfg = {0};
    struct watch_opts wo = {.path = "/api/v1/namespaces/ml/pods",
                            .timeout_s = 30,
                            .dead_after_s = 2, /* > the 0.8 s the first watch may wait */
                            .backoff_max_ms = 200};
    struct watch_stats st;
    char server[64];
    struct watch *w;

    snprintf(server, sizeof(server), "http://127.0.0.1:%d", testsrv_port(srv));
    cfg.server = server;
    w = watch_new(&cfg, NULL, &wo, on_event, NULL);
    TEST_EQ_INT(watch_run(w), 7);
    watch_get_stats(w, &st);

    const char *want[] = {
        "ADDED a 5", "ADDED b 6",                           /* initial list */
        "ADDED c 11", "MODIFIED a 12", "BOOKMARK - 15",     /* first watch */
        "MODIFIED c 18", "ADDED d 19", "DELETED b 6 synth", /* relist after ERROR 410 */
        /* relist after HTTP 410: nothing changed, so nothing delivered */
        "DELETED d 21",  /* then the connection goes silent */
        "BOOKMARK - 22", /* reconnected from rv 21 */
    };
    int nwant = (int)(sizeof(want) / sizeof(want[0]));
    TEST_EQ_INT(nseen, nwant);
    for (int i = 0; i < nwant && i < nseen; i++)
        TEST_EQ_STR(seen[i], want[i]);
    TEST_EQ_STR(watch_rvs[0], "10"); /* from the list */
    TEST_EQ_STR(watch_rvs[1], "15"); /* from the bookmark */
    TEST_EQ_STR(watch_rvs[2], "20"); /* from the relist */
    TEST_EQ_STR(watch_rvs[3], "20");
    TEST_EQ_STR(watch_rvs[4], "21"); /* after the dead connection */
    TEST_EQ_INT(open_at_watch, 1);
    TEST_EQ_INT(st.relists, 2);
    TEST_EQ_INT(st.synthesized_deletes, 1);
    TEST_EQ_INT(st.bookmarks, 2);
    TEST_EQ_STR(st.rv, "22");
    watch_free(w);
    testsrv_stop(srv);
}

int main(void)
{
    TEST_RUN(test_framer_splits_across_chunks);
    TEST_RUN(test_framer_bounded);
    TEST_RUN(test_parse_event);
    TEST_RUN(test_list_watch_relist_dead);
    return test_summary();
}
