/*
 * launch.c - the local launcher (see launch.h).
 */
#include "worker/launch.h"

#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "common/xalloc.h"
#include "worker/dist.h"
#include "worker/net.h"

struct rank {
    pid_t pid;
    bool done;
    int status;    /* exit code or 128 + signal */
    int order;     /* 1 for the first rank reaped, 2 for the next, ... */
    bool stopped;  /* exited after we signalled it */
};

static char say_prefix[64] = "gantry-run: ";

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    dist_vlog_line(say_prefix, fmt, ap);
    va_end(ap);
}

static int free_port(const char *addr)
{
    int fd, port;

    if (net_listen(addr, 0, &fd, &port) != 0)
        return -1;
    close(fd); /* a small race with other programs; the store reports a clear error if lost */
    return port;
}

static void set_int(const char *name, int v)
{
    char b[32];
    snprintf(b, sizeof(b), "%d", v);
    setenv(name, b, 1);
}

/* In the child: the rank's environment, its own process group, the original signal mask. */
static void exec_rank(const struct launch_opts *o, int local, int port, const char *token,
                      const sigset_t *mask)
{
    const char *file = o->file ? o->file : o->argv[0];

    setpgid(0, 0);
    if (token)
        setenv("GANTRY_RDZV_TOKEN", token, 0); /* one already in the environment wins */
    setenv("MASTER_ADDR", o->master_addr, 1);
    set_int("MASTER_PORT", port);
    set_int("WORLD_SIZE", o->world_size > 0 ? o->world_size : o->nproc);
    set_int("RANK", o->rank_base + local);
    set_int("LOCAL_RANK", local);
    set_int("NODE_RANK", o->node_rank);
    set_int("NPROC_PER_NODE", o->nproc);
    set_int("LOCAL_WORLD_SIZE", o->nproc);
    if (!getenv("GANTRY_JOB"))
        setenv("GANTRY_JOB", "local", 1);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvp(file, o->argv);
    fprintf(stderr, "%scould not run %s: %s\n", say_prefix, file, strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

static void signal_all(struct rank *r, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (!r[i].done && r[i].pid > 0)
            kill(-r[i].pid, sig); /* the rank's whole process group */
}

/* Reaps exited ranks, `first` (the pid SIGCHLD named, or -1) before any other: when one rank
 * dies and its peers exit right after it, the one that died first is the one reported.
 * Returns the index of the first newly failed rank, or -1. */
static int reap(struct rank *r, int n, int *alive, pid_t first, bool stopping)
{
    int failed = -1, st;
    pid_t pid;

    while ((pid = first > 0 ? waitpid(first, &st, WNOHANG) : 0) > 0 ||
           (pid = waitpid(-1, &st, WNOHANG)) > 0) {
        first = -1;
        for (int i = 0; i < n; i++) {
            if (r[i].pid != pid || r[i].done)
                continue;
            r[i].done = true;
            (*alive)--;
            r[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            r[i].order = n - *alive; /* 1 for the first reaped */
            r[i].stopped = stopping;
            if (r[i].status != 0 && failed < 0)
                failed = i;
        }
    }
    return failed;
}

static void make_token(char hex[65])
{
    unsigned char b[32];

    if (RAND_bytes(b, sizeof(b)) != 1)
        abort();
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
}

/* Which failure the launcher reports. A rank that dies takes its peers down with it (they exit
 * DIST_EXIT_RETRY: "a peer died") within microseconds, too fast to order by exit time alone.
 * So: a permanent status (64-78: a restart cannot help) first, then any other failure, then
 * DIST_EXIT_RETRY, then ranks we stopped ourselves; within a class, the first one reaped. */
static int rank_class(const struct rank *r)
{
    if (r->status == 0)
        return 9;
    if (r->stopped && (r->status == 128 + SIGTERM || r->status == 128 + SIGKILL))
        return 3;
    if (r->status >= 64 && r->status <= 78)
        return 0;
    return r->status == DIST_EXIT_RETRY ? 2 : 1;
}

static int root_cause(const struct rank *r, int n)
{
    int best = -1;

    for (int i = 0; i < n; i++)
        if (rank_class(&r[i]) < 9 &&
            (best < 0 || rank_class(&r[i]) < rank_class(&r[best]) ||
             (rank_class(&r[i]) == rank_class(&r[best]) && r[i].order < r[best].order)))
            best = i;
    return best;
}

/* Waits for every rank; stops them all when one fails or a signal arrives. */
static int supervise(struct rank *r, int n, int base, int grace_ms, const sigset_t *set)
{
    int alive = n, result = 0, forwarded = 0;
    int64_t kill_at = -1;
    struct timespec tick = {0, 100 * 1000 * 1000};
    pid_t first = -1;

    while (alive > 0) {
        int f = reap(r, n, &alive, first, kill_at >= 0);
        if (f >= 0 && result == 0) {
            result = r[f].status;
            if (alive > 0 && kill_at < 0) {
                say("rank %d (pid %d) exited with status %d; stopping the other %d rank(s)",
                    base + f, (int)r[f].pid, r[f].status, alive);
                signal_all(r, n, SIGTERM);
                kill_at = dist_now_ms() + grace_ms;
            }
        }
        if (alive == 0)
            break;
        if (kill_at >= 0 && dist_now_ms() >= kill_at) {
            say("%d rank(s) still running %d ms after SIGTERM: sending SIGKILL", alive, grace_ms);
            signal_all(r, n, SIGKILL);
            kill_at = dist_now_ms() + 3600 * 1000;
        }
        siginfo_t si;
        int sig = sigtimedwait(set, &si, &tick);
        /* Only one SIGCHLD stays pending, and it names the child that exited first. */
        first = sig == SIGCHLD ? si.si_pid : -1;
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            say("got signal %d: forwarding it to %d rank(s)", sig, alive);
            signal_all(r, n, sig);
            forwarded = sig;
            if (kill_at < 0)
                kill_at = dist_now_ms() + grace_ms;
        }
    }
    if (forwarded)
        return 128 + forwarded;
    int rc = root_cause(r, n);
    if (rc >= 0 && r[rc].status != result)
        say("reporting rank %d's status %d as the cause (the others followed it)", base + rc,
            r[rc].status);
    return rc >= 0 ? r[rc].status : 0;
}

int launch_run(const struct launch_opts *o)
{
    struct launch_opts lo = *o;
    sigset_t set, orig;
    struct rank *r;
    int port, rc;
    char token[65];

    snprintf(say_prefix, sizeof(say_prefix), "%s: ", lo.name ? lo.name : "gantry-run");
    if (lo.nproc < 1 || !lo.argv || !lo.argv[0]) {
        say("--nproc must be >= 1 and a command is required (gantry-run --nproc N -- cmd ...)");
        return 64;
    }
    if (lo.world_size > 0) {
        if (lo.rank_base < 0 || lo.node_rank < 0 || lo.rank_base > lo.world_size - lo.nproc) {
            say("this node's ranks %d..%d do not fit WORLD_SIZE=%d (RANK is the node's first "
                "rank, NODE_RANK x NPROC_PER_NODE; NPROC_PER_NODE=%d); fix the environment",
                lo.rank_base, lo.rank_base + lo.nproc - 1, lo.world_size, lo.nproc);
            return 64;
        }
        if (!lo.master_addr || lo.master_port <= 0) {
            say("a node of a larger job needs MASTER_ADDR and MASTER_PORT (rank 0's store)");
            return 64;
        }
    } else {
        lo.rank_base = lo.node_rank = 0;
    }
    if (!lo.master_addr)
        lo.master_addr = "127.0.0.1";
    if (lo.grace_ms <= 0)
        lo.grace_ms = 5000;
    port = lo.master_port > 0 ? lo.master_port : free_port(lo.master_addr);
    if (port <= 0) {
        say("could not find a free port on %s; pass --master-port", lo.master_addr);
        return 69;
    }
    /* Standalone: one random token for the ranks; a node of a job uses the job's. */
    if (lo.world_size <= 0)
        make_token(token);
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &orig);
    r = xcalloc((size_t)lo.nproc, sizeof(*r));
    for (int i = 0; i < lo.nproc; i++) {
        fflush(NULL);
        r[i].pid = fork();
        if (r[i].pid == 0)
            exec_rank(&lo, i, port, lo.world_size > 0 ? NULL : token, &orig);
        if (r[i].pid < 0) {
            say("fork failed: %s", strerror(errno));
            r[i].done = true;
            signal_all(r, i, SIGKILL);
            for (int k = 0; k < i; k++)
                waitpid(r[k].pid, NULL, 0);
            rc = DIST_EXIT_RETRY; /* EAGAIN, ENOMEM: the pids limit, memory; not the spec's */
            goto out;
        }
        setpgid(r[i].pid, r[i].pid); /* also here: no race with an early signal_all */
    }
    rc = supervise(r, lo.nproc, lo.rank_base, lo.grace_ms, &set);
out:
    free(r);
    sigprocmask(SIG_SETMASK, &orig, NULL);
    return rc;
}
