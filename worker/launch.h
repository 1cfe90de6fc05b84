/*
 * launch.h - a local launcher (like `torchrun --standalone`): starts N ranks of a command on this
 * machine with the environment of DESIGN.md §3, forwards signals to them, and when one rank
 * fails, stops the others and returns the failed rank's status. The gantry-run binary
 * (gantry_run.c) is a thin getopt wrapper around launch_run().
 *
 * Each rank gets: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK (0),
 * NPROC_PER_NODE, LOCAL_WORLD_SIZE (torchrun's name), GANTRY_RDZV_TOKEN (random per launch,
 * unless already set in the environment), GANTRY_JOB (default "local").
 * Each rank runs in its own process group, so stopping a rank stops what it started.
 *
 * Node mode (world_size > 0): this machine is one node of a larger job, like torchrun's agent in
 * a pod: the ranks get RANK = rank_base + local rank, WORLD_SIZE = world_size, NODE_RANK =
 * node_rank and the given MASTER_ADDR/MASTER_PORT (rank 0's store, maybe on another node); no
 * token is made (every node must share the job's GANTRY_RDZV_TOKEN from the environment).
 * gantry-worker uses it when a pod holds several ranks (NPROC_PER_NODE > 1, gpusPerReplica).
 * Not done: restarts (the operator's job).
 */
#ifndef GANTRY_LAUNCH_H
#define GANTRY_LAUNCH_H

#ifdef __cplusplus
extern "C" {
#endif

struct launch_opts {
    int nproc;               /* ranks to start, >= 1 */
    const char *master_addr; /* default 127.0.0.1 */
    int master_port;         /* 0: a free port */
    int grace_ms;            /* SIGTERM, then this long, then SIGKILL (default 5000) */
    char *const *argv;       /* the command; argv[0] looked up in PATH */
    const char *file;        /* run this file instead of looking argv[0] up (NULL: argv[0]) */
    const char *name;        /* prefix of the launcher's own log lines (default "gantry-run") */
    /* node mode, when world_size > 0 (see above): */
    int world_size; /* the job's ranks, all nodes */
    int rank_base;  /* this node's first global rank */
    int node_rank;
};

/* Runs the ranks to completion. Returns 0 when all exit 0; else the first failure's status: its
 * exit code, or 128 + signal. When the launcher itself gets SIGINT/SIGTERM/SIGHUP it forwards it
 * to every rank and returns 128 + that signal. 64 for bad options. Blocks SIGCHLD, SIGINT,
 * SIGTERM, SIGHUP while running (restored on return); children start with the original mask. */
int launch_run(const struct launch_opts *o);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_LAUNCH_H */
