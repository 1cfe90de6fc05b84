#include "operator/kube/kube_config.h"

#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/test.h"
#include "operator/kube/kube_err.h"

#define TD KUBE_TESTDATA /* operator/testdata/kube, set by CMake */

static char err[1024];

static struct kube_config *load(const char *paths, const char *ctx)
{
    struct kube_config *c = NULL;
    err[0] = 0;
    if (kube_config_from_kubeconfig(paths, ctx, &c, err, sizeof(err)))
        return NULL;
    return c;
}

static void test_yaml_to_json(void)
{
    const char *y = "a: 1\nb: [x, 'y', ~]\nc: {d: null, e: \"\"}\nf:\n";
    json_t *j = NULL;
    TEST_EQ_INT(kube_yaml_to_json(y, strlen(y), &j, err, sizeof(err)), 0);
    TEST_EQ_STR(json_string_value(json_object_get(j, "a")), "1");
    TEST_EQ_STR(json_string_value(json_array_get(json_object_get(j, "b"), 1)), "y");
    TEST_CHECK(json_is_null(json_array_get(json_object_get(j, "b"), 2)));
    TEST_CHECK(json_is_null(json_object_get(json_object_get(j, "c"), "d")));
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(j, "c"), "e")), "");
    TEST_CHECK(json_is_null(json_object_get(j, "f")));
    json_decref(j);

    const char *alias = "a: &x [1, 2]\nb: *x\n";
    TEST_EQ_INT(kube_yaml_to_json(alias, strlen(alias), &j, err, sizeof(err)), OP_EPARSE);
    TEST_CHECK(strstr(err, "aliases") != NULL);

    char deep[400];
    memset(deep, '[', 100);
    deep[100] = 0;
    TEST_EQ_INT(kube_yaml_to_json(deep, strlen(deep), &j, err, sizeof(err)), OP_EPARSE);
    TEST_CHECK(strstr(err, "deeper") != NULL);
}

static void test_basic_inline_certs(void)
{
    struct kube_config *c = load(TD "/basic.yaml", NULL);
    TEST_CHECK(c != NULL);
    if (!c)
        return;
    TEST_EQ_STR(c->server, "https://127.0.0.1:6443"); /* trailing slash dropped */
    TEST_EQ_STR(c->namespace, "ml");
    TEST_EQ_STR(c->context, "dev");
    TEST_EQ_STR(c->tls_server_name, "kubernetes.default");
    TEST_CHECK(!c->insecure);
    TEST_CHECK(c->ca_data.len > 20 && memcmp(c->ca_data.data, "-----BEGIN", 10) == 0);
    TEST_EQ_STR((char *)c->cert_data.data, "CERTPEM\n");
    TEST_EQ_STR((char *)c->key_data.data, "KEYPEM\n");
    TEST_CHECK(c->cert_file == NULL && c->token == NULL);
    kube_config_free(c);

    c = load(TD "/basic.yaml", "other"); /* --context overrides current-context */
    TEST_CHECK(c && c->token && strcmp(c->token, "abc.def") == 0);
    TEST_CHECK(c && strcmp(c->namespace, "default") == 0);
    kube_config_free(c);
}

static void test_merge_first_wins(void)
{
    struct kube_config *c = load(TD "/merge-a.yaml:" TD "/missing.yaml:" TD "/merge-b.yaml", NULL);
    TEST_CHECK(c != NULL);
    if (!c) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    TEST_EQ_STR(c->context, "from-b"); /* current-context from the first file setting it */
    TEST_EQ_STR(c->token, "from-a");   /* user "shared": first file wins */
    TEST_EQ_STR(c->server, "https://[::1]:6443");
    TEST_CHECK(c->insecure);
    TEST_EQ_STR(c->ca_file, TD "/certs/ca.crt"); /* relative to merge-b.yaml */
    kube_config_free(c);
}

static void test_token_file_and_relative_paths(void)
{
    struct kube_config *c = load(TD "/token-file.yaml", NULL);
    TEST_CHECK(c != NULL);
    if (!c)
        return;
    TEST_EQ_STR(c->token_file, TD "/token.txt");
    TEST_EQ_STR(c->cert_file, TD "/certs/client.crt");
    TEST_EQ_STR(c->key_file, "/abs/client.key");
    TEST_EQ_INT(kube_config_refresh(c, false, err, sizeof(err)), 0);
    TEST_EQ_STR(c->token, "file-token-1"); /* newline trimmed */

    /* A rotated token is picked up on the periodic re-read (forced here). */
    char dir[] = "/tmp/kube-cfg-XXXXXX", path[256];
    TEST_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/token", dir);
    FILE *f = fopen(path, "w");
    fputs("rotated-1", f);
    fclose(f);
    free(c->token_file);
    c->token_file = strdup(path);
    TEST_EQ_INT(kube_config_refresh(c, false, err, sizeof(err)), 0);
    TEST_EQ_STR(c->token, "file-token-1"); /* not re-read before KUBE_TOKEN_REREAD_S */
    c->token_read_at -= KUBE_TOKEN_REREAD_S;
    TEST_EQ_INT(kube_config_refresh(c, false, err, sizeof(err)), 0);
    TEST_EQ_STR(c->token, "rotated-1");
    unlink(path);
    TEST_EQ_INT(kube_config_refresh(c, true, err, sizeof(err)), OP_EAUTH);
    TEST_CHECK(strstr(err, path) != NULL);
    rmdir(dir);
    kube_config_free(c);
}

