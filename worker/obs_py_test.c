/*
 * obs_py_test.c - what the worker writes, read by the upstream Python readers.
 *
 *   obs_py_test [PYENV_SH OBS_CHECK_PY]    (defaults: hack/ of the source tree it was built from)
 *
 * Writes two TensorBoard event files into a temp dir (a run, then a run resumed at step 6 with a
 * SessionLog START), serves /metrics and /progress on an ephemeral loopback port with known
 * values, then runs hack/obs_check.py in hack/pyenv.sh's venv: TensorBoard's EventAccumulator
 * must find the expected tags and steps, prometheus_client's parser the expected samples. The
 * scenario is spelled out in obs_check.py's docstring; keep the two in step.
 * Skips (77) when the venv cannot be built (no package registry reachable).
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/test.h"
#include "worker/metrics.h"
#include "worker/tbevent.h"

extern char **environ;

static void write_events(const char *dir)
{
    struct tbevent_writer *w = tbevent_open(dir);

    if (!TEST_CHECK(w != NULL))
        return;
    for (int s = 1; s <= 10; s++) {
        TEST_EQ_INT(tbevent_scalar(w, "train/loss", s, 1.0f / (float)s), 0);
        TEST_EQ_INT(tbevent_scalar(w, "train/lr", s, 0.001f * (float)s), 0);
        if (s % 5 == 0)
            TEST_EQ_INT(tbevent_scalar(w, "eval/accuracy", s, 0.1f * (float)s), 0);
    }
    TEST_EQ_INT(tbevent_close(w), 0);

    /* The job restarts from a checkpoint at step 6 and replays steps 6.. */
    w = tbevent_open(dir);
    if (!TEST_CHECK(w != NULL))
        return;
    TEST_EQ_INT(tbevent_session_start(w, 6), 0);
    for (int s = 6; s <= 12; s++)
        TEST_EQ_INT(tbevent_scalar(w, "train/loss", s, 100.0f + (float)s), 0);
    TEST_EQ_INT(tbevent_close(w), 0);
}

static void record_metrics(struct metrics *m)
{
    metrics_begin(m, 0, 420, 2, 2, 10.0);
    for (int s = 1; s <= 42; s++) {
        struct metrics_step st = {.step = s,
                                  .epoch = s / 22,
                                  .loss = 0.25,
                                  .lr = 1e-3,
                                  .samples = 64,
                                  .tokens = 6400,
                                  .now = 10.0 + 0.5 * s};
        metrics_step(m, &st);
    }
    metrics_checkpoint(m, 40, 0.75);
    metrics_allreduce(m, 0.004);
    metrics_allreduce(m, 0.004);
    metrics_allreduce(m, 2.0);
    metrics_eval(m, "accuracy", 0.5);
}

/* The venv's directory from `pyenv.sh` (which builds it on first use), or NULL. */
static char *venv_dir(const char *pyenv_sh)
{
    char cmd[4096], line[4096];
    FILE *p;
    char *out = NULL;

    snprintf(cmd, sizeof(cmd), "'%s'", pyenv_sh);
    p = popen(cmd, "r");
    if (!p)
        return NULL;
    if (fgets(line, sizeof(line), p)) {
        line[strcspn(line, "\n")] = '\0';
        out = strdup(line);
    }
    if (pclose(p) != 0) {
        free(out);
        out = NULL;
    }
    return out;
}

/* Runs `python3 script args...` from the venv; returns its exit status (or -1). */
static int run_python(const char *venv, char *const args[])
{
    char py[4096];
    char *argv[16];
    int n = 0, status;
    pid_t pid;

    snprintf(py, sizeof(py), "%s/bin/python3", venv);
    argv[n++] = py;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    errno = posix_spawn(&pid, py, NULL, NULL, argv, environ);
    if (errno != 0) {
        perror(py);
        return -1;
    }
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/obs_py_test.XXXXXX";
    char events[300], metrics_url[128], progress_url[128], cmd[400];
    struct metrics *m = NULL;
    char *venv = NULL;

    const char *pyenv_sh = argc == 3 ? argv[1] : OBS_SOURCE_DIR "/hack/pyenv.sh";
    char *check_py = argc == 3 ? argv[2] : OBS_SOURCE_DIR "/hack/obs_check.py";

    if (argc != 1 && argc != 3) {
        fprintf(stderr, "usage: obs_py_test [PYENV_SH OBS_CHECK_PY]\n");
        return 64;
    }
    venv = venv_dir(pyenv_sh);
    if (!venv)
        test_skip("hack/pyenv.sh could not build the Python venv (tensorboard, prometheus-client)");
    if (!TEST_CHECK(mkdtemp(dir) != NULL))
        goto out;
    snprintf(events, sizeof(events), "%s/job/tb", dir);
    write_events(events);

    m = metrics_new();
    if (!TEST_CHECK(metrics_serve(m, "127.0.0.1", 0) == 0))
        goto out;
    record_metrics(m);
    snprintf(metrics_url, sizeof(metrics_url), "http://127.0.0.1:%d/metrics", metrics_port(m));
    snprintf(progress_url, sizeof(progress_url), "http://127.0.0.1:%d/progress", metrics_port(m));

    char *args[] = {check_py,    "--events",   events,       "--serve", "--metrics",
                    metrics_url, "--progress", progress_url, NULL};
    TEST_EQ_INT(run_python(venv, args), 0);
out:
    metrics_free(m);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(venv);
    return test_summary();
}
