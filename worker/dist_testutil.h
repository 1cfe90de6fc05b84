/*
 * dist_testutil.h - helpers for the distributed runtime's tests: run each rank in a real forked
 * process on loopback and collect its exit status with a deadline.
 * Test-only; static inline so each test executable gets its own copy.
 */
#ifndef GANTRY_DIST_TESTUTIL_H
#define GANTRY_DIST_TESTUTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/dist.h"

/* A loopback port that was free a moment ago (bind 0, read it, close). Good enough for tests. */
static inline int tu_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t sl = sizeof(a);
    int s = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &sl) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

/* Forks a child that runs fn(rank, arg) and exits with its return value. */
static inline pid_t tu_spawn(int (*fn)(int rank, void *arg), int rank, void *arg)
{
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0)
        exit(fn(rank, arg)); /* exit, not _exit: LeakSanitizer checks the child too */
    return pid;
}

/* Waits for pid up to timeout_ms; returns its exit code, 128+signal, or -1 on timeout (the child
 * is then killed). *elapsed_ms (may be NULL) gets how long it took. */
static inline int tu_wait(pid_t pid, int timeout_ms, int64_t *elapsed_ms)
{
    int64_t start = dist_now_ms();
    int st;

    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (dist_now_ms() - start > timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (elapsed_ms)
        *elapsed_ms = dist_now_ms() - start;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

static inline void tu_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A dist_env for rank r of a loopback job on port. */
static inline void tu_env(struct dist_env *e, int port, int rank, int world, const char *token)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->master_addr, sizeof(e->master_addr), "127.0.0.1");
    e->master_port = port;
    e->rank = rank;
    e->world_size = world;
    e->nproc_per_node = world;
    e->local_rank = rank;
    snprintf(e->token, sizeof(e->token), "%s", token);
    e->rdzv_timeout_s = 30;
    e->peer_timeout_s = 10;
}

#endif /* GANTRY_DIST_TESTUTIL_H */
