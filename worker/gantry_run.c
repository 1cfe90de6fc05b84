/*
 * gantry_run.c - `gantry-run --nproc N -- CMD [ARGS...]`: runs N local ranks of CMD with the
 * rendezvous environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK,
 * NPROC_PER_NODE, GANTRY_RDZV_TOKEN), like `torchrun --standalone`. See launch.h.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "worker/launch.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gantry-run --nproc N [options] -- CMD [ARGS...]\n"
            "Starts N ranks of CMD on this machine with the rendezvous environment.\n"
            "  -n, --nproc N          number of ranks (required)\n"
            "      --master-addr A    address of rank 0's store (default 127.0.0.1)\n"
            "      --master-port P    its port (default: a free one)\n"
            "      --grace S          seconds between SIGTERM and SIGKILL when stopping ranks "
            "(default 5)\n"
            "  -h, --help             this text\n"
            "Exit status: 0 if every rank succeeded, else the first failed rank's status\n"
            "(128+signal if it was killed by a signal).\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"nproc", required_argument, NULL, 'n'},
                                         {"master-addr", required_argument, NULL, 'a'},
                                         {"master-port", required_argument, NULL, 'p'},
                                         {"grace", required_argument, NULL, 'g'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    struct launch_opts o = {0};
    int c;

    while ((c = getopt_long(argc, argv, "+n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': o.nproc = atoi(optarg); break;
        case 'a': o.master_addr = optarg; break;
        case 'p': o.master_port = atoi(optarg); break;
        case 'g': o.grace_ms = atoi(optarg) * 1000; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 64;
        }
    }
    if (o.nproc < 1 || optind >= argc) {
        usage(stderr);
        return 64;
    }
    o.argv = argv + optind;
    return launch_run(&o);
}
