/*
 * gantry_run.c - `gantry-run --nproc N -- CMD [ARGS...]`: runs N local ranks of CMD with the
 * rendezvous environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK,
 * NPROC_PER_NODE, GANTRY_RDZV_TOKEN), like `torchrun --standalone`; with --nnodes M and
 * --node-rank R, node R's N ranks of an M-node job, like torchrun's static rendezvous (every node
 * names node 0's address and port and shares GANTRY_RDZV_TOKEN). See launch.h.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/launch.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gantry-run --nproc N [options] -- CMD [ARGS...]\n"
            "Starts N ranks of CMD on this machine with the rendezvous environment.\n"
            "  -n, --nproc N          number of ranks (required)\n"
            "      --nnodes M         nodes of the job, each running N ranks (default 1)\n"
            "      --node-rank R      this node's index, 0..M-1 (ranks R*N .. R*N+N-1)\n"
            "      --master-addr A    address of rank 0's store (default 127.0.0.1; with\n"
            "                         --nnodes > 1: node 0's address, required)\n"
            "      --master-port P    its port (default: a free one; with --nnodes > 1:\n"
            "                         required)\n"
            "      --grace S          seconds between SIGTERM and SIGKILL when stopping ranks "
            "(default 5)\n"
            "  -h, --help             this text\n"
            "With --nnodes > 1 every node needs the same GANTRY_RDZV_TOKEN in its environment\n"
            "(e.g. export GANTRY_RDZV_TOKEN=$(openssl rand -hex 32) once, copied to each node).\n"
            "Exit status: 0 if every rank succeeded, else the first failed rank's status\n"
            "(128+signal if it was killed by a signal).\n");
}

#define RUN_MAX_NPROC 1024    /* ranks on one machine */
#define RUN_MAX_WORLD (1 << 20) /* the worker's WORLD_SIZE limit (dist.c) */

/* A flag's value as a whole number in lo..hi, or exit 64 naming it: atoi read "2x" as 2. */
static int int_arg(const char *flag, const char *v, int lo, int hi)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "gantry-run: --%s %s: want a whole number in %d..%d\n", flag, v, lo, hi);
        exit(64);
    }
    return (int)x;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"nproc", required_argument, NULL, 'n'},
                                         {"master-addr", required_argument, NULL, 'a'},
                                         {"master-port", required_argument, NULL, 'p'},
                                         {"grace", required_argument, NULL, 'g'},
                                         {"nnodes", required_argument, NULL, 'N'},
                                         {"node-rank", required_argument, NULL, 'R'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    struct launch_opts o = {0};
    int c, nnodes = 1;

    while ((c = getopt_long(argc, argv, "+n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': o.nproc = int_arg("nproc", optarg, 1, RUN_MAX_NPROC); break;
        case 'a': o.master_addr = optarg; break;
        case 'p': o.master_port = int_arg("master-port", optarg, 1, 65535); break;
        case 'g': o.grace_ms = int_arg("grace", optarg, 1, 3600) * 1000; break;
        case 'N': nnodes = int_arg("nnodes", optarg, 1, 65536); break;
        case 'R': o.node_rank = int_arg("node-rank", optarg, 0, 65535); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 64;
        }
    }
    if (o.nproc < 1 || optind >= argc) {
        usage(stderr);
        return 64;
    }
    if (nnodes < 1 || o.node_rank < 0 || o.node_rank >= nnodes) {
        fprintf(stderr, "gantry-run: --node-rank must be in 0..%d (--nnodes %d)\n", nnodes - 1,
                nnodes);
        return 64;
    }
    if ((long)nnodes * o.nproc > RUN_MAX_WORLD) {
        fprintf(stderr, "gantry-run: --nproc %d x --nnodes %d ranks is more than a job can have "
                        "(%d)\n", o.nproc, nnodes, RUN_MAX_WORLD);
        return 64;
    }
    if (nnodes > 1) {
        const char *tok = getenv("GANTRY_RDZV_TOKEN");
        if (!o.master_addr || o.master_port <= 0) {
            fprintf(stderr, "gantry-run: --nnodes %d needs --master-addr and --master-port: node "
                            "0's address and a port free there, the same on every node\n",
                    nnodes);
            return 64;
        }
        if (!tok || !*tok) {
            fprintf(stderr, "gantry-run: --nnodes %d needs GANTRY_RDZV_TOKEN in the environment, "
                            "the same on every node (e.g. openssl rand -hex 32)\n",
                    nnodes);
            return 64;
        }
        o.world_size = nnodes * o.nproc;
        o.rank_base = o.node_rank * o.nproc;
    }
    o.argv = argv + optind;
    return launch_run(&o);
}