static void test_exec_plugin(void)
{
    struct kube_config *c = load(TD "/exec.yaml", NULL), *d;
    TEST_CHECK(c && c->exec);
    if (!c || !c->exec)
        return;
    TEST_EQ_INT(kube_config_refresh(c, false, err, sizeof(err)), 0);
    TEST_EQ_STR(c->token, "exec-token-42");
    TEST_CHECK(c->exec_expiry == 4070908800); /* 2099-01-01T00:00:00Z */
    d = kube_config_dup(c);
    TEST_EQ_STR(d->exec->args[1], "exec-token-42");
    kube_config_free(d);

    /* An expired credential is fetched again; a failing plugin is a clear OP_EAUTH. */
    free(c->exec->args[1]);
    c->exec->args[1] = strdup("exec-token-43");
    c->exec_expiry = time(NULL) + 5;
    TEST_EQ_INT(kube_config_refresh(c, false, err, sizeof(err)), 0);
    TEST_EQ_STR(c->token, "exec-token-43");
    free(c->exec->command);
    c->exec->command = strdup("./no-such-plugin");
    TEST_EQ_INT(kube_config_refresh(c, true, err, sizeof(err)), OP_EAUTH);
    TEST_CHECK(strstr(err, "no-such-plugin") != NULL);
    kube_config_free(c);
}

static void test_clear_errors(void)
{
    TEST_CHECK(load(TD "/bad-missing-user.yaml", NULL) == NULL);
    TEST_CHECK(strstr(err, "bad-missing-user.yaml") && strstr(err, "user \"bob\" not found"));
    TEST_CHECK(load(TD "/bad-yaml.yaml", NULL) == NULL);
    TEST_CHECK(strstr(err, "bad-yaml.yaml") && strstr(err, "line "));
    TEST_CHECK(load(TD "/nope.yaml", NULL) == NULL);
    TEST_CHECK(strstr(err, "nope.yaml") && strstr(err, "No such file"));
    TEST_CHECK(load(TD "/basic.yaml", "nosuch") == NULL);
    TEST_CHECK(strstr(err, "context \"nosuch\" not found"));

    struct kube_config *c = NULL;
    const char *y = "current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
                    "clusters: [{name: c, cluster: {server: 'https://x', insecure-skip-tls-verify: "
                    "maybe}}]\n";
    TEST_EQ_INT(kube_config_from_yaml(y, strlen(y), "t.yaml", NULL, NULL, &c, err, sizeof(err)),
                OP_ECONFIG);
    TEST_CHECK(strstr(err, "insecure-skip-tls-verify"));
    y = "current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://x', certificate-authority-data: '%%'}}]\n";
    TEST_EQ_INT(kube_config_from_yaml(y, strlen(y), "t.yaml", NULL, NULL, &c, err, sizeof(err)),
                OP_ECONFIG);
    TEST_CHECK(strstr(err, "base64"));
    y = "current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
        "clusters: [{name: c, cluster: {server: 'x:6443'}}]\n";
    TEST_EQ_INT(kube_config_from_yaml(y, strlen(y), "t.yaml", NULL, NULL, &c, err, sizeof(err)),
                OP_ECONFIG);
    TEST_CHECK(strstr(err, "https://host:port"));
}

static void test_in_cluster(void)
{
    struct kube_config *c = NULL;
    unsetenv("KUBERNETES_SERVICE_HOST");
    TEST_EQ_INT(kube_config_in_cluster(TD "/sa", &c, err, sizeof(err)), OP_ECONFIG);
    TEST_CHECK(strstr(err, "KUBERNETES_SERVICE_HOST"));
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    TEST_EQ_INT(kube_config_in_cluster(TD "/sa", &c, err, sizeof(err)), 0);
    if (c) {
        TEST_EQ_STR(c->server, "https://[fd00::1]:443");
        TEST_EQ_STR(c->namespace, "gantry-system");
        TEST_EQ_STR(c->token, "sa-token-1");
        TEST_EQ_STR(c->ca_file, TD "/sa/ca.crt");
        kube_config_free(c);
        c = NULL;
    }
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    TEST_EQ_INT(kube_config_in_cluster(TD "/nosa", &c, err, sizeof(err)), OP_ECONFIG);
    TEST_CHECK(strstr(err, "nosa/ca.crt") && strstr(err, "automountServiceAccountToken"));
    unsetenv("KUBERNETES_SERVICE_HOST");
}

int main(void)
{
    TEST_RUN(test_yaml_to_json);
    TEST_RUN(test_basic_inline_certs);
    TEST_RUN(test_merge_first_wins);
    TEST_RUN(test_token_file_and_relative_paths);
    TEST_RUN(test_exec_plugin);
    TEST_RUN(test_clear_errors);
    TEST_RUN(test_in_cluster);
    return test_summary();
}
