/*
 * rec_bench - the cost of one reconcile pass (operator/rec.c) for a large running job.
 *
 *   rec_bench [--replicas N] [--rounds R]
 *
 * A Running job of N replicas (default 1000) with every pod of its gang Running and Ready, as
 * the informer hands them over: reconciles it R times (default 50) and prints the mean time of
 * a pass. Each worker's pod event reconciles its job, so a gang of N pods starting costs N
 * passes: a pass that grows with N * N (a replica looked up by scanning every pod) makes a large
 * job's start quadratic. Pure CPU, no API server.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "operator/rec.h"

static double mono(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"replicas", required_argument, NULL, 'n'},
                                          {"rounds", required_argument, NULL, 'r'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int replicas = 1000, rounds = 50, c;
    char text[512];
    struct rec_pod *pods;
    struct rec_input in = {0};
    struct tj tj;
    json_t *job;
    char *config;
    double t0;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'n')
            replicas = atoi(optarg);
        else if (c == 'r')
            rounds = atoi(optarg);
        else {
            printf("usage: rec_bench [--replicas N (1..%d, default 1000)] [--rounds R "
                   "(default 50)]\n  the mean time of one reconcile pass of a Running job whose "
                   "N pods all run\n", TJ_REPLICAS_MAX);
            return c == 'h' ? 0 : 64;
        }
    }
    if (replicas < 1 || replicas > TJ_REPLICAS_MAX || rounds < 1) {
        fprintf(stderr, "rec_bench: --replicas must be 1..%d and --rounds >= 1\n",
                TJ_REPLICAS_MAX);
        return 64;
    }
    snprintf(text, sizeof(text),
             "{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"big\",\"namespace\":\"ml\","
             "\"uid\":\"u\",\"generation\":1},\"spec\":{\"replicas\":%d},\"status\":{\"phase\":"
             "\"Running\",\"restarts\":0,\"observedGeneration\":1}}", replicas);
    job = json_loads(text, 0, NULL);
    if (tj_parse(job, &tj, text, sizeof(text)) != 0) {
        fprintf(stderr, "rec_bench: %s\n", text);
        return 70;
    }
    pods = calloc((size_t)replicas, sizeof(*pods));
    for (int i = 0; i < replicas; i++) {
        render_pod_name(&tj, i, pods[i].name, sizeof(pods[i].name));
        snprintf(pods[i].uid, sizeof(pods[i].uid), "uid-%d", i);
        pods[i].index = i;
        pods[i].phase = REC_POD_RUNNING;
        pods[i].ready = true;
        pods[i].exit_code = -1;
    }
    in.job = &tj;
    in.pods = pods;
    in.npods = (size_t)replicas;
    in.have_service = in.have_configmap = in.have_secret = true;
    in.configmap_data = config = render_config_json(&tj);
    in.expectations_met = true;
    in.now = 1796200000;
    in.token = "t";
    in.progress_restart = -1;
    t0 = mono();
    for (int k = 0; k < rounds; k++) {
        struct rec_result r;
        if (rec_reconcile(&in, &r) != 0 || r.nactions != 0) {
            fprintf(stderr, "rec_bench: a steady running job got %zu actions\n", r.nactions);
            return 70;
        }
        rec_result_cleanup(&r);
    }
    printf("rec_bench: %d replicas, all running: %.3f ms a reconcile pass (mean of %d)\n",
           replicas, (mono() - t0) * 1e3 / rounds, rounds);
    free(pods);
    free(config);
    tj_cleanup(&tj);
    json_decref(job);
    return 0;
}
