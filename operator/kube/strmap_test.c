#include "operator/kube/strmap.h"

#include <stdint.h>
#include <stdlib.h>

#include "common/test.h"

static void test_put_get_del_grow_iterate(void)
{
    struct strmap m;
    struct strmap_iter it;
    char key[32];
    long sum = 0, n = 0;

    strmap_init(&m);
    for (intptr_t i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "ns/pod-%ld", (long)i);
        TEST_CHECK(strmap_put(&m, key, (void *)(i + 1)) == NULL);
    }
    TEST_EQ_INT(strmap_len(&m), 5000);
    TEST_EQ_INT((intptr_t)strmap_get(&m, "ns/pod-4242"), 4243);
    TEST_EQ_INT((intptr_t)strmap_put(&m, "ns/pod-4242", (void *)7), 4243); /* old value back */
    TEST_EQ_INT((intptr_t)strmap_get(&m, "ns/pod-4242"), 7);
    TEST_CHECK(!strmap_has(&m, "ns/nope"));
    for (intptr_t i = 0; i < 5000; i += 2) {
        snprintf(key, sizeof(key), "ns/pod-%ld", (long)i);
        TEST_CHECK(strmap_del(&m, key) != NULL);
    }
    TEST_CHECK(strmap_del(&m, "ns/pod-0") == NULL);
    TEST_EQ_INT(strmap_len(&m), 2500);
    for (struct strmap_entry *e = strmap_first(&m, &it); e; e = strmap_next(&m, &it)) {
        n++;
        sum += (long)(intptr_t)e->val;
    }
    TEST_EQ_INT(n, 2500); /* every remaining entry exactly once */
    /* odd i in 1..4999 hold i+1, except 4242 (even, deleted): sum of 2..5000 step 2 */
    TEST_EQ_INT(sum, 2500L * 2501);
    strmap_cleanup(&m, NULL);
    strmap_init(&m);
    TEST_CHECK(strmap_first(&m, &it) == NULL);
    strmap_put(&m, "a", malloc(8));
    strmap_cleanup(&m, free); /* destructor runs: ASan would report a leak otherwise */
}

int main(void)
{
    TEST_RUN(test_put_get_del_grow_iterate);
    return test_summary();
}
