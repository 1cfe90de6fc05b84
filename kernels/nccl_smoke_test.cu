// A single-rank NCCL communicator all-reduce: proves the NCCL link and, on a GPU, the library.
// Without a device it prints NCCL's version and exits 77 (skipped).
#include <nccl.h>
#include <stdio.h>

#include "kernels/cuda_common.h"

#define NCCL_CHECK(call)                                                                           \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "NCCL error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
                    ncclGetErrorString(r_));                                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    int version = 0, dev = 0;
    ncclComm_t comm;
    float host[4] = {1, 2, 3, 4}, *buf;

    NCCL_CHECK(ncclGetVersion(&version));
    printf("NCCL %d.%d.%d linked\n", version / 10000, version / 100 % 100, version % 100);
    if (!cuda_have_device()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    NCCL_CHECK(ncclCommInitAll(&comm, 1, &dev));
    CUDA_CHECK(cudaMalloc(&buf, sizeof(host)));
    CUDA_CHECK(cudaMemcpy(buf, host, sizeof(host), cudaMemcpyHostToDevice));
    NCCL_CHECK(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, 0));
    CUDA_CHECK(cudaMemcpy(host, buf, sizeof(host), cudaMemcpyDeviceToHost));
    NCCL_CHECK(ncclCommDestroy(comm));
    cudaFree(buf);
    /* One rank: the sum is the input. */
    int ok = host[0] == 1 && host[1] == 2 && host[2] == 3 && host[3] == 4;
    printf("single-rank all-reduce: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
