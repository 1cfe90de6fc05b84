/*
 * dist_smoke.c - a minimal distributed program for launcher tests and by-hand checks:
 * rendezvous from the environment, an exact all-reduce, a barrier, then exit 0.
 *   gantry-run --nproc 4 -- dist_smoke
 *   dist_smoke --fail-rank R     rank R exits 5 right after the rendezvous (the others block in
 *                                the all-reduce until the launcher stops them)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/coll.h"
#include "worker/dist.h"

/* As a worker does on a fatal error: exit at once with the error's status, no cleanup. */
static void die(int status)
{
    fflush(stdout);
    _exit(status);
}

int main(int argc, char **argv)
{
    struct dist_env e;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    int fail_rank = argc == 3 && strcmp(argv[1], "--fail-rank") == 0 ? atoi(argv[2]) : -1;
    float v[1000];
    int rc;

    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: gantry-run --nproc N -- dist_smoke [--fail-rank R]\n"
               "Rendezvous from the environment (as gantry-worker), one exact all-reduce and a "
               "barrier,\nthen exit 0. --fail-rank R: rank R exits 5 right after the "
               "rendezvous.\n");
        return 0;
    }
    if ((rc = dist_env_load(&e)) || (rc = dist_rendezvous(&e, "smoke", NULL, &rz)) ||
        (rc = coll_tcp_new(dist_rdzv_store(rz), NULL, &c)))
        die(dist_exit_code(rc));
    if (e.rank == fail_rank) {
        dist_log("Failing on purpose (--fail-rank)");
        die(5);
    }
    for (int i = 0; i < 1000; i++)
        v[i] = (float)(e.rank + i);
    if ((rc = coll_allreduce(c, v, 1000, COLL_SUM)) || (rc = coll_barrier(c)))
        die(dist_exit_code(rc));
    for (int i = 0; i < 1000; i++)
        if (v[i] != (float)(e.world_size * i + e.world_size * (e.world_size - 1) / 2)) {
            dist_log("Wrong sum at %d: %g", i, (double)v[i]);
            die(1);
        }
    if (e.rank == 0)
        printf("dist_smoke: %d ranks agree\n", e.world_size);
    coll_free(c);
    dist_rdzv_free(rz);
    return 0;
}
