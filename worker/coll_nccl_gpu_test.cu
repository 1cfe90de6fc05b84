/*
 * coll_nccl_gpu_test.cu - the nccl backend on one GPU (world size 1: NCCL refuses two ranks on
 * one device): all-reduce, broadcast, all-gather and barrier through the coll interface, on
 * device memory. Exits 77 (skipped) without a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/test.h"
#include "worker/coll_nccl.h"
#include "worker/store.h"

static void test_world1(void)
{
    struct store_server *srv = NULL;
    struct store *st = NULL;
    struct coll *c = NULL;
    struct store_server_opts so = {};
    so.bind_addr = "127.0.0.1";
    so.token = "t";
    so.world_size = 1;
    const size_t n = 1 << 20;
    float *d = NULL, *h = (float *)malloc(n * sizeof(float));

    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    struct store_opts co = {};
    co.host = "127.0.0.1";
    co.port = store_server_port(srv);
    co.token = "t";
    co.world_size = 1;
    co.connect_timeout_ms = co.op_timeout_ms = 10000;
    TEST_EQ_INT(store_connect(&co, &st), 0);
    TEST_EQ_INT(coll_nccl_new(st, 0, NULL, NULL, &c), 0);
    if (!c)
        goto out;
    TEST_EQ_STR(coll_backend(c), "nccl");
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(i % 101);
    TEST_EQ_INT(cudaMalloc((void **)&d, 2 * n * sizeof(float)), 0);
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    TEST_EQ_INT(coll_allreduce(c, d, n, COLL_SUM), 0);
    TEST_EQ_INT(coll_broadcast(c, d, n * sizeof(float), 0), 0);
    TEST_EQ_INT(coll_allgather(c, d, d + n, n * sizeof(float)), 0);
    TEST_EQ_INT(coll_barrier(c), 0);
    cudaMemcpy(h, d + n, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i += 9973)
        TEST_NEAR(h[i], (float)(i % 101), 0);
out:
    cudaFree(d);
    coll_free(c);
    store_free(st);
    store_server_free(srv);
    free(h);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
        test_skip("no CUDA device");
    TEST_RUN(test_world1);
    return test_summary();
}
